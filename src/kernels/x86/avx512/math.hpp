#pragma once
// The transcendental functions behind the activations, softmax and
// attention, each written once for V = __m512 (16 lanes) or Vecs<N> (N such
// vectors, N x 16 lanes), with the lane-wise primitives below. On Vecs<N>
// every step runs on all N vectors before the next step starts. That order
// is what lets a core overlap the N chains: these functions are long
// dependent chains (silu of bf16: ~15 instructions, ~42 cycles from x to
// the result on an AMD EPYC Turin), and a loop calling them once per vector
// fills the scheduler with instructions that wait on their neighbours.
// Cycles per 16 elements in cache, one vector per call against Vecs<4>: the
// group norm's apply with a residual and SiLU, bf16, 14-17 -> 10.9; unary
// bf16 silu 9.1 -> 8.2, tanh 10.7 -> 9.3, gelu_tanh 10.1 -> 8.7. Vecs<8>
// gained a little more on some and spilled registers in others (gelu_erf).
// Where memory bounds the loop the gain can turn into a loss (unary and
// gated ops on f32 at 2 threads, softmax's sum pass): measure each use.
// Static functions only (see vec.hpp).
#include "kernels/activation.hpp"
#include "kernels/x86/avx512/vec.hpp"

namespace tessera::kernels::avx512 {

template <int N>
struct Vecs {
  __m512 v[N];
};
template <int N>
struct Masks {
  __mmask16 m[N];
};

template <class V>
struct LanesOf {
  static constexpr int n = 1;
  using Mask = __mmask16;
};
template <int N>
struct LanesOf<Vecs<N>> {
  static constexpr int n = N;
  using Mask = Masks<N>;
};
template <int N>
struct LanesOf<Masks<N>> {
  static constexpr int n = N;
};
template <class V>
using MaskOf = typename LanesOf<V>::Mask;

__attribute__((always_inline)) static inline __m512 lane(__m512 x, int) { return x; }
__attribute__((always_inline)) static inline __mmask16 lane(__mmask16 m, int) { return m; }
template <int N>
__attribute__((always_inline)) static inline __m512 lane(const Vecs<N>& x, int k) { return x.v[k]; }
template <int N>
__attribute__((always_inline)) static inline __mmask16 lane(const Masks<N>& x, int k) { return x.m[k]; }
__attribute__((always_inline)) static inline void set_lane(__m512& r, int, __m512 x) { r = x; }
__attribute__((always_inline)) static inline void set_lane(__mmask16& r, int, __mmask16 m) { r = m; }
template <int N>
__attribute__((always_inline)) static inline void set_lane(Vecs<N>& r, int k, __m512 x) { r.v[k] = x; }
template <int N>
__attribute__((always_inline)) static inline void set_lane(Masks<N>& r, int k, __mmask16 m) { r.m[k] = m; }

// f applied to the vectors (and masks) of a, one by one: R is V or MaskOf<V>.
template <class R, class F, class... A>
__attribute__((always_inline)) static inline R lanewise(F f, const A&... a) {
  R r;
#pragma GCC unroll 16
  for (int k = 0; k < LanesOf<R>::n; ++k) set_lane(r, k, f(lane(a, k)...));
  return r;
}

// The lanes of vector k of N whose last vector has the lanes `last`.
static inline __mmask16 lanes_of(int k, int n, __mmask16 last) { return k == n - 1 ? last : __mmask16(0xffff); }

// The Vecs<N> of f(0), ..., f(N - 1).
template <int N, class F>
__attribute__((always_inline)) static inline Vecs<N> vecs_of(F f) {
  Vecs<N> r;
#pragma GCC unroll 16
  for (int k = 0; k < N; ++k) r.v[k] = f(k);
  return r;
}

// Stores 16 N elements (N even) as put32 does.
template <int N>
__attribute__((always_inline)) static inline void put_vecs(void* p, DType t, const Vecs<N>& v, bool stream) {
  static_assert(N % 2 == 0);
#pragma GCC unroll 8
  for (int k = 0; k < N; k += 2) put32(static_cast<char*>(p) + 16 * k * bytes_of(t), t, v.v[k], v.v[k + 1], stream);
}

// The primitives: the _mm512_ intrinsic of the same name, on every vector.
#define TESSERA_LANEWISE_1(name, intrinsic) \
  template <class V>                        \
  __attribute__((always_inline)) static inline V name(V a) {               \
    return lanewise<V>([](__m512 x) { return intrinsic(x); }, a); \
  }
#define TESSERA_LANEWISE_2(name, intrinsic) \
  template <class V>                        \
  __attribute__((always_inline)) static inline V name(V a, V b) {          \
    return lanewise<V>([](__m512 x, __m512 y) { return intrinsic(x, y); }, a, b); \
  }
#define TESSERA_LANEWISE_3(name, intrinsic) \
  template <class V>                        \
  __attribute__((always_inline)) static inline V name(V a, V b, V c) {     \
    return lanewise<V>([](__m512 x, __m512 y, __m512 z) { return intrinsic(x, y, z); }, a, b, c); \
  }
TESSERA_LANEWISE_1(abs_ps, _mm512_abs_ps)
TESSERA_LANEWISE_1(rcp14_ps, _mm512_rcp14_ps)
TESSERA_LANEWISE_2(add_ps, _mm512_add_ps)
TESSERA_LANEWISE_2(sub_ps, _mm512_sub_ps)
TESSERA_LANEWISE_2(mul_ps, _mm512_mul_ps)
TESSERA_LANEWISE_2(div_ps, _mm512_div_ps)
TESSERA_LANEWISE_2(min_ps, _mm512_min_ps)
TESSERA_LANEWISE_2(max_ps, _mm512_max_ps)
TESSERA_LANEWISE_2(and_ps, _mm512_and_ps)
TESSERA_LANEWISE_2(or_ps, _mm512_or_ps)
TESSERA_LANEWISE_2(scalef_ps, _mm512_scalef_ps)
TESSERA_LANEWISE_3(fmadd_ps, _mm512_fmadd_ps)
TESSERA_LANEWISE_3(fnmadd_ps, _mm512_fnmadd_ps)
#undef TESSERA_LANEWISE_1
#undef TESSERA_LANEWISE_2
#undef TESSERA_LANEWISE_3

template <class V>
__attribute__((always_inline)) static inline V set1_ps(float c) {
  return lanewise<V>([c] { return _mm512_set1_ps(c); });
}
template <class V>
__attribute__((always_inline)) static inline V round_nearest_ps(V a) {
  return lanewise<V>([](__m512 x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }, a);
}
template <int Predicate, class V>
__attribute__((always_inline)) static inline MaskOf<V> cmp_ps_mask(V a, V b) {
  return lanewise<MaskOf<V>>([](__m512 x, __m512 y) { return _mm512_cmp_ps_mask(x, y, Predicate); }, a, b);
}
// a where m is clear, b where it is set.
template <class V>
__attribute__((always_inline)) static inline V mask_mov_ps(V a, MaskOf<V> m, V b) {
  return lanewise<V>([](__m512 x, __mmask16 k, __m512 y) { return _mm512_mask_mov_ps(x, k, y); }, a, m, b);
}
template <class V>
__attribute__((always_inline)) static inline V maskz_mov_ps(MaskOf<V> m, V a) {
  return lanewise<V>([](__mmask16 k, __m512 x) { return _mm512_maskz_mov_ps(k, x); }, m, a);
}
template <class V>
__attribute__((always_inline)) static inline V mask_mul_ps(V src, MaskOf<V> m, V a, V b) {
  return lanewise<V>([](__m512 s, __mmask16 k, __m512 x, __m512 y) { return _mm512_mask_mul_ps(s, k, x, y); }, src, m, a, b);
}
template <class V>
__attribute__((always_inline)) static inline V mask_sub_ps(V src, MaskOf<V> m, V a, V b) {
  return lanewise<V>([](__m512 s, __mmask16 k, __m512 x, __m512 y) { return _mm512_mask_sub_ps(s, k, x, y); }, src, m, a, b);
}

// exp's lower clamp, for ExpTiny (kernels/activation.hpp).
template <ExpTiny Tiny, class V>
__attribute__((always_inline)) static inline V exp_lower_clamp(V x) {
  return max_ps(set1_ps<V>(exp_floor(Tiny)), x);
}

constexpr float kLog2e = 1.44269504088896341f;

// exp(x) to ~1 ulp over the f32 range: x = n*ln2 + r with |r| <= ln2/2, a
// degree-6 polynomial for e^r, then scalef for 2^n (which saturates to 0 and
// Inf by itself). NaN in, NaN out; x above ln(FLT_MAX) gives Inf.
template <ExpArg Arg = ExpArg::any, ExpTiny Tiny = ExpTiny::subnormal, class V>
__attribute__((always_inline)) static inline V exp16(V x) {
  // Operand order keeps a NaN x: max/min return their second operand on NaN.
  if constexpr (Arg == ExpArg::any) x = min_ps(set1_ps<V>(89.0f), x);  // exp(89) > FLT_MAX: Inf
  x = exp_lower_clamp<Tiny>(x);
  const V n = round_nearest_ps(mul_ps(x, set1_ps<V>(kLog2e)));
  V r = fnmadd_ps(n, set1_ps<V>(0.693145751953125f), x);  // ln2 split in two for exact reduction
  r = fnmadd_ps(n, set1_ps<V>(1.428606765330187045e-06f), r);
  V p = set1_ps<V>(1.0f / 720.0f);
  p = fmadd_ps(p, r, set1_ps<V>(1.0f / 120.0f));
  p = fmadd_ps(p, r, set1_ps<V>(1.0f / 24.0f));
  p = fmadd_ps(p, r, set1_ps<V>(1.0f / 6.0f));
  p = fmadd_ps(p, r, set1_ps<V>(0.5f));
  p = fmadd_ps(p, r, set1_ps<V>(1.0f));
  p = fmadd_ps(p, r, set1_ps<V>(1.0f));
  return scalef_ps(p, n);
}

// exp(c x) for results stored as bf16 (8 significant bits), to a relative
// 4e-6 (2^-18) instead of exp16's ~1 ulp of f32, in three fewer
// instructions: 2^t, t = x (c log2 e), as 2^n times a degree-4 polynomial of
// f = t - n in [-0.5, 0.5] (Chebyshev fit, error 3.5e-6; rounding t costs
// at most 6e-6 more at |x| near 87). A bf16 result then rounds as from the
// exact value but for values within 2^-18 of a rounding boundary (1 ulp).
// The constant factor c rides on the multiplication by log2 e (sigmoid's
// exp(-|x|), silu's exp(-x), tanh's exp(-2|x|): no negation of their own;
// c of -1 or -2 scales log2 e exactly, so t is what (c x) log2 e gives), and
// the clamps apply to t. Same special values as exp16.
// exp2_16_bf16 takes t itself, for callers whose constants can carry log2 e.
template <ExpArg Arg = ExpArg::any, ExpTiny Tiny = ExpTiny::subnormal, class V>
__attribute__((always_inline)) static inline V exp2_16_bf16(V t) {
  if constexpr (Arg == ExpArg::any) t = min_ps(set1_ps<V>(89.0f * kLog2e), t);
  t = max_ps(set1_ps<V>(exp_floor(Tiny) * kLog2e), t);
  const V n = round_nearest_ps(t);
  const V f = sub_ps(t, n);
  V p = set1_ps<V>(0.00966636836528778f);
  p = fmadd_ps(p, f, set1_ps<V>(0.055921975523233414f));
  p = fmadd_ps(p, f, set1_ps<V>(0.2402234971523285f));
  p = fmadd_ps(p, f, set1_ps<V>(0.6931210160255432f));
  p = fmadd_ps(p, f, set1_ps<V>(1.0f));
  return scalef_ps(p, n);
}
template <ExpArg Arg = ExpArg::any, ExpTiny Tiny = ExpTiny::subnormal, class V>
__attribute__((always_inline)) static inline V exp16_bf16(V x, float c = 1.0f) {
  return exp2_16_bf16<Arg, Tiny>(mul_ps(x, set1_ps<V>(c * kLog2e)));
}

// The exp (of c x) and the division behind the functions below, for a
// result stored as Out: to bf16's precision for bf16 (exp16_bf16; a *
// rcp14(b), relative error 2^-14, for b >= 1 or +inf), to f32's otherwise.
template <DType Out, ExpArg Arg = ExpArg::any, ExpTiny Tiny = ExpTiny::subnormal, class V>
__attribute__((always_inline)) static inline V exp16_for(V x, float c = 1.0f) {
  if constexpr (Out == DType::bf16) return exp16_bf16<Arg, Tiny>(x, c);
  else return exp16<Arg, Tiny>(c == 1.0f ? x : mul_ps(x, set1_ps<V>(c)));
}
// For an exp whose argument's constant factors can absorb log2 e: the
// factor to fold into them (bf16 results: log2 e, so the exp starts at its
// power of 2, a multiplication fewer; else 1), and the exp of the argument
// so scaled.
template <DType Out>
static constexpr float exp_arg_scale() {
  return Out == DType::bf16 ? kLog2e : 1.0f;
}
template <DType Out, ExpArg Arg, ExpTiny Tiny, class V>
__attribute__((always_inline)) static inline V exp_scaled_for(V t) {
  if constexpr (Out == DType::bf16) return exp2_16_bf16<Arg, Tiny>(t);
  else return exp16<Arg, Tiny>(t);
}
template <DType Out, class V>
__attribute__((always_inline)) static inline V divide_for(V a, V b) {
  if constexpr (Out == DType::bf16) return mul_ps(a, rcp14_ps(b));
  else return div_ps(a, b);
}

// sigmoid(x) from e = exp(-|x|) in (0, 1]: 1/(1+e) for x >= 0 and e/(1+e)
// below, accurate far into the tails. NaN stays NaN.
template <DType Out = DType::f32, class V>
__attribute__((always_inline)) static inline V sigmoid16(V x) {
  const V e = exp16_for<Out, ExpArg::nonpositive>(abs_ps(x), -1.0f);
  const V inv = divide_for<Out>(set1_ps<V>(1.0f), add_ps(set1_ps<V>(1.0f), e));
  const MaskOf<V> negative = cmp_ps_mask<_CMP_LT_OQ>(x, set1_ps<V>(0.0f));
  return mask_mul_ps(inv, negative, inv, e);
}

// x * sigmoid(x) as x / (1 + exp(-x)): fewer instructions than through
// sigmoid16, which is what bounds these loops (the division runs on its own
// unit alongside). Far below 0, exp(-x) overflows to Inf and the quotient is
// -0, within any tolerance of the true -tiny; -inf gives -0 (not NaN).
// beta scales the sigmoid's argument: x * sigmoid(beta x) (kQuickGeluBeta: quick_gelu).
template <DType Out = DType::f32, class V>
__attribute__((always_inline)) static inline V silu16(V x, float beta = 1.0f) {
  const MaskOf<V> minus_inf = cmp_ps_mask<_CMP_EQ_OQ>(x, set1_ps<V>(-__builtin_inff()));
  const V q = divide_for<Out>(x, add_ps(set1_ps<V>(1.0f), exp16_for<Out, ExpArg::any, ExpTiny::normal>(x, -beta)));
  return mask_mov_ps(q, minus_inf, set1_ps<V>(-0.0f));
}

// tanh(x) = sign(x) * (1 - e) / (1 + e), e = exp(-2|x|) in (0, 1]: no
// overflow, and for |x| < 2^-12 tanh(x) = x to f32 precision (the quotient
// would lose the low bits there). NaN stays NaN.
template <DType Out = DType::f32, class V>
__attribute__((always_inline)) static inline V tanh16(V x) {
  const V abs = abs_ps(x);
  const V e = exp16_for<Out, ExpArg::nonpositive, ExpTiny::normal>(abs, -2.0f);
  V t = divide_for<Out>(sub_ps(set1_ps<V>(1.0f), e), add_ps(set1_ps<V>(1.0f), e));
  t = mask_mov_ps(t, cmp_ps_mask<_CMP_LT_OQ>(abs, set1_ps<V>(0x1p-12f)), abs);
  return or_ps(t, and_ps(x, set1_ps<V>(-0.0f)));  // copy the sign (and a NaN's payload bits stay NaN)
}

// gelu(x) = x Φ(x), Φ(x) = (1 + erf(u)) / 2, u = x / √2, with erf from
// Abramowitz & Stegun 7.1.26 on |u| (|error| < 2e-7): 1 - erf(|u|) = p(t)
// exp(-u²), t = 1 / (1 + 0.3275911 |u|). So Φ(x) = 1 - q for x >= 0 and q
// below, q = p(t) exp(-u²) / 2 (the half folded into p's coefficients):
// four instructions fewer than through erf(u) and 1 + erf(u), which also
// cancelled to nothing in the negative tail. u itself is never formed: 1/√2
// rides on t's constant and -u² = x (-x / 2) (times exp_arg_scale). NaN
// stays NaN; -inf gives NaN (-inf times 0), as the reference's
// x (1 + erf(u)) / 2 does.
template <DType Out = DType::f32, class V>
__attribute__((always_inline)) static inline V gelu_erf16(V x) {
  const V t = divide_for<Out>(set1_ps<V>(1.0f), fmadd_ps(abs_ps(x), set1_ps<V>(0.3275911f * 0.70710678118654752f), set1_ps<V>(1.0f)));
  V p = set1_ps<V>(0.5f * 1.061405429f);
  p = fmadd_ps(p, t, set1_ps<V>(0.5f * -1.453152027f));
  p = fmadd_ps(p, t, set1_ps<V>(0.5f * 1.421413741f));
  p = fmadd_ps(p, t, set1_ps<V>(0.5f * -0.284496736f));
  p = fmadd_ps(p, t, set1_ps<V>(0.5f * 0.254829592f));
  p = mul_ps(p, t);
  const V arg = mul_ps(x, mul_ps(x, set1_ps<V>(-0.5f * exp_arg_scale<Out>())));
  const V e = exp_scaled_for<Out, ExpArg::nonpositive, ExpTiny::normal>(arg);
  const V q = mul_ps(p, e);
  const MaskOf<V> upper = cmp_ps_mask<_CMP_NLT_UQ>(x, set1_ps<V>(0.0f));  // x >= 0 or NaN
  return mul_ps(x, mask_sub_ps(q, upper, set1_ps<V>(1.0f), q));
}

}  // namespace tessera::kernels::avx512
