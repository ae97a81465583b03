#include <cmath>

#include "kernels/rms_norm.hpp"
#include "kernels/x86/avx512/vec.hpp"

namespace tessera::kernels::avx512 {

// Two passes over each row (sum of squares, then scale): a row of a
// transformer (<= 16 KiB in f32) stays in L1 between them.
void rms_norm(const RmsNormArgs& a, std::int64_t r0, std::int64_t r1) {
  const std::int64_t xs = bytes_of(a.x_dtype), ys = bytes_of(a.y_dtype);
  for (std::int64_t r = r0; r < r1; ++r) {
    const char* x = static_cast<const char*>(a.x) + r * a.x_row_stride * xs;
    char* y = static_cast<char*>(a.y) + r * a.y_row_stride * ys;
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    std::int64_t c = 0;
    for (; c + 32 <= a.cols; c += 32) {
      const __m512 v0 = load16(x + c * xs, a.x_dtype, 0xffff), v1 = load16(x + (c + 16) * xs, a.x_dtype, 0xffff);
      s0 = _mm512_fmadd_ps(v0, v0, s0);
      s1 = _mm512_fmadd_ps(v1, v1, s1);
    }
    for (; c < a.cols; c += 16) {
      const __m512 v = load16(x + c * xs, a.x_dtype, tail_mask(a.cols - c));
      s0 = _mm512_fmadd_ps(v, v, s0);
    }
    const float mean_sq = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1)) / float(a.cols);
    const __m512 inv = _mm512_set1_ps(1.0f / std::sqrt(mean_sq + a.eps));
    for (c = 0; c < a.cols; c += 16) {
      const __mmask16 m = tail_mask(a.cols - c);
      const __m512 v = load16(x + c * xs, a.x_dtype, m);
      const __m512 g = load16(advance(a.gamma, a.gamma_dtype, c), a.gamma_dtype, m);
      store16(y + c * ys, a.y_dtype, _mm512_mul_ps(_mm512_mul_ps(v, inv), g), m);
    }
  }
}

}  // namespace tessera::kernels::avx512
