#include <algorithm>
#include <climits>
#include <type_traits>

#include "kernels/rope.hpp"
#include "kernels/scratch.hpp"
#include "kernels/x86/avx2/vec.hpp"

namespace tessera::kernels::avx2 {

// Half style: features [i, i + 8) rotate with [i + half, ...), cos/sin read as they are.
static void rotate_half(const RopeArgs& a, const char* x, char* y) {
  const std::int64_t half = a.rot_dim / 2;
  for (std::int64_t i = 0; i < half; i += 8) {
    const std::int64_t n = std::min<std::int64_t>(8, half - i);
    const __m256 x0 = load8_n(advance(x, a.x_dtype, i), a.x_dtype, n);
    const __m256 x1 = load8_n(advance(x, a.x_dtype, i + half), a.x_dtype, n);
    const __m256 c = load8_n(a.cos + i, DType::f32, n), s = load8_n(a.sin + i, DType::f32, n);
    store8_n(advance(y, a.y_dtype, i), a.y_dtype, _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s)), n);
    store8_n(advance(y, a.y_dtype, i + half), a.y_dtype, _mm256_fmadd_ps(x1, c, _mm256_mul_ps(x0, s)), n);
  }
}

// Half style, x and y of one storage type T: whole 16 features as Pairs in
// T's order (vec.hpp, load16_unordered), bf16's with cos and sin permuted to
// match once per call (a token: its heads share them); the rest 8 at a time.
template <class T>
static void rotate_half_same_type(const RopeArgs& a, T t) {
  constexpr bool kBf16Order = std::is_same_v<T, std::integral_constant<DType, DType::bf16>>;
  const std::int64_t half = a.rot_dim / 2, whole = half / 16 * 16, es = bytes_of(t);
  const float* cos = a.cos;
  const float* sin = a.sin;
  if constexpr (kBf16Order) {
    auto* p = static_cast<float*>(thread_scratch(ScratchSlot::a_panel, std::size_t(2 * whole) * sizeof(float)));
    for (std::int64_t i = 0; i < whole; i += 16) to_bf16_order16(a.cos + i, p + i), to_bf16_order16(a.sin + i, p + whole + i);
    cos = p;
    sin = p + whole;
  }
  for (std::int64_t h = 0; h < a.heads; ++h) {
    const char* x = static_cast<const char*>(advance(a.x, t, h * a.x_head_stride));
    char* y = static_cast<char*>(advance(a.y, t, h * a.y_head_stride));
    for (std::int64_t i = 0; i < whole; i += 16) {
      const Pair x0 = load16_unordered(x + i * es, t), x1 = load16_unordered(x + (i + half) * es, t);
      const __m256 c0 = _mm256_loadu_ps(cos + i), c1 = _mm256_loadu_ps(cos + i + 8);
      const __m256 s0 = _mm256_loadu_ps(sin + i), s1 = _mm256_loadu_ps(sin + i + 8);
      put16_unordered(y + i * es, t, {_mm256_fmsub_ps(x0.lo, c0, _mm256_mul_ps(x1.lo, s0)), _mm256_fmsub_ps(x0.hi, c1, _mm256_mul_ps(x1.hi, s1))}, false);
      put16_unordered(y + (i + half) * es, t, {_mm256_fmadd_ps(x1.lo, c0, _mm256_mul_ps(x0.lo, s0)), _mm256_fmadd_ps(x1.hi, c1, _mm256_mul_ps(x0.hi, s1))}, false);
    }
    for (std::int64_t i = whole; i < half; i += 8) {
      const std::int64_t n = std::min<std::int64_t>(8, half - i);
      const __m256 x0 = load8_n(x + i * es, t, n), x1 = load8_n(x + (i + half) * es, t, n);
      const __m256 c = load8_n(a.cos + i, DType::f32, n), s = load8_n(a.sin + i, DType::f32, n);
      store8_n(y + i * es, t, _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s)), n);
      store8_n(y + (i + half) * es, t, _mm256_fmadd_ps(x1, c, _mm256_mul_ps(x0, s)), n);
    }
    for (std::int64_t d = a.rot_dim; d < a.head_dim; d += 8) {  // features past the rotary dim pass through
      const std::int64_t n = std::min<std::int64_t>(8, a.head_dim - d);
      store8_n(y + d * es, t, load8_n(x + d * es, t, n), n);
    }
  }
}

// Interleaved: 8 features are 4 pairs (x0, x1). With cos duplicated per pair
// and sin as (-s, +s), y = x * cos + swap_pairs(x) * sin. X and Y: the
// storage types, compile-time constants where x and y share one (a switch
// per vector otherwise). A step's 4 cos and 4 sin are tails of 4
// (vec.hpp: load8_tail's masked loads; through its buffer they stalled on
// store forwarding, AMD EPYC Zen 3, [256, 32, 128] in cache, 1 thread: f32
// 2.8 -> 0.23 ms, bf16 3.3 -> 0.38; the half style's 0.10 / 0.17).
template <class X, class Y>
static void rotate_interleaved(const RopeArgs& a, const char* x, char* y, X xt, Y yt) {
  const __m256i dup = _mm256_set_epi32(3, 3, 2, 2, 1, 1, 0, 0);
  const __m256 sign = _mm256_castsi256_ps(_mm256_set_epi32(0, INT_MIN, 0, INT_MIN, 0, INT_MIN, 0, INT_MIN));
  std::int64_t i = 0;
  // bf16 in and out: load16_unordered's order is the pairs' own (lane k of
  // lo and hi: pair k's x0 and x1), so 8 pairs take 8 cos and 8 sin as they
  // are stored, with no permutes and no in-order narrowing: [1, 256, 32,
  // 128] in cache, 1 thread, 0.38 -> 0.18 ms (the half style's 0.17).
  using Bf16 = std::integral_constant<DType, DType::bf16>;
  if constexpr (std::is_same_v<X, Bf16> && std::is_same_v<Y, Bf16>)
    for (; i + 16 <= a.rot_dim; i += 16) {
      const Pair v = load16_unordered(advance(x, xt, i), xt);
      const __m256 c = _mm256_loadu_ps(a.cos + i / 2), s = _mm256_loadu_ps(a.sin + i / 2);
      put16_unordered(advance(y, yt, i), yt,
                      {_mm256_fmsub_ps(v.lo, c, _mm256_mul_ps(v.hi, s)), _mm256_fmadd_ps(v.hi, c, _mm256_mul_ps(v.lo, s))}, false);
    }
  for (; i < a.rot_dim; i += 8) {
    const std::int64_t n = std::min<std::int64_t>(8, a.rot_dim - i);
    const __m256 c = _mm256_permutevar8x32_ps(load8_n(a.cos + i / 2, DType::f32, n / 2), dup);
    const __m256 s = _mm256_xor_ps(_mm256_permutevar8x32_ps(load8_n(a.sin + i / 2, DType::f32, n / 2), dup), sign);
    const __m256 v = load8_n(advance(x, xt, i), xt, n);
    const __m256 swapped = _mm256_permute_ps(v, 0xb1);  // (x1, x0) in each pair
    store8_n(advance(y, yt, i), yt, _mm256_fmadd_ps(v, c, _mm256_mul_ps(swapped, s)), n);
  }
}

// Unit strides along the head dim (see the row's supports()).
void rope(const RopeArgs& a) {
  if (!a.interleaved && a.x_dtype == a.y_dtype) return dispatch_float(a.x_dtype, [&](auto t) { rotate_half_same_type(a, t); });
  for (std::int64_t h = 0; h < a.heads; ++h) {
    const char* x = static_cast<const char*>(advance(a.x, a.x_dtype, h * a.x_head_stride));
    char* y = static_cast<char*>(advance(a.y, a.y_dtype, h * a.y_head_stride));
    if (a.interleaved && a.x_dtype == a.y_dtype)
      dispatch_float(a.x_dtype, [&](auto t) { rotate_interleaved(a, x, y, t, t); });
    else if (a.interleaved)
      rotate_interleaved(a, x, y, a.x_dtype, a.y_dtype);
    else
      rotate_half(a, x, y);
    for (std::int64_t d = a.rot_dim; d < a.head_dim; d += 8) {  // features past the rotary dim pass through
      const std::int64_t n = std::min<std::int64_t>(8, a.head_dim - d);
      store8_n(advance(y, a.y_dtype, d), a.y_dtype, load8_n(advance(x, a.x_dtype, d), a.x_dtype, n), n);
    }
  }
}

}  // namespace tessera::kernels::avx2
