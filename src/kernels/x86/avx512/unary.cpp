#include "kernels/unary.hpp"
#include "kernels/x86/avx512/vec.hpp"

namespace tessera::kernels::avx512 {

static inline __m512 apply(UnaryKind kind, __m512 x) {
  switch (kind) {
    case UnaryKind::silu: return silu16(x);
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
