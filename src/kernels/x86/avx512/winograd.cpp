// Winograd F(2x2, 3x3) transforms on AVX-512 (kernels/winograd.hpp): 16
// channels a vector, a tile's 16 values in registers; the same additions in
// the same order as the reference row.
#include "kernels/winograd.hpp"
#include "kernels/x86/avx512/epilogue.hpp"

namespace tessera::kernels::avx512 {

void winograd_input(const WinogradGeometry& g, const void* x, std::int64_t t0, std::int64_t count, void* v, DType v_dtype,
                    std::int64_t ld, std::int64_t plane) {
  for (std::int64_t r = 0; r < count; ++r) {
    const std::int64_t t = t0 + r, ih0 = 2 * (t / g.tiles_w) - g.pad_h, iw0 = 2 * (t % g.tiles_w) - g.pad_w;
    bool row_in[4], col_in[4];
    for (int i = 0; i < 4; ++i) row_in[i] = ih0 + i >= 0 && ih0 + i < g.in_h, col_in[i] = iw0 + i >= 0 && iw0 + i < g.in_w;
    const void* at = advance(x, g.x_dtype, ih0 * g.x_row_stride + iw0 * g.x_col_stride);
    for (std::int64_t c = 0; c < g.channels; c += 16) {
      const __mmask16 mask = tail_mask(g.channels - c);
      __m512 d[4][4];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j)
          d[i][j] = row_in[i] && col_in[j] ? load16(advance(at, g.x_dtype, i * g.x_row_stride + j * g.x_col_stride + c), g.x_dtype, mask)
                                           : _mm512_setzero_ps();
      __m512 u[4][4];
      for (int j = 0; j < 4; ++j) {  // B^T d
        u[0][j] = _mm512_sub_ps(d[0][j], d[2][j]);
        u[1][j] = _mm512_add_ps(d[1][j], d[2][j]);
        u[2][j] = _mm512_sub_ps(d[2][j], d[1][j]);
        u[3][j] = _mm512_sub_ps(d[1][j], d[3][j]);
      }
      void* out = advance(v, v_dtype, r * ld + c);
      for (int i = 0; i < 4; ++i) {  // (B^T d) B
        const __m512 w[4] = {_mm512_sub_ps(u[i][0], u[i][2]), _mm512_add_ps(u[i][1], u[i][2]), _mm512_sub_ps(u[i][2], u[i][1]),
                             _mm512_sub_ps(u[i][1], u[i][3])};
        for (int j = 0; j < 4; ++j) store16(advance(out, v_dtype, (4 * i + j) * plane), v_dtype, w[j], mask);
      }
    }
  }
}

void winograd_output(const WinogradGeometry& g, const float* m, std::int64_t ld, std::int64_t plane, std::int64_t t0,
                     std::int64_t count, std::int64_t n0, std::int64_t n1, const WinogradOutput& out) {
  const EpilogueArgs& ep = out.ep;
  for (std::int64_t r = 0; r < count; ++r) {
    const std::int64_t t = t0 + r, oh0 = 2 * (t / g.tiles_w), ow0 = 2 * (t % g.tiles_w);
    const int rows = int(std::min<std::int64_t>(2, g.out_h - oh0)), cols = int(std::min<std::int64_t>(2, g.out_w - ow0));
    for (std::int64_t n = n0; n < n1; n += 16) {
      const __mmask16 mask = tail_mask(n1 - n);
      const float* s = m + r * ld + n;
      __m512 w[2][4];
      for (int j = 0; j < 4; ++j) {  // A^T M
        const __m512 s0 = _mm512_maskz_loadu_ps(mask, s + j * plane), s1 = _mm512_maskz_loadu_ps(mask, s + (4 + j) * plane);
        const __m512 s2 = _mm512_maskz_loadu_ps(mask, s + (8 + j) * plane), s3 = _mm512_maskz_loadu_ps(mask, s + (12 + j) * plane);
        w[0][j] = _mm512_add_ps(_mm512_add_ps(s0, s1), s2);
        w[1][j] = _mm512_sub_ps(_mm512_sub_ps(s1, s2), s3);
      }
      for (int i = 0; i < rows; ++i) {  // (A^T M) A
        const __m512 y[2] = {_mm512_add_ps(_mm512_add_ps(w[i][0], w[i][1]), w[i][2]),
                             _mm512_sub_ps(_mm512_sub_ps(w[i][1], w[i][2]), w[i][3])};
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

}  // namespace tessera::kernels::avx512
