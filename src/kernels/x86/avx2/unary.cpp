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

// Storage types that differ (casts, and activations that also cast): in
// order, 8 elements a step, compiled per pair of types as the loop above.
// The generic loop it replaced switched on both dtypes per vector and took
// the tail's path for every 8: f32 -> bf16 past the L3 ran at a third of
// triad (80 MiB in, AMD EPYC Zen 3, 1 thread: 19 ms, now 6.3).
template <class XT, class YT, class A>
static void unary_cast(const UnaryArgs& a, XT xt, YT yt, A act) {
  const char* x = static_cast<const char*>(a.x);
  char* y = static_cast<char*>(a.y);
  const std::int64_t n = a.n;
  const bool stream = a.stream_y;
  constexpr std::int64_t xs = bytes_of(xt), ys = bytes_of(yt);
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    prefetch_ahead(x + i * xs, 16 * xs);
    const __m256 lo = activate8<YT::value>(load8(x + i * xs, xt), act);
    const __m256 hi = activate8<YT::value>(load8(x + (i + 8) * xs, xt), act);
    put8_n(y + i * ys, yt, lo, 8, stream);
    put8_n(y + (i + 8) * ys, yt, hi, 8, stream);
  }
  for (; i < n; i += 8) {
    const std::int64_t k = std::min<std::int64_t>(8, n - i);
    put8_n(y + i * ys, yt, activate8<YT::value>(load8_n(x + i * xs, xt, k), act), k, stream);
  }
}

// Unit strides only (see the row's supports()).
void unary(const UnaryArgs& a) {
  dispatch_act(a.act, [&](auto act) {
    dispatch_float(a.x_dtype, [&](auto xt) {
      dispatch_float(a.y_dtype, [&](auto yt) {
        if constexpr (xt() == yt())
          unary_same_type(a, xt, act);
        else
          unary_cast(a, xt, yt, act);
      });
    });
  });
  if (a.stream_y) _mm_sfence();
}

}  // namespace tessera::kernels::avx2
