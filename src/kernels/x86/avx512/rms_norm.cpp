#include <cmath>

#include "kernels/rms_norm.hpp"
#include "kernels/x86/avx512/vec.hpp"

namespace tessera::kernels::avx512 {

// Two passes over each row (sum of squares, then scale): a row of a
// transformer (<= 16 KiB in f32) stays in L1 between them. Squares add up in
// f64, so rows with |x| beyond 1.8e19 (whose f32 squares overflow) still work.
static inline __m512d square_add(__m256 half, __m512d acc) {
  const __m512d d = _mm512_cvtps_pd(half);
  return _mm512_fmadd_pd(d, d, acc);
}

void rms_norm(const RmsNormArgs& a, std::int64_t r0, std::int64_t r1) {
  const std::int64_t xs = bytes_of(a.x_dtype), ys = bytes_of(a.y_dtype);
  for (std::int64_t r = r0; r < r1; ++r) {
    const char* x = static_cast<const char*>(a.x) + r * a.x_row_stride * xs;
    char* y = static_cast<char*>(a.y) + r * a.y_row_stride * ys;
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    for (std::int64_t c = 0; c < a.cols; c += 16) {
      const __m512 v = load16(x + c * xs, a.x_dtype, tail_mask(a.cols - c));
      s0 = square_add(_mm512_castps512_ps256(v), s0);
      s1 = square_add(_mm512_extractf32x8_ps(v, 1), s1);
    }
    const double mean_sq = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1)) / double(a.cols);
    const __m512 inv = _mm512_set1_ps(float(1.0 / std::sqrt(mean_sq + double(a.eps))));
    for (std::int64_t c = 0; c < a.cols; c += 16) {
      const __mmask16 m = tail_mask(a.cols - c);
      const __m512 v = load16(x + c * xs, a.x_dtype, m);
      const __m512 g = load16(advance(a.gamma, a.gamma_dtype, c), a.gamma_dtype, m);
      store16(y + c * ys, a.y_dtype, _mm512_mul_ps(_mm512_mul_ps(v, inv), g), m);
    }
  }
}

}  // namespace tessera::kernels::avx512
