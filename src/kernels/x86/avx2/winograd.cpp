// Winograd transforms on AVX2 (kernels/winograd.hpp): 8 channels a
// vector, a tile's 16 values in registers, per variant (Tile 2: F(2x2,
// 3x3), 3: F(3x3, 2x2)); the same additions in the same order as the
// reference row.
#include "kernels/winograd.hpp"
#include "kernels/x86/avx2/epilogue.hpp"

namespace tessera::kernels::avx2 {

namespace {

// B^T v of four vectors a column (or row) of a patch.
template <int Tile>
void input_rows(const __m256* v, int step, __m256* out) {
  out[0] = _mm256_sub_ps(v[0], v[2 * step]);
  out[1] = _mm256_add_ps(v[step], v[2 * step]);
  out[2] = _mm256_sub_ps(v[2 * step], v[step]);
  out[3] = Tile == 2 ? _mm256_sub_ps(v[step], v[3 * step]) : _mm256_sub_ps(v[3 * step], v[step]);
}

// A^T v: a tile's outputs from four vectors of M.
template <int Tile>
void output_rows(const __m256* v, int step, __m256* out) {
  out[0] = _mm256_add_ps(_mm256_add_ps(v[0], v[step]), v[2 * step]);
  if constexpr (Tile == 2) {
    out[1] = _mm256_sub_ps(_mm256_sub_ps(v[step], v[2 * step]), v[3 * step]);
  } else {
    out[1] = _mm256_sub_ps(v[step], v[2 * step]);
    out[2] = _mm256_add_ps(_mm256_add_ps(v[step], v[2 * step]), v[3 * step]);
  }
}

template <int Tile>
void input(const WinogradGeometry& g, const void* x, std::int64_t t0, std::int64_t count, void* v, DType v_dtype,
           std::int64_t ld, std::int64_t plane) {
  for (std::int64_t r = 0; r < count; ++r) {
    const std::int64_t t = t0 + r, ih0 = Tile * (t / g.tiles_w) - g.pad_h, iw0 = Tile * (t % g.tiles_w) - g.pad_w;
    bool row_in[4], col_in[4];
    for (int i = 0; i < 4; ++i) row_in[i] = ih0 + i >= 0 && ih0 + i < g.in_h, col_in[i] = iw0 + i >= 0 && iw0 + i < g.in_w;
    const void* at = advance(x, g.x_dtype, ih0 * g.x_row_stride + iw0 * g.x_col_stride);
    for (std::int64_t c = 0; c < g.channels; c += 8) {
      const std::int64_t count8 = std::min<std::int64_t>(8, g.channels - c);
      __m256 d[16], u[16];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j)
          d[4 * i + j] = row_in[i] && col_in[j]
                             ? load8_n(advance(at, g.x_dtype, i * g.x_row_stride + j * g.x_col_stride + c), g.x_dtype, count8)
                             : _mm256_setzero_ps();
      for (int j = 0; j < 4; ++j) {  // B^T d, column j
        __m256 w[4];
        input_rows<Tile>(d + j, 4, w);
        for (int i = 0; i < 4; ++i) u[4 * i + j] = w[i];
      }
      void* out = advance(v, v_dtype, r * ld + c);
      for (int i = 0; i < 4; ++i) {  // (B^T d) B, row i
        __m256 w[4];
        input_rows<Tile>(u + 4 * i, 1, w);
        for (int j = 0; j < 4; ++j) store8_n(advance(out, v_dtype, (4 * i + j) * plane), v_dtype, w[j], count8);
      }
    }
  }
}

template <int Tile>
void output(const WinogradGeometry& g, const float* m, std::int64_t ld, std::int64_t plane, std::int64_t t0,
            std::int64_t count, std::int64_t n0, std::int64_t n1, const WinogradOutput& out) {
  const EpilogueArgs& ep = out.ep;
  for (std::int64_t r = 0; r < count; ++r) {
    const std::int64_t t = t0 + r, oh0 = Tile * (t / g.tiles_w), ow0 = Tile * (t % g.tiles_w);
    const int rows = int(std::min<std::int64_t>(Tile, g.out_h - oh0)), cols = int(std::min<std::int64_t>(Tile, g.out_w - ow0));
    for (std::int64_t n = n0; n < n1; n += 8) {
      const std::int64_t count8 = std::min<std::int64_t>(8, n1 - n);
      const float* s = m + r * ld + n;
      __m256 v[16], w[4 * Tile];
      for (int i = 0; i < 16; ++i) v[i] = load8_n(s + i * plane, DType::f32, count8);
      for (int j = 0; j < 4; ++j) {  // A^T M, column j
        __m256 col[Tile];
        output_rows<Tile>(v + j, 4, col);
        for (int i = 0; i < Tile; ++i) w[4 * i + j] = col[i];
      }
      for (int i = 0; i < rows; ++i) {  // (A^T M) A, row i
        __m256 y[Tile];
        output_rows<Tile>(w + 4 * i, 1, y);
        for (int j = 0; j < cols; ++j) {
          const std::int64_t oh = oh0 + i, ow = ow0 + j;
          const void* residual =
              ep.residual ? advance(ep.residual, ep.residual_dtype, oh * out.residual_h_stride + ow * ep.residual_row_stride + n) : nullptr;
          store8_n(advance(out.y, out.y_dtype, oh * out.y_row_stride + ow * out.y_col_stride + n), out.y_dtype,
                   epilogue_value8(ep, y[j], n, residual, count8), count8);
        }
      }
    }
  }
}

}  // namespace

void winograd_input(const WinogradGeometry& g, const void* x, std::int64_t t0, std::int64_t count, void* v, DType v_dtype,
                    std::int64_t ld, std::int64_t plane) {
  (g.tile == 2 ? input<2> : input<3>)(g, x, t0, count, v, v_dtype, ld, plane);
}

void winograd_output(const WinogradGeometry& g, const float* m, std::int64_t ld, std::int64_t plane, std::int64_t t0,
                     std::int64_t count, std::int64_t n0, std::int64_t n1, const WinogradOutput& out) {
  (g.tile == 2 ? output<2> : output<3>)(g, m, ld, plane, t0, count, n0, n1, out);
}

}  // namespace tessera::kernels::avx2
