#include <cmath>

#include "kernels/rms_norm.hpp"
#include "kernels/x86/avx2/vec.hpp"

namespace tessera::kernels::avx2 {

// Two passes over each row with f64 sums of squares, as the AVX-512 row;
// unit column strides only.
static inline __m256d square_add(__m128 half, __m256d acc) {
  const __m256d d = _mm256_cvtps_pd(half);
  return _mm256_fmadd_pd(d, d, acc);
}
static inline double hsum(__m256d v) {
  const __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}
static inline __m256d square_add8(__m256 v, __m256d acc) {
  return square_add(_mm256_extractf128_ps(v, 1), square_add(_mm256_castps256_ps128(v), acc));
}

void rms_norm(const RmsNormArgs& a, std::int64_t r0, std::int64_t r1) {
  const std::int64_t xs = bytes_of(a.x_dtype), ys = bytes_of(a.y_dtype), gs = bytes_of(a.gamma_dtype);
  const char* g = static_cast<const char*>(a.gamma);
  const std::int64_t body = a.cols / 8 * 8, tail = a.cols - body;
  for (std::int64_t r = r0; r < r1; ++r) {
    const char* x = static_cast<const char*>(a.x) + r * a.x_row_stride * xs;
    char* y = static_cast<char*>(a.y) + r * a.y_row_stride * ys;
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    std::int64_t c = 0;
    for (; c + 16 <= body; c += 16) {
      s0 = square_add8(load8(x + c * xs, a.x_dtype), s0);
      s1 = square_add8(load8(x + (c + 8) * xs, a.x_dtype), s1);
    }
    for (; c < body; c += 8) s0 = square_add8(load8(x + c * xs, a.x_dtype), s0);
    if (tail) s1 = square_add8(load8_tail(x + body * xs, a.x_dtype, tail), s1);
    const double mean_sq = hsum(_mm256_add_pd(s0, s1)) / double(a.cols);
    const __m256 inv = _mm256_set1_ps(float(1.0 / std::sqrt(mean_sq + double(a.eps))));
    for (c = 0; c < body; c += 8)
      store8(y + c * ys, a.y_dtype, _mm256_mul_ps(_mm256_mul_ps(load8(x + c * xs, a.x_dtype), inv), load8(g + c * gs, a.gamma_dtype)));
    if (tail) {
      const __m256 v = _mm256_mul_ps(_mm256_mul_ps(load8_tail(x + body * xs, a.x_dtype, tail), inv),
                                     load8_tail(g + body * gs, a.gamma_dtype, tail));
      store8_tail(y + body * ys, a.y_dtype, v, tail);
    }
  }
}

}  // namespace tessera::kernels::avx2
