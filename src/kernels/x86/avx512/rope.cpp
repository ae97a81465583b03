#include "kernels/rope.hpp"
#include "kernels/x86/avx512/vec.hpp"

namespace tessera::kernels::avx512 {

// X, Y: storage types known at compile time (std::integral_constant) or read
// from the arguments (run-time DType values); see unary_rows.hpp.

// Half style: features [i, i + 16) rotate with [i + half, ...), cos/sin read as they are.
template <class X, class Y>
static void rotate_half(const RopeArgs& a, X xt, Y yt, const char* x, char* y) {
  const std::int64_t half = a.rot_dim / 2;
  for_each16(half, [&](std::int64_t i, __mmask16 m) {
    const __m512 x0 = load16(x + i * bytes_of(xt), xt, m);
    const __m512 x1 = load16(x + (i + half) * bytes_of(xt), xt, m);
    const __m512 c = _mm512_maskz_loadu_ps(m, a.cos + i), s = _mm512_maskz_loadu_ps(m, a.sin + i);
    store16(y + i * bytes_of(yt), yt, _mm512_fmsub_ps(x0, c, _mm512_mul_ps(x1, s)), m);
    store16(y + (i + half) * bytes_of(yt), yt, _mm512_fmadd_ps(x1, c, _mm512_mul_ps(x0, s)), m);
  });
}

// Interleaved: 16 features are 8 pairs (x0, x1). With cos duplicated per
// pair and sin as (-s, +s), y = x * cos + swap_pairs(x) * sin, so pairs never
// need separating.
template <class X, class Y>
static void rotate_interleaved(const RopeArgs& a, X xt, Y yt, const char* x, char* y) {
  const __m512i dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  const __m512 sign = _mm512_castsi512_ps(_mm512_set_epi32(0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0,
                                                           INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN));
  for_each16(a.rot_dim, [&](std::int64_t i, __mmask16 m) {
    const __mmask8 pairs = __mmask8((1u << std::min<std::int64_t>(8, (a.rot_dim - i) / 2)) - 1u);
    const __m512 c = _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_maskz_loadu_ps(pairs, a.cos + i / 2)));
    const __m512 s = _mm512_xor_ps(_mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_maskz_loadu_ps(pairs, a.sin + i / 2))), sign);
    const __m512 v = load16(x + i * bytes_of(xt), xt, m);
    const __m512 swapped = _mm512_permute_ps(v, 0xb1);  // (x1, x0) in each pair
    store16(y + i * bytes_of(yt), yt, _mm512_fmadd_ps(v, c, _mm512_mul_ps(swapped, s)), m);
  });
}

// One token's heads, reading the arguments from a local copy (a store
// through y may alias any object, so the fields of `args` would be reloaded
// for every vector).
template <class X, class Y>
static void rope_heads(const RopeArgs& args, X xt, Y yt) {
  const RopeArgs a = args;
  for (std::int64_t h = 0; h < a.heads; ++h) {
    const char* x = static_cast<const char*>(a.x) + h * a.x_head_stride * bytes_of(xt);
    char* y = static_cast<char*>(a.y) + h * a.y_head_stride * bytes_of(yt);
    if (a.interleaved)
      rotate_interleaved(a, xt, yt, x, y);
    else
      rotate_half(a, xt, yt, x, y);
    const char* x_pass = x + a.rot_dim * bytes_of(xt);  // features past the rotary dim pass through
    char* y_pass = y + a.rot_dim * bytes_of(yt);
    for_each16(a.head_dim - a.rot_dim, [&](std::int64_t d, __mmask16 m) {
      store16(y_pass + d * bytes_of(yt), yt, load16(x_pass + d * bytes_of(xt), xt, m), m);
    });
  }
}

// Unit strides along the head dim (see the row's supports()). Compiled per
// storage type when x and y share one.
void rope(const RopeArgs& a) {
  if (a.x_dtype == a.y_dtype)
    dispatch_float(a.x_dtype, [&](auto t) { rope_heads(a, t, t); });
  else
    rope_heads(a, a.x_dtype, a.y_dtype);
}

}  // namespace tessera::kernels::avx512
