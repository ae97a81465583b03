// Winograd transforms on AVX-512 (kernels/winograd.hpp): 16 channels a
// vector, a tile's values in registers, per variant (Tile 2: F(2x2, 3x3),
// 3: F(3x3, 2x2), 4: F(4x4, 3x3)); the same operations in the same order as
// the reference row.
#include "kernels/winograd.hpp"
#include "kernels/x86/avx512/epilogue.hpp"

namespace tessera::kernels::avx512 {

namespace {

// B^T v of the vectors of a column (or row) of a patch.
template <int Tile>
void input_rows(const __m512* v, int step, __m512* out) {
  if constexpr (Tile == 4) {
    const __m512 four = _mm512_set1_ps(4.0f), five = _mm512_set1_ps(5.0f);
    const __m512 t1 = _mm512_fnmadd_ps(four, v[2 * step], v[4 * step]), t2 = _mm512_fnmadd_ps(four, v[step], v[3 * step]);
    const __m512 t3 = _mm512_sub_ps(v[4 * step], v[2 * step]);
    const __m512 t4 = _mm512_add_ps(_mm512_sub_ps(v[3 * step], v[step]), _mm512_sub_ps(v[3 * step], v[step]));
    out[0] = _mm512_fmadd_ps(four, v[0], _mm512_fnmadd_ps(five, v[2 * step], v[4 * step]));
    out[1] = _mm512_add_ps(t1, t2), out[2] = _mm512_sub_ps(t1, t2);
    out[3] = _mm512_add_ps(t3, t4), out[4] = _mm512_sub_ps(t3, t4);
    out[5] = _mm512_fmadd_ps(four, v[step], _mm512_fnmadd_ps(five, v[3 * step], v[5 * step]));
  } else {
    out[0] = _mm512_sub_ps(v[0], v[2 * step]);
    out[1] = _mm512_add_ps(v[step], v[2 * step]);
    out[2] = _mm512_sub_ps(v[2 * step], v[step]);
    out[3] = Tile == 2 ? _mm512_sub_ps(v[step], v[3 * step]) : _mm512_sub_ps(v[3 * step], v[step]);
  }
}

// A^T v: a tile's outputs from the vectors of a column (or row) of M.
template <int Tile>
void output_rows(const __m512* v, int step, __m512* out) {
  if constexpr (Tile == 4) {
    const __m512 a = _mm512_add_ps(v[step], v[2 * step]), b = _mm512_sub_ps(v[step], v[2 * step]);
    const __m512 c = _mm512_add_ps(v[3 * step], v[4 * step]), d = _mm512_sub_ps(v[3 * step], v[4 * step]);
    out[0] = _mm512_add_ps(_mm512_add_ps(v[0], a), c);
    out[1] = _mm512_fmadd_ps(_mm512_set1_ps(2.0f), d, b);
    out[2] = _mm512_fmadd_ps(_mm512_set1_ps(4.0f), c, a);
    out[3] = _mm512_add_ps(_mm512_fmadd_ps(_mm512_set1_ps(8.0f), d, b), v[5 * step]);
  } else if constexpr (Tile == 2) {
    out[0] = _mm512_add_ps(_mm512_add_ps(v[0], v[step]), v[2 * step]);
    out[1] = _mm512_sub_ps(_mm512_sub_ps(v[step], v[2 * step]), v[3 * step]);
  } else {
    out[0] = _mm512_add_ps(_mm512_add_ps(v[0], v[step]), v[2 * step]);
    out[1] = _mm512_sub_ps(v[step], v[2 * step]);
    out[2] = _mm512_add_ps(_mm512_add_ps(v[step], v[2 * step]), v[3 * step]);
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
    for (std::int64_t c = 0; c < g.channels; c += 16) {
      const __mmask16 mask = tail_mask(g.channels - c);
      __m512 d[P * P], u[P * P];
      for (int i = 0; i < P; ++i)
        for (int j = 0; j < P; ++j)
          d[P * i + j] = row_in[i] && col_in[j]
                             ? load16(advance(at, g.x_dtype, i * g.x_row_stride + j * g.x_col_stride + c), g.x_dtype, mask)
                             : _mm512_setzero_ps();
      for (int j = 0; j < P; ++j) {  // B^T d, column j
        __m512 w[P];
        input_rows<Tile>(d + j, P, w);
        for (int i = 0; i < P; ++i) u[P * i + j] = w[i];
      }
      float* out = v + r * ld + c;
      for (int i = 0; i < P; ++i) {  // (B^T d) B, row i
        __m512 w[P];
        input_rows<Tile>(u + P * i, 1, w);
        for (int j = 0; j < P; ++j) _mm512_mask_storeu_ps(out + (P * i + j) * plane, mask, w[j]);
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
    for (std::int64_t n = n0; n < n1; n += 16) {
      const __mmask16 mask = tail_mask(n1 - n);
      const float* s = m + r * ld + n;
      __m512 v[P * P], w[P * Tile];
      for (int i = 0; i < P * P; ++i) v[i] = _mm512_maskz_loadu_ps(mask, s + i * plane);
      for (int j = 0; j < P; ++j) {  // A^T M, column j
        __m512 col[Tile];
        output_rows<Tile>(v + j, P, col);
        for (int i = 0; i < Tile; ++i) w[P * i + j] = col[i];
      }
      for (int i = 0; i < rows; ++i) {  // (A^T M) A, row i
        __m512 y[Tile];
        output_rows<Tile>(w + P * i, 1, y);
        for (int j = 0; j < cols; ++j) {
          const std::int64_t oh = oh0 + i, ow = ow0 + j;
          const void* residual =
              ep.residual ? advance(ep.residual, ep.residual_dtype, oh * out.residual_h_stride + ow * ep.residual_row_stride + n) : nullptr;
          store16(advance(out.y, out.y_dtype, oh * out.y_row_stride + ow * out.y_col_stride + n), out.y_dtype,
                  epilogue_value16(ep, y[j], n, residual, mask), mask);
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

}  // namespace tessera::kernels::avx512
