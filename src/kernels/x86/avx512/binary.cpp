#include <type_traits>

#include "kernels/binary.hpp"
#include "kernels/x86/avx512/vec.hpp"

namespace tessera::kernels::avx512 {

template <BinaryKind K>
static inline __m512 apply(__m512 x, __m512 y) {
  if constexpr (K == BinaryKind::add) return _mm512_add_ps(x, y);
  if constexpr (K == BinaryKind::sub) return _mm512_sub_ps(x, y);
  if constexpr (K == BinaryKind::mul) return _mm512_mul_ps(x, y);
  if constexpr (K == BinaryKind::div) return _mm512_div_ps(x, y);
  // max/min return their second operand when either is NaN: x + y puts the NaN back.
  const __m512 r = K == BinaryKind::max ? _mm512_max_ps(x, y) : _mm512_min_ps(x, y);
  return _mm512_mask_add_ps(r, _mm512_cmp_ps_mask(x, y, _CMP_UNORD_Q), x, y);
}

template <BinaryKind K>
static void run(const BinaryArgs& a) {
  const bool a_scalar = a.a_stride == 0, b_scalar = a.b_stride == 0;
  const __m512 av0 = _mm512_set1_ps(_mm512_cvtss_f32(load16(a.a, a.a_dtype, 1)));
  const __m512 bv0 = _mm512_set1_ps(_mm512_cvtss_f32(load16(a.b, a.b_dtype, 1)));
  for (std::int64_t i = 0; i < a.n; i += 16) {
    const __mmask16 m = tail_mask(a.n - i);
    const __m512 x = a_scalar ? av0 : load16(advance(a.a, a.a_dtype, i), a.a_dtype, m);
    const __m512 y = b_scalar ? bv0 : load16(advance(a.b, a.b_dtype, i), a.b_dtype, m);
    store16(advance(a.y, a.y_dtype, i), a.y_dtype, apply<K>(x, y), m);
  }
}

// Operand strides are 0 (broadcast scalar) or 1; y's is 1 (see supports()).
void binary(const BinaryArgs& a) {
  switch (a.kind) {
    case BinaryKind::add: return run<BinaryKind::add>(a);
    case BinaryKind::sub: return run<BinaryKind::sub>(a);
    case BinaryKind::mul: return run<BinaryKind::mul>(a);
    case BinaryKind::div: return run<BinaryKind::div>(a);
    case BinaryKind::max: return run<BinaryKind::max>(a);
    case BinaryKind::min: return run<BinaryKind::min>(a);
  }
}

}  // namespace tessera::kernels::avx512
