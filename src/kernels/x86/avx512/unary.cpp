#include "kernels/unary.hpp"
#include "kernels/x86/avx512/activation.hpp"

namespace tessera::kernels::avx512 {

// Unit strides only (see the row's supports()).
void unary(const UnaryArgs& a) {
  dispatch_act(a.act, [&](auto act) {
    for (std::int64_t i = 0; i < a.n; i += 16) {
      const __mmask16 m = tail_mask(a.n - i);
      store16(advance(a.y, a.y_dtype, i), a.y_dtype, activate16(load16(advance(a.x, a.x_dtype, i), a.x_dtype, m), act), m);
    }
  });
}

}  // namespace tessera::kernels::avx512
