#pragma once
// The transcendental functions behind the AVX2 activations, softmax and
// attention, 8 f32 lanes at a time, as avx512/math.hpp: each to f32's
// precision, or, for a result stored as bf16 (Out), with an exp to bf16's
// in fewer instructions. These loops are bound by instructions, not memory
// (AMD EPYC Zen 3, one thread, in L1, ns an element, before -> f32 / bf16
// precision: silu 0.72 -> 0.58 / 0.42, sigmoid 0.62 -> 0.60 / 0.44, exp
// 0.41 -> 0.40 / 0.32). The divisions stay divisions: rcp (2^-12) instead
// was 4 % faster on silu bf16 and made its largest error 1 ulp (tessera
// verify: 0.031 against 0.001); rcp with a Newton step was slower than the
// division.
// Interleaving 2 or 4 vectors per call, as the AVX-512 functions do, gained
// nothing at 2 and spilled registers at 4 (16 ymm). Static functions only,
// always inlined as vec.hpp's per-vector helpers are: GCC kept gelu_erf8,
// and exp8 or tanh8 as other functions grew, out of line, a call per vector.
#include <type_traits>

#include "kernels/activation.hpp"
#include "kernels/x86/avx2/vec.hpp"

namespace tessera::kernels::avx2 {

constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2 = 0.693147180559945309f;

// t + kRoundToInt is t rounded to an integer n (nearest even) for |t| <
// 2^22, held in the low bits of its significand: the bits minus kRoundToInt's
// are n itself, and n - kRoundToInt's float is n as a float. One addition
// instead of vroundps and vcvtps2dq.
constexpr float kRoundToInt = 12582912.0f;  // 1.5 * 2^23

__attribute__((always_inline)) static inline __m256i rounded_int(__m256 k) {
  return _mm256_sub_epi32(_mm256_castps_si256(k), _mm256_castps_si256(_mm256_set1_ps(kRoundToInt)));
}

// p * 2^n for the integer n: for a nonpositive argument with normal results
// (n in [-126, 0]) as one exponent, else in two halves, each a valid normal
// exponent, so that n down to -150 (subnormal results) and up to 128 (Inf)
// work (five instructions more).
template <ExpArg Arg, ExpTiny Tiny>
__attribute__((always_inline)) static inline __m256 times_pow2(__m256 p, __m256i n) {
  const auto pow2 = [](__m256i e) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23)); };
  if constexpr (Arg == ExpArg::nonpositive && Tiny == ExpTiny::normal) return _mm256_mul_ps(p, pow2(n));
  const __m256i h1 = _mm256_srai_epi32(n, 1);
  return _mm256_mul_ps(_mm256_mul_ps(p, pow2(h1)), pow2(_mm256_sub_epi32(n, h1)));
}

// exp(x) to ~1 ulp: x = n*ln2 + r, a degree-6 polynomial for e^r. Operand
// order keeps a NaN x (min and max return their second operand on NaN);
// exp(89) and above give Inf.
template <ExpArg Arg = ExpArg::any, ExpTiny Tiny = ExpTiny::subnormal>
__attribute__((always_inline)) static inline __m256 exp8(__m256 x) {
  if constexpr (Arg == ExpArg::any) x = _mm256_min_ps(_mm256_set1_ps(89.0f), x);
  x = _mm256_max_ps(_mm256_set1_ps(exp_floor(Tiny)), x);
  const __m256 k = _mm256_fmadd_ps(x, _mm256_set1_ps(kLog2e), _mm256_set1_ps(kRoundToInt));
  const __m256 n = _mm256_sub_ps(k, _mm256_set1_ps(kRoundToInt));
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);  // ln2 split in two for exact reduction
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  return times_pow2<Arg, Tiny>(p, rounded_int(k));
}

// 2^t for results stored as Out, the clamps applied to t: 2^n times a
// polynomial of f = t - n in [-0.5, 0.5], of degree 4 for bf16 (to a
// relative 4e-6, avx512's exp2_16_bf16) and 6 otherwise (fitted to the
// relative error: 1.6 f32 ulps). Same special values as exp8; for an
// argument whose factors absorbed log2 e, the reduction by ln 2 (two FMAs
// and a multiply-add of exp8) is left out.
template <DType Out, ExpArg Arg = ExpArg::any, ExpTiny Tiny = ExpTiny::subnormal>
__attribute__((always_inline)) static inline __m256 exp2_8(__m256 t) {
  if constexpr (Arg == ExpArg::any) t = _mm256_min_ps(_mm256_set1_ps(89.0f * kLog2e), t);
  t = _mm256_max_ps(_mm256_set1_ps(exp_floor(Tiny) * kLog2e), t);
  const __m256 k = _mm256_add_ps(t, _mm256_set1_ps(kRoundToInt));
  const __m256 f = _mm256_sub_ps(t, _mm256_sub_ps(k, _mm256_set1_ps(kRoundToInt)));
  __m256 p;
  if constexpr (Out == DType::bf16) {
    p = _mm256_set1_ps(0.00966636836528778f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.055921975523233414f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.2402234971523285f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.6931210160255432f));
  } else {
    p = _mm256_set1_ps(0.00015337570221163332f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.0013399859890341759f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.009618519805371761f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.05550329014658928f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.24022646248340607f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.6931471824645996f));
  }
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  return times_pow2<Arg, Tiny>(p, rounded_int(k));
}

// exp(c x) for a result stored as Out: to bf16's precision for bf16 (c
// rides on the multiplication by log2 e), to f32's otherwise.
template <DType Out, ExpArg Arg = ExpArg::any, ExpTiny Tiny = ExpTiny::subnormal>
__attribute__((always_inline)) static inline __m256 exp8_for(__m256 x, float c = 1.0f) {
  if constexpr (Out == DType::bf16) return exp2_8<DType::bf16, Arg, Tiny>(_mm256_mul_ps(x, _mm256_set1_ps(c * kLog2e)));
  else return exp8<Arg, Tiny>(c == 1.0f ? x : _mm256_mul_ps(x, _mm256_set1_ps(c)));
}
// For an exp whose argument's constant factors can absorb log2 e: the
// factor to fold into them (bf16: log2 e, so the exp starts at its power of
// 2; else 1), and the exp of the argument so scaled.
template <DType Out>
static constexpr float exp_arg_scale() {
  return Out == DType::bf16 ? kLog2e : 1.0f;
}
template <DType Out, ExpArg Arg, ExpTiny Tiny>
__attribute__((always_inline)) static inline __m256 exp_scaled_for(__m256 t) {
  if constexpr (Out == DType::bf16) return exp2_8<DType::bf16, Arg, Tiny>(t);
  else return exp8<Arg, Tiny>(t);
}
// A result's storage type for the functions above: T itself where known at
// compile time (std::integral_constant), f32 (full precision) where read
// from the arguments (a DType).
template <class T>
static constexpr DType out_type() {
  if constexpr (std::is_same_v<T, DType>) return DType::f32;
  else return T::value;
}

// sigmoid(x) from e = exp(-|x|) in (0, 1]: 1/(1+e) for x >= 0 and e/(1+e)
// below, accurate far into the tails. NaN stays NaN.
template <DType Out = DType::f32>
__attribute__((always_inline)) static inline __m256 sigmoid8(__m256 x) {
  const __m256 e = exp8_for<Out, ExpArg::nonpositive>(abs8(x), -1.0f);
  const __m256 inv = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
  return _mm256_blendv_ps(inv, _mm256_mul_ps(inv, e), _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
}

// x * sigmoid(beta x) as x / (1 + exp(-beta x)), as avx512's silu16: 14
// instructions fewer than through sigmoid8 (beta 1: silu; kQuickGeluBeta:
// quick_gelu). Far below 0 exp(-beta x) overflows to Inf and the quotient is
// -0, within any tolerance of the true -tiny; -inf gives -0 (not NaN).
template <DType Out = DType::f32>
__attribute__((always_inline)) static inline __m256 silu8(__m256 x, float beta = 1.0f) {
  const __m256 minus_inf = _mm256_cmp_ps(x, _mm256_set1_ps(-__builtin_inff()), _CMP_EQ_OQ);
  const __m256 q = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), exp8_for<Out, ExpArg::any, ExpTiny::normal>(x, -beta)));
  return _mm256_blendv_ps(q, _mm256_set1_ps(-0.0f), minus_inf);
}

// tanh(x) = sign(x) * (1 - e) / (1 + e), e = exp(-2|x|) in (0, 1]: no
// overflow. Near 0, 1 - e loses the low bits, so there tanh(x) = x: below
// 2^-12 for f32 (x^3 / 3 under f32's rounding), below 2^-5 for bf16 (x^3 /
// 3 within 2^-11 of x, under bf16's; past it, exp's 4e-6 in 1 - e is 2^-13
// of the result). NaN stays NaN.
template <DType Out = DType::f32>
__attribute__((always_inline)) static inline __m256 tanh8(__m256 x) {
  constexpr float kIdentityBelow = Out == DType::bf16 ? 0x1p-5f : 0x1p-12f;
  const __m256 abs = abs8(x);
  const __m256 e = exp8_for<Out, ExpArg::nonpositive, ExpTiny::normal>(abs, -2.0f);
  __m256 t = _mm256_div_ps(_mm256_sub_ps(_mm256_set1_ps(1.0f), e), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
  t = _mm256_blendv_ps(t, abs, _mm256_cmp_ps(abs, _mm256_set1_ps(kIdentityBelow), _CMP_LT_OQ));
  return _mm256_or_ps(t, _mm256_and_ps(x, _mm256_set1_ps(-0.0f)));  // copy the sign (a NaN stays NaN)
}

// gelu(x) = x Φ(x) as avx512's gelu_erf16 computes it: Φ(x) = 1 - q for
// x >= 0 and q below, q = p(t) exp(-u²) / 2 (Abramowitz & Stegun 7.1.26, u =
// x / √2), with no 1 + erf(u) to cancel in the negative tail; -u² = x (-x /
// 2) carries exp_arg_scale.
template <DType Out = DType::f32>
__attribute__((always_inline)) static inline __m256 gelu_erf8(__m256 x) {
  const __m256 t = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(abs8(x), _mm256_set1_ps(0.3275911f * 0.70710678118654752f),
                                                                          _mm256_set1_ps(1.0f)));
  __m256 p = _mm256_set1_ps(0.5f * 1.061405429f);
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.5f * -1.453152027f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.5f * 1.421413741f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.5f * -0.284496736f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.5f * 0.254829592f));
  p = _mm256_mul_ps(p, t);
  const __m256 arg = _mm256_mul_ps(x, _mm256_mul_ps(x, _mm256_set1_ps(-0.5f * exp_arg_scale<Out>())));
  const __m256 q = _mm256_mul_ps(p, exp_scaled_for<Out, ExpArg::nonpositive, ExpTiny::normal>(arg));
  const __m256 upper = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_NLT_UQ);  // x >= 0 or NaN
  return _mm256_mul_ps(x, _mm256_blendv_ps(q, _mm256_sub_ps(_mm256_set1_ps(1.0f), q), upper));
}

}  // namespace tessera::kernels::avx2
