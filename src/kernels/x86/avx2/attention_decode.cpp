// Decode attention on AVX2 + FMA: a few query rows (positions × the query
// heads of one kv head, at most 16) against a long run of keys, where the
// kernel must keep up with memory. The plan of the AVX-512 decode kernel
// (avx512/attention_decode.cpp) on 16 registers of 8 lanes, where q no
// longer fits in registers (16 of them at D = 128). Per block of 16 keys,
// in passes of up to 4 rows:
//   1. scores: dot products of q, read from L1 as the FMAs' operands, with
//      each key row read in place: 8 accumulators (rows × keys), each key's
//      16 features loaded (and converted) once for the pass's rows, summed
//      across lanes by a tree of hadds;
//   2. the online softmax per row (attention_common.hpp; int8: the scores
//      times the keys' scales first, the probabilities times the values'
//      scales after);
//   3. O = alpha O + P V, 16 to 64 features of the pass's rows in registers
//      across the block's keys, each V vector loaded once.
// f32 rows are read as stored, bf16 in their own even/odd order (vec.hpp,
// load16_unordered; q permuted to match, the sums back at the end), int8
// widened in registers. Against the flash kernel this drops the transpose of
// K into f32 and the copy of V, which took most of its time on decode shapes
// (K and V in L3, ~100 ns per key and kv head at 4 rows).
#include <algorithm>
#include <cstdint>

#include "kernels/scratch.hpp"
#include "kernels/x86/avx2/attention_common.hpp"

namespace tessera::kernels::avx2 {

namespace {

// Keys per block. 32 were faster from the L2 (7 %) but slower cold, where
// a block's rows and the next block's, prefetched meanwhile, outgrow a 32
// KiB L1 (bench attention decode_b1_kv4096 f32, AMD EPYC, Zen 2,
// alternating, 3 rounds, 1 / 2 threads: 3.06 / 1.71 -> 3.72 / 2.05 ms; bf16
// 1.64 / 0.83 -> 1.78 / 1.08). int8 rows, 128 bytes at D 128, take 64 keys
// in 16 KiB: each block's fixed work (gathering and prefetching rows,
// row maxima and sums, rescaling) spread over 4x the keys (ms, 16 -> 64:
// decode_b1_kv4096 1.83 / 0.94 -> 1.68 / 0.85, b1_kv16384 7.27 / 3.62 ->
// 6.62 / 3.52, b8_kv4096 14.4 / 7.36 -> 13.4 / 6.79; 128 within 3 % of 64).
template <DType T>
constexpr std::int64_t kKeys = T == DType::i8 ? 64 : 16;

// Features 16 u .. 16 u + 15 of a key or value row of storage type T as
// f32 in T's order (bf16: the evens, then the odds); int8 unscaled.
template <DType T>
static inline Pair load_unit(const void* row, std::int64_t u) {
  if constexpr (T == DType::i8) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const std::int8_t*>(row) + 16 * u));
    return {_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(x)), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(x, x)))};
  } else {
    return load16_unordered(advance(row, T, 16 * u), T);
  }
}

// Keys per score call of R rows: R × KP = 8 accumulators, KP even (pairs of keys share a hadd).
template <int R>
constexpr int kScoreKeys = R == 1 ? 8 : R == 2 ? 4 : 2;

// Dot products of R rows of q (dim apart, in T's order) with KP keys, over
// `units` 16-feature units. Leaves per row i and pair j of keys the hadd of
// their accumulators in pairs[i kKeys<T> / 2 + j], which sum_pairs8 completes.
template <int NU, int R, int KP, DType T>
static inline void score_keys(const float* q, const void* const* krow, __m256* pairs) {
  constexpr std::int64_t dim = 16 * NU;
  __m256 acc[R][KP];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < KP; ++j) acc[i][j] = _mm256_setzero_ps();
  for (int u = 0; u < NU; ++u)
    for (int j = 0; j < KP; ++j) {
      const Pair k = load_unit<T>(krow[j], u);
      for (int i = 0; i < R; ++i) {
        const float* qi = q + i * dim + 16 * u;
        acc[i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(qi), k.lo, acc[i][j]);
        acc[i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(qi + 8), k.hi, acc[i][j]);
      }
    }
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < KP; j += 2) pairs[i * (kKeys<T> / 2) + j / 2] = _mm256_hadd_ps(acc[i][j], acc[i][j + 1]);
}

// Four pairs of score_keys (keys 0-1, .., 6-7) into the 8 keys' whole sums.
static inline __m256 sum_pairs8(const __m256* x) {
  const __m256 y0 = _mm256_hadd_ps(x[0], x[1]), y1 = _mm256_hadd_ps(x[2], x[3]);  // keys 0-3, 4-7; each 128-bit half's sums
  return _mm256_add_ps(_mm256_permute2f128_ps(y0, y1, 0x20), _mm256_permute2f128_ps(y0, y1, 0x31));
}

// The scores of R rows for the block's keys, into s (rows kKeys<T> apart); a
// prefetch tick per call of score_keys.
template <int NU, int R, DType T, class Prefetch>
static void score_pass(const float* q, const void* const* krow, float* s, Prefetch& pf) {
  constexpr int KP = kScoreKeys<R>;
  __m256 pairs[R * kKeys<T> / 2];
  for (int c = 0; c < kKeys<T>; c += KP) {
    score_keys<NU, R, KP, T>(q, krow + c, pairs + c / 2);
    pf.tick();
  }
  for (int i = 0; i < R; ++i)
    for (int h = 0; h < kKeys<T>; h += 8) _mm256_store_ps(s + i * kKeys<T> + h, sum_pairs8(pairs + i * (kKeys<T> / 2) + h / 2));
}

// o[R rows][16 U features from unit u] = alpha o + Σ_t p[t] V_t over the
// first `keys` keys (p: rows kKeys<T> apart), the sums in registers.
template <int NU, int R, int U, DType T>
static inline void pv_units(const float* p, const float* alpha, float* o, const void* const* vrow, std::int64_t keys, int u) {
  constexpr std::int64_t dim = 16 * NU;
  __m256 acc[R][2 * U];
  for (int i = 0; i < R; ++i) {
    const __m256 al = _mm256_broadcast_ss(alpha + i);
    for (int w = 0; w < 2 * U; ++w) acc[i][w] = _mm256_mul_ps(al, _mm256_loadu_ps(o + i * dim + 16 * u + 8 * w));
  }
  for (std::int64_t t = 0; t < keys; ++t) {
    __m256 b[R];
    for (int i = 0; i < R; ++i) b[i] = _mm256_broadcast_ss(p + i * kKeys<T> + t);
    for (int w = 0; w < U; ++w) {
      const Pair v = load_unit<T>(vrow[t], u + w);
      for (int i = 0; i < R; ++i) {
        acc[i][2 * w] = _mm256_fmadd_ps(b[i], v.lo, acc[i][2 * w]);
        acc[i][2 * w + 1] = _mm256_fmadd_ps(b[i], v.hi, acc[i][2 * w + 1]);
      }
    }
  }
  for (int i = 0; i < R; ++i)
    for (int w = 0; w < 2 * U; ++w) _mm256_storeu_ps(o + i * dim + 16 * u + 8 * w, acc[i][w]);
}

// Units per P V call of R rows: 8 accumulators.
template <int R>
constexpr int kPvUnits = 4 / R;

// O = alpha O + P V for R rows, a prefetch tick per call of pv_units.
template <int NU, int R, DType T, class Prefetch>
static void pv_pass(const float* p, const float* alpha, float* o, const void* const* vrow, std::int64_t keys, Prefetch& pf) {
  constexpr int U = kPvUnits<R>;
  constexpr int whole = NU / U * U;
  for (int u = 0; u < whole; u += U) pv_units<NU, R, U, T>(p, alpha, o, vrow, keys, u), pf.tick();
  if constexpr (whole < NU)
    for (int u = whole; u < NU; ++u) pv_units<NU, R, 1, T>(p, alpha, o, vrow, keys, u), pf.tick();
}

// s[0 : kKeys<T>] *= scale[0 : kKeys<T>] (int8's per-token scales).
template <DType T>
static inline void scale_keys(float* s, const float* scale) {
  for (int h = 0; h < kKeys<T>; h += 8) _mm256_store_ps(s + h, _mm256_mul_ps(_mm256_load_ps(s + h), _mm256_load_ps(scale + h)));
}

template <int NU, DType T>
static void decode(const AttentionArgs& a, std::int64_t t0, std::int64_t t1, const AttentionOutput& out) {
  constexpr std::int64_t dim = 16 * NU;
  const std::int64_t rows = a.rows;
  RowView view[kMaxRows];
  const std::int64_t t_end = decode_views(a, t1, view);

  // Row state (q scaled, in T's order; o sums; scores and probabilities; m,
  // l and alpha, kMaxRows each) and a zero row for the keys past the last
  // block's end. Every part a whole number of vectors.
  auto* q = static_cast<float*>(thread_scratch(ScratchSlot::a_panel, sizeof(float) * (2 * rows * dim + rows * kKeys<T> + 3 * kMaxRows + dim)));
  float* o = q + rows * dim;
  float* s = o + rows * dim;
  float* m = s + rows * kKeys<T>;
  float* l = m + kMaxRows;
  float* alpha = l + kMaxRows;
  float* zero = alpha + kMaxRows;
  const __m256 scale = q_scale(a);
  for (std::int64_t r = 0; r < rows; ++r) {
    float* qr = q + r * dim;
    const void* src = q_row(a, r);
    for (std::int64_t d = 0; d < dim; d += 8) _mm256_storeu_ps(qr + d, _mm256_mul_ps(scale, load8(advance(src, a.q_dtype, d), a.q_dtype)));
    if constexpr (T == DType::bf16)
      for (std::int64_t d = 0; d < dim; d += 16) to_bf16_order16(qr + d, qr + d);
  }
  std::fill(o, o + rows * dim, 0.0f);
  std::fill(m, m + kMaxRows, kNegInf);
  std::fill(l, zero + dim, 0.0f);  // l, alpha, zero

  // Prefetch ticks per block: score_keys and pv_units calls.
  int ticks = 0;
  for_row_passes(rows, [&](std::int64_t, auto pr) {
    ticks += int(kKeys<T> / kScoreKeys<pr()> + NU / kPvUnits<pr()> + NU % kPvUnits<pr()>);
  });
  KvRows<kKeys<T>> block;
  // Rows of more than 4 lines prefetched by a loop, their size taken from
  // the arguments so that the compiler cannot fold it: a burst of 8 lines
  // (the loop unrolled by a size known at compile time) measured slower,
  // while rows of 2 and 4 lines gained from it (AMD EPYC, Zen 2, bench
  // attention decode_b1_kv4096, alternating, 3 rounds, ms at 1 / 2 threads,
  // burst against loop: f32 2.8 / 1.7 against 2.3 / 1.4, bf16 1.56 / 0.81
  // against 1.63 / 0.84, int8 1.70 / 0.87 against 1.85 / 0.94).
  constexpr std::int64_t kRowBytes = dim * bytes_of(T);
  Prefetcher<kRowBytes <= 256 ? kRowBytes : 0, kKeys<T>> pf(a.prefetch_l1);
  if constexpr (kRowBytes > 256) pf.row_bytes = a.head_dim * bytes_of(a.kv.dtype);
  std::int64_t valid[kMaxRows];
  UnitRow u(a, 0);
  for (std::int64_t r = 0; r < rows; ++r, u.next(a)) prefetch_out_row(a, out, u);
  for (std::int64_t tb = t0; tb < t_end; tb += kKeys<T>) {
    const std::int64_t n = start_block(a, view, tb, t_end, zero, block, pf, valid);
    pf.pace(ticks);
    alignas(32) float ks[kKeys<T>] = {}, vs[kKeys<T>] = {};
    if constexpr (T == DType::i8) std::copy(block.k_scale, block.k_scale + n, ks), std::copy(block.v_scale, block.v_scale + n, vs);

    // 1-2. Scores, then the online softmax row by row; alpha holds the old
    //      max until every row has its new one.
    for_row_passes(rows, [&](std::int64_t r, auto pr) { score_pass<NU, pr(), T>(q + r * dim, block.k, s + r * kKeys<T>, pf); });
    if constexpr (T == DType::i8)
      for (std::int64_t r = 0; r < rows; ++r) scale_keys<T>(s + r * kKeys<T>, ks);
    for (std::int64_t r0 = 0; r0 < rows; r0 += 8) {
      const void* masks[8];
      for (std::int64_t r = r0; r < std::min(rows, r0 + 8); ++r)
        masks[r - r0] = view[r].mask ? advance(view[r].mask, a.mask_dtype, tb * a.mask_key_stride) : nullptr;
      softmax_rows8(a, s + r0 * kKeys<T>, kKeys<T>, kKeys<T> / 8, std::min<std::int64_t>(8, rows - r0), valid + r0, masks, m + r0,
                    l + r0, alpha + r0);
    }
    if constexpr (T == DType::i8)
      for (std::int64_t r = 0; r < rows; ++r) scale_keys<T>(s + r * kKeys<T>, vs);

    // 3. O = alpha O + P V, over the keys a pass's last row sees (p is 0 past a row's own).
    for_row_passes(rows, [&](std::int64_t r, auto pr) {
      const std::int64_t keys = *std::max_element(valid + r, valid + r + pr());
      if (keys > 0) pv_pass<NU, pr(), T>(s + r * kKeys<T>, alpha + r, o + r * dim, block.v, keys, pf);
    });
    pf.issue(0, 1);  // whatever is left
  }
  if constexpr (T == DType::bf16)  // the sums back in order
    for (std::int64_t d = 0; d < rows * dim; d += 16) from_bf16_order16(o + d, o + d);
  finish_rows(a, out, o, dim, m, l);
}

}  // namespace

void attention_decode(const AttentionArgs& a, std::int64_t t0, std::int64_t t1, const AttentionOutput& out) {
  dispatch_decode(a.head_dim, a.kv.dtype, [&](auto units, auto type) { decode<units(), type()>(a, t0, t1, out); });
}

}  // namespace tessera::kernels::avx2
