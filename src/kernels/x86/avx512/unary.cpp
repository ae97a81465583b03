#include "kernels/unary.hpp"
#include "kernels/x86/avx512/activation.hpp"

namespace tessera::kernels::avx512 {

// Unit strides only (see the row's supports()). The loop is compiled per
// activation and per pair of storage types, its operands in locals: a switch
// on the dtype per vector, and reloading the arguments past the stores to y
// (which could alias them), cost as much as the work.
void unary(const UnaryArgs& a) {
  const char* x = static_cast<const char*>(a.x);
  char* y = static_cast<char*>(a.y);
  const std::int64_t n = a.n;
  const bool stream = a.stream_y;
  dispatch_act(a.act, [&](auto act) {
    dispatch_float(a.x_dtype, [&](auto xt) {
      dispatch_float(a.y_dtype, [&](auto yt) {
        constexpr std::int64_t xs = bytes_of(xt), ys = bytes_of(yt);
        for (std::int64_t i = 0; i < n; i += 16) {
          const __mmask16 m = tail_mask(n - i);
          put16(y + i * ys, yt, activate16(load16(x + i * xs, xt, m), act), m, stream);
        }
      });
    });
  });
  if (stream) _mm_sfence();
}

}  // namespace tessera::kernels::avx512
