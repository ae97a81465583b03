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

template <BinaryKind K>
static void run(const BinaryArgs& a) {
  const char* pa = static_cast<const char*>(a.a);
  const char* pb = static_cast<const char*>(a.b);
  char* py = static_cast<char*>(a.y);
  const std::int64_t as = a.a_stride * bytes_of(a.a_dtype), bs = a.b_stride * bytes_of(a.b_dtype);
  const std::int64_t ys = bytes_of(a.y_dtype);
  const __m256 a0 = _mm256_set1_ps(_mm256_cvtss_f32(load8_tail(pa, a.a_dtype, 1)));
  const __m256 b0 = _mm256_set1_ps(_mm256_cvtss_f32(load8_tail(pb, a.b_dtype, 1)));
  for (std::int64_t i = 0; i < a.n; i += 8) {
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
