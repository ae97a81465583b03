#include "kernels/gated.hpp"
#include "kernels/x86/avx512/activation.hpp"

namespace tessera::kernels::avx512 {

// The next 16 values of an operand with stride 0 (broadcast) or 1.
static inline __m512 operand16(const void* p, DType t, std::int64_t stride, std::int64_t i, __m512 broadcast, __mmask16 m) {
  return stride ? load16(advance(p, t, i), t, m) : broadcast;
}

static inline __m512 first(const void* p, DType t) { return _mm512_set1_ps(_mm512_cvtss_f32(load16(p, t, 1))); }

// Operand strides are 0 or 1; y's is 1 (see supports()).
void gated(const GatedArgs& a) {
  const __m512 a0 = first(a.a, a.a_dtype), b0 = first(a.b, a.b_dtype);
  const __m512 c0 = a.c ? first(a.c, a.c_dtype) : _mm512_setzero_ps();
  dispatch_act(a.act, [&](auto act) {
    for (std::int64_t i = 0; i < a.n; i += 16) {
      const __mmask16 m = tail_mask(a.n - i);
      const __m512 g = activate16(operand16(a.a, a.a_dtype, a.a_stride, i, a0, m), act);
      const __m512 u = operand16(a.b, a.b_dtype, a.b_stride, i, b0, m);
      const __m512 v = a.c ? _mm512_fmadd_ps(g, u, operand16(a.c, a.c_dtype, a.c_stride, i, c0, m)) : _mm512_mul_ps(g, u);
      store16(advance(a.y, a.y_dtype, i), a.y_dtype, v, m);
    }
  });
}

}  // namespace tessera::kernels::avx512
