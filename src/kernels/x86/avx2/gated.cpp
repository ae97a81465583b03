#include <algorithm>

#include "kernels/gated.hpp"
#include "kernels/x86/avx2/activation.hpp"

namespace tessera::kernels::avx2 {

// The next `count` <= 8 values of an operand with stride 0 (broadcast) or 1.
static inline __m256 operand8(const void* p, DType t, std::int64_t stride, std::int64_t i, __m256 broadcast,
                              std::int64_t count) {
  return stride ? load8_n(advance(p, t, i), t, count) : broadcast;
}

static inline __m256 first(const void* p, DType t) { return _mm256_set1_ps(_mm256_cvtss_f32(load8_tail(p, t, 1))); }

// Operand strides are 0 or 1; y's is 1 (see supports()).
void gated(const GatedArgs& a) {
  const __m256 a0 = first(a.a, a.a_dtype), b0 = first(a.b, a.b_dtype);
  const __m256 c0 = a.c ? first(a.c, a.c_dtype) : _mm256_setzero_ps();
  dispatch_act(a.act, [&](auto act) {
    for (std::int64_t i = 0; i < a.n; i += 8) {
      const std::int64_t count = std::min<std::int64_t>(8, a.n - i);
      const __m256 g = activate8(operand8(a.a, a.a_dtype, a.a_stride, i, a0, count), act);
      const __m256 u = operand8(a.b, a.b_dtype, a.b_stride, i, b0, count);
      const __m256 v = a.c ? _mm256_fmadd_ps(g, u, operand8(a.c, a.c_dtype, a.c_stride, i, c0, count)) : _mm256_mul_ps(g, u);
      put8_n(advance(a.y, a.y_dtype, i), a.y_dtype, v, count, a.stream_y);
    }
  });
  if (a.stream_y) _mm_sfence();
}

}  // namespace tessera::kernels::avx2
