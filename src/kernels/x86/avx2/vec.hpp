#pragma once
// AVX2 + FMA + F16C helpers shared by this folder's kernels; `static` so they
// stay in their translation unit. Those a loop runs per vector are always
// inlined: GCC kept some out of line (put8_n in the casts, put16_unordered
// wherever put8_n was inlined into it), and then each call switched on the
// dtype and spilled the loop's vector registers (all caller-saved). AMD
// EPYC Zen 3, against the same code as GCC chose to inline it: casts f32 ->
// bf16 of [4096, 2048] 2.4-3.8 -> 1.5-1.7 ms (best of 21, 3 rounds); bench
// membound --size large, 1 / 2 threads, ms: swiglu bf16 30-32 / 16-17 ->
// 18 / 9.3, add_layer_norm f32 18 / 10 -> 13 / 10, bf16 15-16 / 7.7 -> 13
// / 6.4. The tails' buffered paths stay calls.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/dispatch.hpp"
#include "kernels/x86/load1.hpp"
#include "tessera/core/dtype.hpp"

namespace tessera::kernels::avx2 {

__attribute__((always_inline)) static inline __m256 load8(const void* p, DType t) {
  switch (t) {
    case DType::bf16:
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p))), 16));
    case DType::f16: return _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(p)));
    default: return _mm256_loadu_ps(static_cast<const float*>(p));
  }
}

// v rounded to bf16 (nearest even, NaN kept quiet; AVX2 has no instruction
// for it), left in the high half of each lane.
__attribute__((always_inline)) static inline __m256i bf16_in_high_half(__m256 v) {
  const __m256i x = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb);
  const __m256i quiet = _mm256_or_si256(x, _mm256_set1_epi32(0x400000));
  return _mm256_blendv_epi8(rounded, quiet, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
}

// f32 -> bf16 in order.
__attribute__((always_inline)) static inline __m128i to_bf16(__m256 v) {
  const __m256i h = _mm256_srli_epi32(bf16_in_high_half(v), 16);
  return _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

__attribute__((always_inline)) static inline void store8(void* p, DType t, __m256 v) {
  switch (t) {
    case DType::bf16: _mm_storeu_si128(static_cast<__m128i*>(p), to_bf16(v)); break;
    case DType::f16: _mm_storeu_si128(static_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); break;
    default: _mm256_storeu_ps(static_cast<float*>(p), v); break;
  }
}

// All ones in lanes i < n, zeros above (0 <= n <= 8): the valid lanes of a tail.
static inline __m256 lanes_below(std::int64_t n) {
  return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(int(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}

// Tails: f32 by masked loads and stores (lanes past n untouched, without
// faults); 16-bit types through an 8-element buffer, as AVX2 has no masked
// 16-bit loads. A load from the buffer right after the copy into it waits on
// store forwarding: f32 tails of 4 loaded so made the interleaved rotary
// embedding 12x slower (AMD EPYC Zen 3).
static inline __m256 load8_tail(const void* p, DType t, std::int64_t n) {
  if (t == DType::f32) return _mm256_maskload_ps(static_cast<const float*>(p), _mm256_castps_si256(lanes_below(n)));
  alignas(32) char buf[32] = {};
  std::memcpy(buf, p, std::size_t(n * bytes_of(t)));
  return load8(buf, t);
}
static inline void store8_tail(void* p, DType t, __m256 v, std::int64_t n) {
  if (t == DType::f32) return _mm256_maskstore_ps(static_cast<float*>(p), _mm256_castps_si256(lanes_below(n)), v);
  alignas(32) char buf[32];
  store8(buf, t, v);
  std::memcpy(p, buf, std::size_t(n * bytes_of(t)));
}

// n <= 8 elements (zeros after on load), through the tail buffer only when short.
__attribute__((always_inline)) static inline __m256 load8_n(const void* p, DType t, std::int64_t n) {
  return n >= 8 ? load8(p, t) : load8_tail(p, t, n);
}
__attribute__((always_inline)) static inline void store8_n(void* p, DType t, __m256 v, std::int64_t n) {
  if (n >= 8)
    store8(p, t, v);
  else
    store8_tail(p, t, v, n);
}

// Stores n <= 8 elements as store8_n does, or, when `stream` and the 8 fill a
// whole aligned vector, with a streaming store (no read of the line first). A
// kernel that streams ends with _mm_sfence().
__attribute__((always_inline)) static inline void put8_n(void* p, DType t, __m256 v, std::int64_t n, bool stream) {
  const std::uintptr_t bytes = 8 * std::uintptr_t(bytes_of(t));
  if (!stream || n < 8 || (reinterpret_cast<std::uintptr_t>(p) & (bytes - 1)) != 0) return store8_n(p, t, v, n);
  switch (t) {
    case DType::bf16: _mm_stream_si128(static_cast<__m128i*>(p), to_bf16(v)); break;
    case DType::f16: _mm_stream_si128(static_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); break;
    default: _mm256_stream_ps(static_cast<float*>(p), v); break;
  }
}

// `bytes` from src to dst as they are, 32 at a time (the tail by memcpy),
// by streaming stores when `stream` and dst is 32-byte aligned; before each
// 64 bytes, each64(offset) (e.g. prefetching the next source).
template <class Each64>
static inline void copy_bytes(char* dst, const char* src, std::int64_t bytes, bool stream, Each64&& each64) {
  stream = stream && (reinterpret_cast<std::uintptr_t>(dst) & 31) == 0;
  const auto copy32 = [&](std::int64_t b) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + b));
    if (stream) _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + b), v);
    else _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + b), v);
  };
  std::int64_t b = 0;
  for (; b + 64 <= bytes; b += 64) {
    each64(b);
    copy32(b);
    copy32(b + 32);
  }
  if (b < bytes) {
    each64(b);
    std::memcpy(dst + b, src + b, std::size_t(bytes - b));
  }
}

// 16 elements as two vectors, in an order of the storage type's own that
// put16_unordered undoes: f32 and f16 in order (lo: 0-7, hi: 8-15); bf16 the
// even elements in lo and the odd in hi, from one 32-byte load by one shift
// and one and, and back by one shift and one blend per rounding. The
// in-order widening and narrowing (load8, to_bf16) take three shuffles and
// two more shifts per 8, on the few vector ports that run them: a bf16 relu
// in L1 ran 1.8x faster (AMD EPYC Zen 2). For elementwise loops of one
// storage type, whose every operand and result takes this order.
struct Pair {
  __m256 lo, hi;
};

__attribute__((always_inline)) static inline Pair load16_unordered(const void* p, DType t) {
  if (t != DType::bf16) return {load8(p, t), load8(static_cast<const char*>(p) + 8 * bytes_of(t), t)};
  const __m256i v = _mm256_loadu_si256(static_cast<const __m256i*>(p));
  return {_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(int(0xffff0000u))))};
}

// 16 f32 values `in` order into load16_unordered's bf16 order (the evens,
// then the odds), and back: for the operands kept as f32 beside bf16 data
// (scales, weights, sums), once per call. out may be in.
// In registers: through a stack copy, GCC's permutes loaded it right after
// the copy's narrower stores and stalled on store forwarding (LayerNorm bf16
// rows, gamma and beta permuted per task: 60 % of the time at 8 rows).
static inline void to_bf16_order16(const float* in, float* out) {
  const __m256 a = _mm256_loadu_ps(in), b = _mm256_loadu_ps(in + 8);
  // Per 128-bit lane the even (odd) elements of a then b; then the lanes in order.
  _mm256_storeu_ps(out, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xd8)));
  _mm256_storeu_ps(out + 8, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xdd)), 0xd8)));
}
static inline void from_bf16_order16(const float* in, float* out) {
  const __m256 e = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_loadu_ps(in)), 0xd8));
  const __m256 o = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_loadu_ps(in + 8)), 0xd8));
  _mm256_storeu_ps(out, _mm256_unpacklo_ps(e, o));
  _mm256_storeu_ps(out + 8, _mm256_unpackhi_ps(e, o));
}

// Stores v as bf16 in load16_unordered's order (with `stream` and aligned,
// by a streaming store) and returns the stored values as
// f32 in the same order (a load16_unordered of them), rounding once.
__attribute__((always_inline)) static inline Pair store16_bf16_rounded_unordered(void* p, Pair v, bool stream) {
  const __m256i lo = bf16_in_high_half(v.lo), hi = bf16_in_high_half(v.hi);
  const __m256i h = _mm256_blend_epi16(_mm256_srli_epi32(lo, 16), hi, 0xaa);
  if (stream && (reinterpret_cast<std::uintptr_t>(p) & 31) == 0)
    _mm256_stream_si256(static_cast<__m256i*>(p), h);
  else
    _mm256_storeu_si256(static_cast<__m256i*>(p), h);
  const __m256i high = _mm256_set1_epi32(int(0xffff0000u));
  return {_mm256_castsi256_ps(_mm256_and_si256(lo, high)), _mm256_castsi256_ps(_mm256_and_si256(hi, high))};
}

// Stores 16 elements taken by load16_unordered's order; with `stream` and
// aligned, by streaming stores (see put8_n).
__attribute__((always_inline)) static inline void put16_unordered(void* p, DType t, Pair v, bool stream) {
  if (t == DType::bf16) {
    store16_bf16_rounded_unordered(p, v, stream);  // the values it returns cost nothing unused
    return;
  }
  put8_n(p, t, v.lo, 8, stream);
  put8_n(static_cast<char*>(p) + 8 * bytes_of(t), t, v.hi, 8, stream);
}

static inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The largest lane. A NaN lane may or may not win: callers that must keep NaN check for it.
static inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// v's 8 lanes added into f64 accumulators (lo: lanes 0-3, hi: 4-7), for sums
// that f32 would round.
static inline void add_f64(__m256 v, __m256d& lo, __m256d& hi) {
  lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
  hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

// The sum of the 4 lanes of v.
static inline double hsum_pd(__m256d v) {
  const __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

// In-register transpose: r[i][j] -> r[j][i]. Always inlined: called out
// of line (as GCC chose for the flash kernel once its q loads were
// unrolled) r goes through the stack (cross-attention, f32, 1 thread, best
// of 8 runs: 11.3 -> 10.5 ms).
__attribute__((always_inline)) static inline void transpose8x8(__m256 r[8]) {
  __m256 t[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    r[4 * i + 0] = _mm256_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0x44);
    r[4 * i + 1] = _mm256_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0xee);
    r[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    r[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
  }
  for (int j = 0; j < 4; ++j) {
    t[j] = _mm256_permute2f128_ps(r[j], r[j + 4], 0x20);
    t[j + 4] = _mm256_permute2f128_ps(r[j], r[j + 4], 0x31);
  }
  for (int j = 0; j < 8; ++j) r[j] = t[j];
}

static inline __m256 abs8(__m256 x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }

}  // namespace tessera::kernels::avx2
