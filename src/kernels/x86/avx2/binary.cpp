#include <algorithm>

#include "kernels/binary.hpp"
#include "kernels/x86/avx2/vec.hpp"

namespace tessera::kernels::avx2 {

template <BinaryKind K>
static inline __m256 apply(__m256 x, __m256 y) {
  if constexpr (K == BinaryKind::add) return _mm256_add_ps(x, y);
  if constexpr (K == BinaryKind::sub) return _mm256_sub_ps(x, y);
  if constexpr (K == BinaryKind::mul) return _mm256_mul_ps(x, y);
  if constexpr (K == BinaryKind::div) return _mm256_div_ps(x, y);
  // max/min return their second operand when either is NaN: x + y puts the NaN back.
  const __m256 r = K == BinaryKind::max ? _mm256_max_ps(x, y) : _mm256_min_ps(x, y);
  return _mm256_blendv_ps(r, _mm256_add_ps(x, y), _mm256_cmp_ps(x, y, _CMP_UNORD_Q));
}

// One storage type for a, b and y, compiled per type with the operands in
// locals, 16 elements a step in load16_unordered's order. Returns where it
// stopped: run() does the tail.
template <BinaryKind K, class T>
static std::int64_t run_same_type(const BinaryArgs& a, T t, __m256 a0, __m256 b0) {
  const char* pa = static_cast<const char*>(a.a);
  const char* pb = static_cast<const char*>(a.b);
  char* py = static_cast<char*>(a.y);
  const bool a_varies = a.a_stride != 0, b_varies = a.b_stride != 0, stream = a.stream_y;
  const std::int64_t n = a.n;
  constexpr std::int64_t es = bytes_of(t);
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const Pair x = a_varies ? load16_unordered(pa + i * es, t) : Pair{a0, a0};
    const Pair y = b_varies ? load16_unordered(pb + i * es, t) : Pair{b0, b0};
    put16_unordered(py + i * es, t, {apply<K>(x.lo, y.lo), apply<K>(x.hi, y.hi)}, stream);
  }
  return i;
}

template <BinaryKind K>
static void run(const BinaryArgs& a) {
  const char* pa = static_cast<const char*>(a.a);
  const char* pb = static_cast<const char*>(a.b);
  char* py = static_cast<char*>(a.y);
  const std::int64_t as = a.a_stride * bytes_of(a.a_dtype), bs = a.b_stride * bytes_of(a.b_dtype);
  const std::int64_t ys = bytes_of(a.y_dtype);
  const __m256 a0 = _mm256_set1_ps(_mm256_cvtss_f32(load8_tail(pa, a.a_dtype, 1)));
  const __m256 b0 = _mm256_set1_ps(_mm256_cvtss_f32(load8_tail(pb, a.b_dtype, 1)));
  std::int64_t i = 0;
  if (a.a_dtype == a.y_dtype && a.b_dtype == a.y_dtype)
    dispatch_float(a.y_dtype, [&](auto t) { i = run_same_type<K>(a, t, a0, b0); });
  for (; i < a.n; i += 8) {
    const std::int64_t n = std::min<std::int64_t>(8, a.n - i);
    const __m256 x = as ? load8_n(pa + i * as, a.a_dtype, n) : a0;
    const __m256 y = bs ? load8_n(pb + i * bs, a.b_dtype, n) : b0;
    put8_n(py + i * ys, a.y_dtype, apply<K>(x, y), n, a.stream_y);
  }
  if (a.stream_y) _mm_sfence();
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

}  // namespace tessera::kernels::avx2
