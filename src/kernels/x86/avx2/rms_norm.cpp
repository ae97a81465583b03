#include <cmath>

#include "kernels/rms_norm.hpp"
#include "kernels/x86/avx2/vec.hpp"

namespace tessera::kernels::avx2 {

// Two passes over each row, as the AVX-512 row; unit column strides only.
void rms_norm(const RmsNormArgs& a, std::int64_t r0, std::int64_t r1) {
  const std::int64_t xs = bytes_of(a.x_dtype), ys = bytes_of(a.y_dtype), gs = bytes_of(a.gamma_dtype);
  const char* g = static_cast<const char*>(a.gamma);
  const std::int64_t body = a.cols / 8 * 8, tail = a.cols - body;
  for (std::int64_t r = r0; r < r1; ++r) {
    const char* x = static_cast<const char*>(a.x) + r * a.x_row_stride * xs;
    char* y = static_cast<char*>(a.y) + r * a.y_row_stride * ys;
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    std::int64_t c = 0;
    for (; c + 16 <= body; c += 16) {
      const __m256 v0 = load8(x + c * xs, a.x_dtype), v1 = load8(x + (c + 8) * xs, a.x_dtype);
      s0 = _mm256_fmadd_ps(v0, v0, s0);
      s1 = _mm256_fmadd_ps(v1, v1, s1);
    }
    for (; c < body; c += 8) {
      const __m256 v = load8(x + c * xs, a.x_dtype);
      s0 = _mm256_fmadd_ps(v, v, s0);
    }
    if (tail) {
      const __m256 v = load8_tail(x + body * xs, a.x_dtype, tail);
      s1 = _mm256_fmadd_ps(v, v, s1);
    }
    const float mean_sq = hsum(_mm256_add_ps(s0, s1)) / float(a.cols);
    const __m256 inv = _mm256_set1_ps(1.0f / std::sqrt(mean_sq + a.eps));
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
