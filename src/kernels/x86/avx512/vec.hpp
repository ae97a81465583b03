#pragma once
// AVX-512 helpers shared by this folder's kernels. Everything is `static` so
// these ISA-specific copies never leave their translation unit.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/activation.hpp"
#include "kernels/dispatch.hpp"
#include "tessera/core/dtype.hpp"

namespace tessera::kernels::avx512 {

// Pins x in a register as computed: GCC folds a load into every FMA that
// uses it (one load of a vector shared by several FMAs becomes one each), and
// fuses a multiply into the add or subtract that follows it (the unrounded
// product then differs from the same product stored or compared elsewhere).
template <class Vec>  // __m512 or __m512i
static inline void keep_in_register(Vec& x) {
  __asm__("" : "+v"(x));
}

// Streams read by kernels with much arithmetic per byte are fetched this far
// ahead: the hardware prefetcher restarts at every page, and the arithmetic
// leaves the core waiting on each restart's misses (quantize, activations:
// 1.2-1.4x at 1 thread on tensors past the L3).
constexpr std::int64_t kPrefetchAheadBytes = 2048;

// Fetches the lines of [p, p + bytes) kPrefetchAheadBytes ahead into L1.
// Helpers made of prefetches alone are always inlined: GCC takes such a
// function for one without effects and drops every call it has not inlined
// first (prefetch_epilogue and prefetch_a_row were missing from the GEMM
// kernels' objects that way, the int4 decode's scale prefetch from its).
__attribute__((always_inline)) static inline void prefetch_ahead(const char* p, std::int64_t bytes) {
  for (std::int64_t b = 0; b < bytes; b += 64) _mm_prefetch(p + b + kPrefetchAheadBytes, _MM_HINT_T0);
}

static inline __mmask16 tail_mask(std::int64_t n) { return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1u); }
// Calls f(i, m) for i = 0, 16, ... below n, m the lanes below n: all 16 as
// a constant but in the tail, so the loads and stores masked by it compile
// plain. Masked loads and stores of memory that misses the caches ran
// 2.5-4.5x slower where a kernel took both (AMD EPYC Turin, rope in place
// on [5120, 32, 128], 1 thread: f32 8.9 -> 3.5 ms, bf16 8.9 -> 2.0).
template <class F>
static inline void for_each16(std::int64_t n, F&& f) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) f(i, __mmask16(0xffff));
  if (i < n) f(i, tail_mask(n - i));
}
// The same for 32 lanes of 16 bits (0 <= n).
static inline __mmask32 tail_mask32(std::int64_t n) { return n >= 32 ? ~__mmask32(0) : (__mmask32(1) << n) - 1; }

// The f32 values of a vector of bf16 pairs (32 elements): the even elements
// (the low half of each 32-bit lane) and the odd ones (the high half), one
// instruction each, for sums and for weights stored in pairs.
static inline __m512 bf16_even(__m512i pairs) { return _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16)); }
static inline __m512 bf16_odd(__m512i pairs) {
  return _mm512_castsi512_ps(_mm512_and_si512(pairs, _mm512_set1_epi32(int(0xffff0000u))));
}

// Loads n <= 16 elements (masked) of a float storage type as f32.
static inline __m512 load16(const void* p, DType t, __mmask16 m) {
  switch (t) {
    case DType::bf16: {
      const __m256i h = _mm256_maskz_loadu_epi16(m, p);
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    case DType::f16: return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
    default: return _mm512_maskz_loadu_ps(m, p);
  }
}

// f32 lanes rounded to bf16 in place: the upper half of each lane is the
// bf16, rounded to nearest even, NaN kept quiet. Integer arithmetic, not
// vcvtneps2bf16: that instruction flushes subnormal inputs to zero.
static inline __m512i bf16_in_upper_halves(__m512 v) {
  const __m512i x = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb);
  return _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_or_si512(x, _mm512_set1_epi32(0x400000)));
}

// f32 -> bf16 (bf16_in_upper_halves), 16 values.
static inline __m256i to_bf16_exact(__m512 v) { return _mm512_cvtepi32_epi16(_mm512_srli_epi32(bf16_in_upper_halves(v), 16)); }

// 32 values as bf16 in one vector: one word permute gathers the upper halves
// of bf16_in_upper_halves in order; two to_bf16 would narrow with two vpmovdw
// of two micro-ops each.
static inline __m512i to_bf16x2_exact(__m512 v0, __m512 v1) {
  const __m512i upper_halves = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27,
                                                25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  return _mm512_permutex2var_epi16(bf16_in_upper_halves(v0), upper_halves, bf16_in_upper_halves(v1));
}

// to_bf16 / to_bf16x2: the conversions every store below uses. Translation
// units built for avx512_bf16 and above convert with vcvtne(2)ps2bf16, one
// instruction instead of eight per 16 values and the same bits, except that
// it flushes subnormal inputs to zero: vectors holding one (rare) take the
// integer path.
#ifdef __AVX512BF16__
static inline bool any_subnormal(__m512 v) { return _mm512_fpclass_ps_mask(v, 0x20) != 0; }
static inline __m256i to_bf16(__m512 v) {
  if (any_subnormal(v)) [[unlikely]] return to_bf16_exact(v);
  return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
}
static inline __m512i to_bf16x2(__m512 v0, __m512 v1) {
  // One test of both masks (kortest), not one per vector.
  if (!_kortestz_mask16_u8(_mm512_fpclass_ps_mask(v0, 0x20), _mm512_fpclass_ps_mask(v1, 0x20))) [[unlikely]]
    return to_bf16x2_exact(v0, v1);
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(v1, v0));
}
#else
static inline __m256i to_bf16(__m512 v) { return to_bf16_exact(v); }
static inline __m512i to_bf16x2(__m512 v0, __m512 v1) { return to_bf16x2_exact(v0, v1); }
#endif

// Stores n <= 16 elements (masked), rounding to nearest even for 16-bit types.
static inline void store16(void* p, DType t, __m512 v, __mmask16 m) {
  switch (t) {
    case DType::bf16: _mm256_mask_storeu_epi16(p, m, to_bf16(v)); break;
    case DType::f16: _mm256_mask_storeu_epi16(p, m, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); break;
    default: _mm512_mask_storeu_ps(p, m, v); break;
  }
}

// Whether 16 elements stored at p go out as one streaming store: asked for
// (`stream`), all 16 lanes, and p aligned to the vector.
static inline bool streams16(const void* p, DType t, __mmask16 m, bool stream) {
  const std::uintptr_t bytes = 16 * std::uintptr_t(bytes_of(t));
  return stream && m == 0xffff && (reinterpret_cast<std::uintptr_t>(p) & (bytes - 1)) == 0;
}

// Stores as store16 does, or as put16 with `stream`, and returns the values
// as stored, as f32: one rounding serves both (a store16 then a load16 would
// round, store, reload and widen).
static inline __m512 store16_rounded(void* p, DType t, __m512 v, __mmask16 m, bool stream = false) {
  const bool streamed = streams16(p, t, m, stream);
  switch (t) {
    case DType::bf16: {
      const __m256i h = to_bf16(v);
      if (streamed) _mm256_stream_si256(static_cast<__m256i*>(p), h);
      else _mm256_mask_storeu_epi16(p, m, h);
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    case DType::f16: {
      const __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      if (streamed) _mm256_stream_si256(static_cast<__m256i*>(p), h);
      else _mm256_mask_storeu_epi16(p, m, h);
      return _mm512_cvtph_ps(h);
    }
    default:
      if (streamed) _mm512_stream_ps(static_cast<float*>(p), v);
      else _mm512_mask_storeu_ps(p, m, v);
      return v;
  }
}

// Stores n <= 16 elements (masked) as store16 does, or, when `stream` and
// the 16 fill a whole aligned vector, with a streaming store (no read of the
// line first). A kernel that streams ends with _mm_sfence(), so its writes
// are ordered before whatever the pool runs next.
static inline void put16(void* p, DType t, __m512 v, __mmask16 m, bool stream) {
  if (!streams16(p, t, m, stream)) return store16(p, t, v, m);
  switch (t) {
    case DType::bf16: _mm256_stream_si256(static_cast<__m256i*>(p), to_bf16(v)); break;
    case DType::f16: _mm256_stream_si256(static_cast<__m256i*>(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); break;
    default: _mm512_stream_ps(static_cast<float*>(p), v); break;
  }
}

// Copies n bytes. With `stream`, the whole 64-byte lines of dst go out as
// streaming stores (no read for ownership; end with _mm_sfence(), see put16),
// the unaligned head and the tail as masked stores; without, whole vectors
// plainly and the tail masked: a masked load and store per 64 bytes copied
// 11 GB/s of cold memory where plain ones copy 23-24 (AMD EPYC Turin, 1
// thread, 1280-byte runs over 256 MiB; masked loads alone 11, masked
// stores alone 17).
static inline void copy_bytes(char* dst, const char* src, std::int64_t n, bool stream) {
  const auto masked = [&](std::int64_t at, std::int64_t len) {
    const __mmask64 m = len >= 64 ? ~__mmask64(0) : (__mmask64(1) << len) - 1;
    _mm512_mask_storeu_epi8(dst + at, m, _mm512_maskz_loadu_epi8(m, src + at));
  };
  std::int64_t b = 0;
  if (stream) {
    const std::int64_t head = std::min<std::int64_t>(n, std::int64_t(-reinterpret_cast<std::uintptr_t>(dst) & 63));
    if (head > 0) masked(0, head);
    for (b = head; b + 64 <= n; b += 64) _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + b), _mm512_loadu_si512(src + b));
  }
  for (; b + 64 <= n; b += 64) _mm512_storeu_si512(dst + b, _mm512_loadu_si512(src + b));
  if (b < n) masked(b, n - b);
}

// 32 elements of a 16-bit type t (bf16 or f16) stored as one 64-byte
// vector (streamed when asked and aligned); returns the vector.
static inline __m512i put32_16bit(void* p, DType t, __m512 v0, __m512 v1, bool stream) {
  const __m512i h = t == DType::bf16 ? to_bf16x2(v0, v1)
                                     : _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtps_ph(v0, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)),
                                                          _mm512_cvtps_ph(v1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), 1);
  if (stream && (reinterpret_cast<std::uintptr_t>(p) & 63) == 0) _mm512_stream_si512(static_cast<__m512i*>(p), h);
  else _mm512_storeu_si512(p, h);
  return h;
}

// Stores 32 elements (v0 then v1, no mask) as two put16 would. 16-bit types
// go out as one 64-byte vector: a whole line when aligned, so a streaming
// store leaves no half-written line in the write-combining buffers.
static inline void put32(void* p, DType t, __m512 v0, __m512 v1, bool stream) {
  if (t == DType::f32) {
    put16(p, t, v0, 0xffff, stream);
    put16(static_cast<char*>(p) + 64, t, v1, 0xffff, stream);
    return;
  }
  put32_16bit(p, t, v0, v1, stream);
}

// Stores 32 elements as put32 does (and, with `copy`, plainly there too: a
// row kept in L1 beside a streamed one) and returns them as stored, as f32,
// in an order fit for sums only: 16-bit values are taken from the stored
// line in two instructions (bf16: the even elements in r0, the odd in r1),
// not the five that put them back in order.
static inline void store32_rounded_unordered(void* p, DType t, __m512 v0, __m512 v1, bool stream, __m512& r0, __m512& r1,
                                             void* copy = nullptr) {
  if (t == DType::f32) {
    put32(p, t, v0, v1, stream);
    if (copy) _mm512_storeu_ps(copy, v0), _mm512_storeu_ps(static_cast<float*>(copy) + 16, v1);
    r0 = v0, r1 = v1;
    return;
  }
  const __m512i h = put32_16bit(p, t, v0, v1, stream);
  if (copy) _mm512_storeu_si512(copy, h);
  if (t == DType::bf16) {
    r0 = bf16_even(h);
    r1 = bf16_odd(h);
  } else {
    r0 = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
    r1 = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
  }
}

// v's 16 lanes added into f64 accumulators (lo: lanes 0-7, hi: 8-15), for
// sums that f32 would round.
static inline void add_f64(__m512 v, __m512d& lo, __m512d& hi) {
  lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
  hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)));
}

static inline const void* advance(const void* p, DType t, std::int64_t n) { return static_cast<const char*>(p) + n * bytes_of(t); }
static inline void* advance(void* p, DType t, std::int64_t n) { return static_cast<char*>(p) + n * bytes_of(t); }

// In-register transpose: r[i][j] -> r[j][i].
static inline void transpose16x16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i + 0] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0x44);
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0xee);
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      t[8 * i + j] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + 4 + j], 0x88);
      t[8 * i + 4 + j] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + 4 + j], 0xdd);
    }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
    r[j + 8] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd);
  }
}

// What an exp's argument is known to be: a nonpositive one (softmax's x -
// max, -|x|) needs no clamp against overflow.
enum class ExpArg { any, nonpositive };

// exp's lower clamp, for ExpTiny (kernels/activation.hpp).
template <ExpTiny Tiny>
static inline __m512 exp_lower_clamp(__m512 x) {
  return _mm512_max_ps(_mm512_set1_ps(exp_floor(Tiny)), x);
}

constexpr float kLog2e = 1.44269504088896341f;

// exp(x) to ~1 ulp over the f32 range: x = n*ln2 + r with |r| <= ln2/2, a
// degree-6 polynomial for e^r, then scalef for 2^n (which saturates to 0 and
// Inf by itself). NaN in, NaN out; x above ln(FLT_MAX) gives Inf.
template <ExpArg Arg = ExpArg::any, ExpTiny Tiny = ExpTiny::subnormal>
static inline __m512 exp16(__m512 x) {
  // Operand order keeps a NaN x: max/min return their second operand on NaN.
  if constexpr (Arg == ExpArg::any) x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);  // exp(89) > FLT_MAX: Inf
  x = exp_lower_clamp<Tiny>(x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);  // ln2 split in two for exact reduction
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
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
template <ExpArg Arg = ExpArg::any, ExpTiny Tiny = ExpTiny::subnormal>
static inline __m512 exp2_16_bf16(__m512 t) {
  if constexpr (Arg == ExpArg::any) t = _mm512_min_ps(_mm512_set1_ps(89.0f * kLog2e), t);
  t = _mm512_max_ps(_mm512_set1_ps(exp_floor(Tiny) * kLog2e), t);
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_set1_ps(0.00966636836528778f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.055921975523233414f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.2402234971523285f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931210160255432f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}
template <ExpArg Arg = ExpArg::any, ExpTiny Tiny = ExpTiny::subnormal>
static inline __m512 exp16_bf16(__m512 x, float c = 1.0f) {
  return exp2_16_bf16<Arg, Tiny>(_mm512_mul_ps(x, _mm512_set1_ps(c * kLog2e)));
}

// The exp (of c x) and the division behind the functions below, for a
// result stored as Out: to bf16's precision for bf16 (exp16_bf16; a *
// rcp14(b), relative error 2^-14, for b >= 1 or +inf), to f32's otherwise.
template <DType Out, ExpArg Arg = ExpArg::any, ExpTiny Tiny = ExpTiny::subnormal>
static inline __m512 exp16_for(__m512 x, float c = 1.0f) {
  if constexpr (Out == DType::bf16) return exp16_bf16<Arg, Tiny>(x, c);
  else return exp16<Arg, Tiny>(c == 1.0f ? x : _mm512_mul_ps(x, _mm512_set1_ps(c)));
}
// For an exp whose argument's constant factors can absorb log2 e: the
// factor to fold into them (bf16 results: log2 e, so the exp starts at its
// power of 2, a multiplication fewer; else 1), and the exp of the argument
// so scaled.
template <DType Out>
static constexpr float exp_arg_scale() {
  return Out == DType::bf16 ? kLog2e : 1.0f;
}
template <DType Out, ExpArg Arg, ExpTiny Tiny>
static inline __m512 exp_scaled_for(__m512 t) {
  if constexpr (Out == DType::bf16) return exp2_16_bf16<Arg, Tiny>(t);
  else return exp16<Arg, Tiny>(t);
}
template <DType Out>
static inline __m512 divide_for(__m512 a, __m512 b) {
  if constexpr (Out == DType::bf16) return _mm512_mul_ps(a, _mm512_rcp14_ps(b));
  else return _mm512_div_ps(a, b);
}

// sigmoid(x) from e = exp(-|x|) in (0, 1]: 1/(1+e) for x >= 0 and e/(1+e)
// below, accurate far into the tails. NaN stays NaN.
template <DType Out = DType::f32>
static inline __m512 sigmoid16(__m512 x) {
  const __m512 e = exp16_for<Out, ExpArg::nonpositive>(_mm512_abs_ps(x), -1.0f);
  const __m512 inv = divide_for<Out>(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
  const __mmask16 negative = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
  return _mm512_mask_mul_ps(inv, negative, inv, e);
}

// x * sigmoid(x) as x / (1 + exp(-x)): fewer instructions than through
// sigmoid16, which is what bounds these loops (the division runs on its own
// unit alongside). Far below 0, exp(-x) overflows to Inf and the quotient is
// -0, within any tolerance of the true -tiny; -inf gives -0 (not NaN).
template <DType Out = DType::f32>
static inline __m512 silu16(__m512 x) {
  const __mmask16 minus_inf = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-__builtin_inff()), _CMP_EQ_OQ);
  const __m512 q = divide_for<Out>(x, _mm512_add_ps(_mm512_set1_ps(1.0f), exp16_for<Out, ExpArg::any, ExpTiny::normal>(x, -1.0f)));
  return _mm512_mask_mov_ps(q, minus_inf, _mm512_set1_ps(-0.0f));
}

// tanh(x) = sign(x) * (1 - e) / (1 + e), e = exp(-2|x|) in (0, 1]: no
// overflow, and for |x| < 2^-12 tanh(x) = x to f32 precision (the quotient
// would lose the low bits there). NaN stays NaN.
template <DType Out = DType::f32>
static inline __m512 tanh16(__m512 x) {
  const __m512 abs = _mm512_abs_ps(x);
  const __m512 e = exp16_for<Out, ExpArg::nonpositive, ExpTiny::normal>(abs, -2.0f);
  __m512 t = divide_for<Out>(_mm512_sub_ps(_mm512_set1_ps(1.0f), e), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
  t = _mm512_mask_mov_ps(t, _mm512_cmp_ps_mask(abs, _mm512_set1_ps(0x1p-12f), _CMP_LT_OQ), abs);
  return _mm512_or_ps(t, _mm512_and_ps(x, _mm512_set1_ps(-0.0f)));  // copy the sign (and a NaN's payload bits stay NaN)
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
template <DType Out = DType::f32>
static inline __m512 gelu_erf16(__m512 x) {
  const __m512 t = divide_for<Out>(_mm512_set1_ps(1.0f), _mm512_fmadd_ps(_mm512_abs_ps(x), _mm512_set1_ps(0.3275911f * 0.70710678118654752f),
                                                                          _mm512_set1_ps(1.0f)));
  __m512 p = _mm512_set1_ps(0.5f * 1.061405429f);
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.5f * -1.453152027f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.5f * 1.421413741f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.5f * -0.284496736f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.5f * 0.254829592f));
  p = _mm512_mul_ps(p, t);
  const __m512 arg = _mm512_mul_ps(x, _mm512_mul_ps(x, _mm512_set1_ps(-0.5f * exp_arg_scale<Out>())));
  const __m512 e = exp_scaled_for<Out, ExpArg::nonpositive, ExpTiny::normal>(arg);
  const __m512 q = _mm512_mul_ps(p, e);
  const __mmask16 upper = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_NLT_UQ);  // x >= 0 or NaN
  return _mm512_mul_ps(x, _mm512_mask_sub_ps(q, upper, _mm512_set1_ps(1.0f), q));
}

}  // namespace tessera::kernels::avx512
