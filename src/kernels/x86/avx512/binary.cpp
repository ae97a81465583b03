#include "kernels/binary.hpp"
#include "kernels/x86/avx512/vec.hpp"

namespace tessera::kernels::avx512 {

// Operand strides are 0 (broadcast scalar) or 1; y's is 1 (see supports()).
void binary(const BinaryArgs& a) {
  const bool a_scalar = a.a_stride == 0, b_scalar = a.b_stride == 0;
  const __m512 as = a_scalar ? load16(a.a, a.a_dtype, 1) : _mm512_setzero_ps();
  const __m512 bs = b_scalar ? load16(a.b, a.b_dtype, 1) : _mm512_setzero_ps();
  const __m512 av0 = _mm512_permutexvar_ps(_mm512_setzero_si512(), as);
  const __m512 bv0 = _mm512_permutexvar_ps(_mm512_setzero_si512(), bs);
  const bool add = a.kind == BinaryKind::add;
  for (std::int64_t i = 0; i < a.n; i += 16) {
    const __mmask16 m = tail_mask(a.n - i);
    const __m512 x = a_scalar ? av0 : load16(advance(a.a, a.a_dtype, i), a.a_dtype, m);
    const __m512 y = b_scalar ? bv0 : load16(advance(a.b, a.b_dtype, i), a.b_dtype, m);
    store16(advance(a.y, a.y_dtype, i), a.y_dtype, add ? _mm512_add_ps(x, y) : _mm512_mul_ps(x, y), m);
  }
}

}  // namespace tessera::kernels::avx512
