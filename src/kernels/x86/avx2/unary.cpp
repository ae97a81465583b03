#include <algorithm>

#include "kernels/unary.hpp"
#include "kernels/x86/avx2/activation.hpp"

namespace tessera::kernels::avx2 {

// Unit strides only (see the row's supports()).
void unary(const UnaryArgs& a) {
  const char* x = static_cast<const char*>(a.x);
  char* y = static_cast<char*>(a.y);
  const std::int64_t xs = bytes_of(a.x_dtype), ys = bytes_of(a.y_dtype);
  dispatch_act(a.act, [&](auto act) {
    for (std::int64_t i = 0; i < a.n; i += 8) {
      const std::int64_t n = std::min<std::int64_t>(8, a.n - i);
      put8_n(y + i * ys, a.y_dtype, activate8(load8_n(x + i * xs, a.x_dtype, n), act), n, a.stream_y);
    }
  });
  if (a.stream_y) _mm_sfence();
}

}  // namespace tessera::kernels::avx2
