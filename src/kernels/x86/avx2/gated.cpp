#include <algorithm>

#include "kernels/gated.hpp"
#include "kernels/x86/avx2/activation.hpp"

namespace tessera::kernels::avx2 {

// The next `count` <= 8 values of an operand with stride 0 (broadcast) or 1.
static inline __m256 operand8(const void* p, DType t, std::int64_t stride, std::int64_t i, __m256 broadcast,
                              std::int64_t count) {
  return stride ? load8_n(advance(p, t, i), t, count) : broadcast;
}

static inline __m256 first(const void* p, DType t) { return _mm256_set1_ps(_mm256_cvtss_f32(load8_tail(p, t, 1))); }

// One storage type for every operand, compiled per activation and type with
// the operands in locals, 16 elements a step in load16_unordered's order.
// Returns where it stopped: gated() does the tail.
template <class T, class A>
static std::int64_t gated_same_type(const GatedArgs& a, T t, A act, __m256 a0, __m256 b0, __m256 c0) {
  const char* pa = static_cast<const char*>(a.a);
  const char* pb = static_cast<const char*>(a.b);
  const char* pc = static_cast<const char*>(a.c);
  char* py = static_cast<char*>(a.y);
  const bool a_varies = a.a_stride != 0, b_varies = a.b_stride != 0, c_varies = a.c_stride != 0, stream = a.stream_y;
  const std::int64_t n = a.n;
  constexpr std::int64_t es = bytes_of(t);
  auto operand = [&](const char* p, bool varies, std::int64_t i, __m256 broadcast) {
    return varies ? load16_unordered(p + i * es, t) : Pair{broadcast, broadcast};
  };
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const Pair g = operand(pa, a_varies, i, a0), u = operand(pb, b_varies, i, b0);
    const __m256 lo = activate8<T::value>(g.lo, act), hi = activate8<T::value>(g.hi, act);
    if (pc) {
      const Pair c = operand(pc, c_varies, i, c0);
      put16_unordered(py + i * es, t, {_mm256_fmadd_ps(lo, u.lo, c.lo), _mm256_fmadd_ps(hi, u.hi, c.hi)}, stream);
    } else {
      put16_unordered(py + i * es, t, {_mm256_mul_ps(lo, u.lo), _mm256_mul_ps(hi, u.hi)}, stream);
    }
  }
  return i;
}

// Operand strides are 0 or 1; y's is 1 (see supports()).
void gated(const GatedArgs& a) {
  const __m256 a0 = first(a.a, a.a_dtype), b0 = first(a.b, a.b_dtype);
  const __m256 c0 = a.c ? first(a.c, a.c_dtype) : _mm256_setzero_ps();
  const bool same_type = a.a_dtype == a.y_dtype && a.b_dtype == a.y_dtype && (!a.c || a.c_dtype == a.y_dtype);
  dispatch_act(a.act, [&](auto act) {
    std::int64_t i = 0;
    if (same_type) dispatch_float(a.y_dtype, [&](auto t) { i = gated_same_type(a, t, act, a0, b0, c0); });
    for (; i < a.n; i += 8) {
      const std::int64_t count = std::min<std::int64_t>(8, a.n - i);
      const __m256 g = activate8(operand8(a.a, a.a_dtype, a.a_stride, i, a0, count), act);
      const __m256 u = operand8(a.b, a.b_dtype, a.b_stride, i, b0, count);
      const __m256 v = a.c ? _mm256_fmadd_ps(g, u, operand8(a.c, a.c_dtype, a.c_stride, i, c0, count)) : _mm256_mul_ps(g, u);
      put8_n(advance(a.y, a.y_dtype, i), a.y_dtype, v, count, a.stream_y);
    }
  });
  if (a.stream_y) _mm_sfence();
}

}  // namespace tessera::kernels::avx2
