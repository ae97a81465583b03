#include "kernels/unary.hpp"
#include "kernels/x86/avx512/vec.hpp"

namespace tessera::kernels::avx512 {

static inline __m512 apply(UnaryKind kind, __m512 x) {
  switch (kind) {
    case UnaryKind::silu: {
      // x / (1 + e^-x): at x -> -inf, e^-x -> Inf and x / Inf -> -0, as it should.
      const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), x));
      return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    }
    case UnaryKind::identity: break;
  }
  return x;
}

// Unit strides only (see the row's supports()).
void unary(const UnaryArgs& a) {
  const void* x = a.x;
  void* y = a.y;
  for (std::int64_t i = 0; i < a.n; i += 16) {
    const __mmask16 m = tail_mask(a.n - i);
    store16(advance(y, a.y_dtype, i), a.y_dtype, apply(a.kind, load16(advance(x, a.x_dtype, i), a.x_dtype, m)), m);
  }
}

}  // namespace tessera::kernels::avx512
