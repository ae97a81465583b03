// Winograd transforms on AVX2 (kernels/winograd.hpp): 8 channels a
// vector, a tile's values in registers, per variant (Tile 2: F(2x2, 3x3),
// 3: F(3x3, 2x2), 4: F(4x4, 3x3)); the same operations in the same order as
// the reference row.
#include "kernels/winograd.hpp"
#include "kernels/x86/avx2/epilogue.hpp"

namespace tessera::kernels::avx2 {

namespace {

// B^T v of the vectors of a column (or row) of a patch.
template <int Tile>
void input_rows(const __m256* v, int step, __m256* out) {
  if constexpr (Tile == 4) {
    const __m256 four = _mm256_set1_ps(4.0f), five = _mm256_set1_ps(5.0f);
    const __m256 t1 = _mm256_fnmadd_ps(four, v[2 * step], v[4 * step]), t2 = _mm256_fnmadd_ps(four, v[step], v[3 * step]);
    const __m256 t3 = _mm256_sub_ps(v[4 * step], v[2 * step]);
    const __m256 t4 = _mm256_add_ps(_mm256_sub_ps(v[3 * step], v[step]), _mm256_sub_ps(v[3 * step], v[step]));
    out[0] = _mm256_fmadd_ps(four, v[0], _mm256_fnmadd_ps(five, v[2 * step], v[4 * step]));
    out[1] = _mm256_add_ps(t1, t2), out[2] = _mm256_sub_ps(t1, t2);
    out[3] = _mm256_add_ps(t3, t4), out[4] = _mm256_sub_ps(t3, t4);
    out[5] = _mm256_fmadd_ps(four, v[step], _mm256_fnmadd_ps(five, v[3 * step], v[5 * step]));
  } else {
    out[0] = _mm256_sub_ps(v[0], v[2 * step]);
    out[1] = _mm256_add_ps(v[step], v[2 * step]);
    out[2] = _mm256_sub_ps(v[2 * step], v[step]);
    out[3] = Tile == 2 ? _mm256_sub_ps(v[step], v[3 * step]) : _mm256_sub_ps(v[3 * step], v[step]);
  }
}

// A^T v: a tile's outputs from the vectors of a column (or row) of M.
template <int Tile>
void output_rows(const __m256* v, int step, __m256* out) {
  if constexpr (Tile == 4) {
    const __m256 a = _mm256_add_ps(v[step], v[2 * step]), b = _mm256_sub_ps(v[step], v[2 * step]);
    const __m256 c = _mm256_add_ps(v[3 * step], v[4 * step]), d = _mm256_sub_ps(v[3 * step], v[4 * step]);
    out[0] = _mm256_add_ps(_mm256_add_ps(v[0], a), c);
    out[1] = _mm256_fmadd_ps(_mm256_set1_ps(2.0f), d, b);
    out[2] = _mm256_fmadd_ps(_mm256_set1_ps(4.0f), c, a);
    out[3] = _mm256_add_ps(_mm256_fmadd_ps(_mm256_set1_ps(8.0f), d, b), v[5 * step]);
  } else if constexpr (Tile == 2) {
    out[0] = _mm256_add_ps(_mm256_add_ps(v[0], v[step]), v[2 * step]);
    out[1] = _mm256_sub_ps(_mm256_sub_ps(v[step], v[2 * step]), v[3 * step]);
  } else {
    out[0] = _mm256_add_ps(_mm256_add_ps(v[0], v[step]), v[2 * step]);
    out[1] = _mm256_sub_ps(v[step], v[2 * step]);
    out[2] = _mm256_add_ps(_mm256_add_ps(v[step], v[2 * step]), v[3 * step]);
  }
}

template <int Tile>
void input(const WinogradGeometry& g, const void* x, std::int64_t t0, std::int64_t count, float* v, std::int64_t ld,
           std::int64_t plane) {
  constexpr int P = int(winograd_patch(Tile));
  for (std::int64_t r = 0; r < count; ++r) {
    const std::int64_t t = t0 + r, ih0 = Tile * (t / g.tiles_w) - g.pad_h, iw0 = Tile * (t % g.tiles_w) - g.pad_w;
    bool row_in[P], col_in[P];
    for (int i = 0; i < P; ++i) row_in[i] = ih0 + i >= 0 && ih0 + i < g.in_h, col_in[i] = iw0 + i >= 0 && iw0 + i < g.in_w;
    const void* at = advance(x, g.x_dtype, ih0 * g.x_row_stride + iw0 * g.x_col_stride);
    for (std::int64_t c = 0; c < g.channels; c += 8) {
      const std::int64_t count8 = std::min<std::int64_t>(8, g.channels - c);
      __m256 d[P * P], u[P * P];
      for (int i = 0; i < P; ++i)
        for (int j = 0; j < P; ++j)
          d[P * i + j] = row_in[i] && col_in[j]
                             ? load8_n(advance(at, g.x_dtype, i * g.x_row_stride + j * g.x_col_stride + c), g.x_dtype, count8)
                             : _mm256_setzero_ps();
      for (int j = 0; j < P; ++j) {  // B^T d, column j
        __m256 w[P];
        input_rows<Tile>(d + j, P, w);
        for (int i = 0; i < P; ++i) u[P * i + j] = w[i];
      }
      float* out = v + r * ld + c;
      for (int i = 0; i < P; ++i) {  // (B^T d) B, row i
        __m256 w[P];
        input_rows<Tile>(u + P * i, 1, w);
        for (int j = 0; j < P; ++j) store8_n(out + (P * i + j) * plane, DType::f32, w[j], count8);
      }
    }
  }
}

template <int Tile>
void output(const WinogradGeometry& g, const float* m, std::int64_t ld, std::int64_t plane, std::int64_t t0,
            std::int64_t count, std::int64_t n0, std::int64_t n1, const WinogradOutput& out) {
  constexpr int P = int(winograd_patch(Tile));
  const EpilogueArgs& ep = out.ep;
  for (std::int64_t r = 0; r < count; ++r) {
    const std::int64_t t = t0 + r, oh0 = Tile * (t / g.tiles_w), ow0 = Tile * (t % g.tiles_w);
    const int rows = int(std::min<std::int64_t>(Tile, g.out_h - oh0)), cols = int(std::min<std::int64_t>(Tile, g.out_w - ow0));
    for (std::int64_t n = n0; n < n1; n += 8) {
      const std::int64_t count8 = std::min<std::int64_t>(8, n1 - n);
      const float* s = m + r * ld + n;
      __m256 v[P * P], w[P * Tile];
      for (int i = 0; i < P * P; ++i) v[i] = load8_n(s + i * plane, DType::f32, count8);
      for (int j = 0; j < P; ++j) {  // A^T M, column j
        __m256 col[Tile];
        output_rows<Tile>(v + j, P, col);
        for (int i = 0; i < Tile; ++i) w[P * i + j] = col[i];
      }
      for (int i = 0; i < rows; ++i) {  // (A^T M) A, row i
        __m256 y[Tile];
        output_rows<Tile>(w + P * i, 1, y);
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

void winograd_input(const WinogradGeometry& g, const void* x, std::int64_t t0, std::int64_t count, float* v, std::int64_t ld,
                    std::int64_t plane) {
  (g.tile == 2 ? input<2> : g.tile == 3 ? input<3> : input<4>)(g, x, t0, count, v, ld, plane);
}

void winograd_output(const WinogradGeometry& g, const float* m, std::int64_t ld, std::int64_t plane, std::int64_t t0,
                     std::int64_t count, std::int64_t n0, std::int64_t n1, const WinogradOutput& out) {
  (g.tile == 2 ? output<2> : g.tile == 3 ? output<3> : output<4>)(g, m, ld, plane, t0, count, n0, n1, out);
}

}  // namespace tessera::kernels::avx2
