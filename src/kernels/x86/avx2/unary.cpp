#include "kernels/unary.hpp"
#include "kernels/x86/avx2/vec.hpp"

namespace tessera::kernels::avx2 {

static inline __m256 apply(UnaryKind kind, __m256 x) {
  switch (kind) {
    case UnaryKind::silu: {
      // As the AVX-512 row: x * sigmoid(x) from e = exp(-|x|); -inf gives -0.
      const __m256 abs = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
      const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), abs));
      const __m256 inv = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
      const __m256 negative = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
      const __m256 sigmoid = _mm256_blendv_ps(inv, _mm256_mul_ps(inv, e), negative);
      const __m256 minus_inf = _mm256_cmp_ps(x, _mm256_set1_ps(-__builtin_inff()), _CMP_EQ_OQ);
      return _mm256_blendv_ps(_mm256_mul_ps(x, sigmoid), _mm256_set1_ps(-0.0f), minus_inf);
    }
    case UnaryKind::identity: break;
  }
  return x;
}

// Unit strides only (see the row's supports()).
void unary(const UnaryArgs& a) {
  const char* x = static_cast<const char*>(a.x);
  char* y = static_cast<char*>(a.y);
  const std::int64_t xs = bytes_of(a.x_dtype), ys = bytes_of(a.y_dtype);
  std::int64_t i = 0;
  for (; i + 8 <= a.n; i += 8) store8(y + i * ys, a.y_dtype, apply(a.kind, load8(x + i * xs, a.x_dtype)));
  if (i < a.n) store8_tail(y + i * ys, a.y_dtype, apply(a.kind, load8_tail(x + i * xs, a.x_dtype, a.n - i)), a.n - i);
}

}  // namespace tessera::kernels::avx2
