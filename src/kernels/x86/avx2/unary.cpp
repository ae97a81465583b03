#include "kernels/unary.hpp"
#include "kernels/x86/avx2/activation.hpp"

namespace tessera::kernels::avx2 {

// Unit strides only (see the row's supports()).
void unary(const UnaryArgs& a) {
  const char* x = static_cast<const char*>(a.x);
  char* y = static_cast<char*>(a.y);
  const std::int64_t xs = bytes_of(a.x_dtype), ys = bytes_of(a.y_dtype);
  dispatch_act(a.act, [&](auto act) {
    std::int64_t i = 0;
    for (; i + 8 <= a.n; i += 8) store8(y + i * ys, a.y_dtype, activate8(load8(x + i * xs, a.x_dtype), act));
    if (i < a.n) store8_tail(y + i * ys, a.y_dtype, activate8(load8_tail(x + i * xs, a.x_dtype, a.n - i), act), a.n - i);
  });
}

}  // namespace tessera::kernels::avx2
