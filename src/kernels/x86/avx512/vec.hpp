#pragma once
// AVX-512 helpers shared by this folder's kernels. Everything is `static` so
// these ISA-specific copies never leave their translation unit.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/dispatch.hpp"
#include "kernels/x86/load1.hpp"
#include "kernels/x86/prefetch.hpp"
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

// load16 of the first min(n, 16) elements (0 <= n), 0 past them: unmasked
// when n >= 16 (see for_each16).
static inline __m512 load16_first(const void* p, DType t, std::int64_t n) {
  return n >= 16 ? load16(p, t, 0xffff) : load16(p, t, tail_mask(n));
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

// 64 bytes at p: a streaming store when asked and p starts a line, else a plain one.
static inline void store_line(void* p, __m512i v, bool stream) {
  if (stream && (reinterpret_cast<std::uintptr_t>(p) & 63) == 0) _mm512_stream_si512(static_cast<__m512i*>(p), v);
  else _mm512_storeu_si512(p, v);
}

// 32 elements of a 16-bit type t (bf16 or f16) stored as one 64-byte
// vector (streamed when asked and aligned); returns the vector.
static inline __m512i put32_16bit(void* p, DType t, __m512 v0, __m512 v1, bool stream) {
  const __m512i h = t == DType::bf16 ? to_bf16x2(v0, v1)
                                     : _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtps_ph(v0, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)),
                                                          _mm512_cvtps_ph(v1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), 1);
  store_line(p, h, stream);
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

}  // namespace tessera::kernels::avx512
