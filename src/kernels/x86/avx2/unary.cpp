#include <algorithm>

#include "kernels/unary.hpp"
#include "kernels/x86/avx2/activation.hpp"
#include "kernels/x86/prefetch.hpp"

namespace tessera::kernels::avx2 {

// One storage type in and out, compiled per activation and type, the
// operands in locals (as avx512/unary_rows.hpp): 16 elements a step in
// load16_unordered's order, x prefetched ahead of the hardware prefetcher.
template <class T, class A>
static void unary_same_type(const UnaryArgs& a, T t, A act) {
  const char* x = static_cast<const char*>(a.x);
  char* y = static_cast<char*>(a.y);
  const std::int64_t n = a.n;
  const bool stream = a.stream_y;
  constexpr std::int64_t es = bytes_of(t);
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    prefetch_ahead(x + i * es, 16 * es);
    const Pair v = load16_unordered(x + i * es, t);
    put16_unordered(y + i * es, t, {activate8<T::value>(v.lo, act), activate8<T::value>(v.hi, act)}, stream);
  }
  for (; i < n; i += 8) {
    const std::int64_t k = std::min<std::int64_t>(8, n - i);
    put8_n(y + i * es, t, activate8<T::value>(load8_n(x + i * es, t, k), act), k, stream);
  }
}

// Unit strides only (see the row's supports()).
void unary(const UnaryArgs& a) {
  const char* x = static_cast<const char*>(a.x);
  char* y = static_cast<char*>(a.y);
  const std::int64_t xs = bytes_of(a.x_dtype), ys = bytes_of(a.y_dtype);
  dispatch_act(a.act, [&](auto act) {
    if (a.x_dtype == a.y_dtype) return dispatch_float(a.x_dtype, [&](auto t) { unary_same_type(a, t, act); });
    for (std::int64_t i = 0; i < a.n; i += 8) {
      const std::int64_t n = std::min<std::int64_t>(8, a.n - i);
      put8_n(y + i * ys, a.y_dtype, activate8(load8_n(x + i * xs, a.x_dtype, n), act), n, a.stream_y);
    }
  });
  if (a.stream_y) _mm_sfence();
}

}  // namespace tessera::kernels::avx2
