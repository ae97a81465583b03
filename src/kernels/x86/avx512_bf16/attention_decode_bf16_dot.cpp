// Decode attention over a bf16 KV cache with bf16 dot products (vdpbf16ps),
// for bf16 q: the f32 kernel (avx512/attention_decode.cpp) widens every K
// and V vector to f32 and multiplies 16 features per FMA, about twice what
// memory takes at 1 thread; one vdpbf16ps multiplies 32 as stored. Blocks
// of 64 keys, as the int8 kernel's (attention_decode_vnni.cpp), whose
// passes this one follows:
//   1. scores, 16 keys at a time: q scaled and rounded to bf16 once per
//      call; one vdpbf16ps per 32 features of a key and row, a row's 16
//      partial vectors of a key summed into one score by the shuffle tree;
//   2. the online softmax (shared with the f32 kernel);
//   3. P V: each row's probabilities rounded to bf16, a pair of keys per
//      32-bit broadcast, against the pair's V rows interleaved two keys to
//      a 32-bit lane in registers (one word unpack per 32 features, shared
//      by up to 4 rows), in sub-blocks of 8 keys where the sums of the
//      rows' features take two passes.
// The row sums live in the interleaved order of features (from_pair_order) and
// are put back in order once, at the end. Numerics: q and P rounded to bf16,
// as the bf16 flash kernels do: within the bf16 attention tolerance.
#include <cstring>

#include "kernels/scratch.hpp"
#include "kernels/x86/avx512/attention_common.hpp"

namespace tessera::kernels::avx512_bf16 {

namespace {

using namespace avx512;  // this level extends AVX-512: its helpers apply as they are

constexpr std::int64_t kBlock = 4 * kDecodeKeys;  // keys per block
constexpr int kGroups = int(kBlock / kDecodeKeys);
// Pairs of keys per P V sub-block where the rows' sums take more than one
// pass over the features (pv_rows).
constexpr std::int64_t kSubPairs = 4;

// Row r of q times a.scale, rounded to bf16.
static void q_bf16(const AttentionArgs& a, std::int64_t r, std::uint16_t* out) {
  const void* src = q_row(a, r);
  const __m512 scale = _mm512_set1_ps(a.scale);
  for (std::int64_t d = 0; d < a.head_dim; d += 32) {
    const __m512 lo = _mm512_mul_ps(scale, load16(advance(src, a.q_dtype, d), a.q_dtype, 0xffff));
    const __m512 hi = _mm512_mul_ps(scale, load16(advance(src, a.q_dtype, d + 16), a.q_dtype, 0xffff));
    _mm512_storeu_si512(out + d, to_bf16x2(lo, hi));
  }
}

// q . k as score_keys16 wants it: 32 bf16 features a vector, pairs summed in f32 lanes.
struct Bf16Dot {
  using Vec = __m512;
  static __m512 q(const char* row, int v) { return _mm512_loadu_ps(row + 64 * v); }
  static __m512 k(const void* row, int v) { return _mm512_loadu_ps(static_cast<const char*>(row) + 64 * v); }
  static __m512 dot(__m512 acc, __m512 k, __m512 q) { return _mm512_dpbf16_ps(acc, (__m512bh)k, (__m512bh)q); }
  static __m512 sums(__m512 acc) { return acc; }
};

// o[PR rows][features of chunks c0 .. c0 + CP) = alpha o + P V over the
// pairs of keys [t0, t1): p the rows' bf16 probabilities (kBlock apart, zero past
// the visible keys), o in pair order (from_pair_order). vdpbf16ps multiplies
// pairs of adjacent words, so each 32-feature chunk of two keys' V rows is
// interleaved in registers, a word unpack within 128-bit lanes: lane 4i + e
// of the low unpack holds feature 8i + e of both keys, of the high one
// 8i + 4 + e. PR rows share each unpack; writing the interleaved block out
// once and reading it back per row pair instead cost a quarter of the
// kernel (stores, and a scratch that evicted the block from L1).
template <int DQ, int PR, int CP, class Prefetch>
static void pv_chunks(const std::uint16_t* p, std::int64_t t0, std::int64_t t1, const void* const* vrow, int c0, const float* alpha,
                      float* o, Prefetch& pf) {
  constexpr std::int64_t dim = 32 * DQ;
  __m512 acc[PR][2 * CP];
  for (int r = 0; r < PR; ++r)
    for (int i = 0; i < 2 * CP; ++i) acc[r][i] = _mm512_mul_ps(_mm512_set1_ps(alpha[r]), _mm512_loadu_ps(o + r * dim + 32 * c0 + 16 * i));
  for (std::int64_t t = t0; t < t1; ++t) {
    pf.tick();
    __m512i pair[PR];
    for (int r = 0; r < PR; ++r) {
      std::int32_t bits;
      std::memcpy(&bits, p + r * kBlock + 2 * t, sizeof(bits));
      pair[r] = _mm512_set1_epi32(bits);
    }
    const char* v0 = static_cast<const char*>(vrow[2 * t]) + 64 * c0;
    const char* v1 = static_cast<const char*>(vrow[2 * t + 1]) + 64 * c0;
    for (int c = 0; c < CP; ++c) {
      const __m512i a0 = _mm512_loadu_si512(v0 + 64 * c), a1 = _mm512_loadu_si512(v1 + 64 * c);
      const __m512i lo = _mm512_unpacklo_epi16(a0, a1), hi = _mm512_unpackhi_epi16(a0, a1);
      for (int r = 0; r < PR; ++r) {
        acc[r][2 * c] = _mm512_dpbf16_ps(acc[r][2 * c], (__m512bh)lo, (__m512bh)pair[r]);
        acc[r][2 * c + 1] = _mm512_dpbf16_ps(acc[r][2 * c + 1], (__m512bh)hi, (__m512bh)pair[r]);
      }
    }
  }
  for (int r = 0; r < PR; ++r)
    for (int i = 0; i < 2 * CP; ++i) _mm512_storeu_ps(o + r * dim + 32 * c0 + 16 * i, acc[r][i]);
}
// 32 features of row sums at p from pv_chunks' order (feature 8i + 4h + e
// in lane 4i + e of vector h) back to theirs.
static inline void from_pair_order(const float* p, float* out) {
  const __m512i low = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512 lo = _mm512_loadu_ps(p), hi = _mm512_loadu_ps(p + 16);
  _mm512_storeu_ps(out, _mm512_permutex2var_ps(lo, low, hi));
  _mm512_storeu_ps(out + 16, _mm512_permutex2var_ps(lo, _mm512_add_epi32(low, _mm512_set1_epi32(8)), hi));
}

// P V for PR rows from r over all chunks, CP at a time: the most chunks
// whose sums fit 16 registers with the rows'.
template <int DQ, int PR>
constexpr int kChunksPerPass = 8 / PR >= DQ ? DQ : (DQ % 2 == 0 && 8 / PR >= 2 ? 2 : 1);
template <int DQ, int PR, class Prefetch>
static void pv_rows(const std::uint16_t* p, const std::int64_t* valid, const void* const* vrow, const float* alpha, float* o,
                    Prefetch& pf) {
  constexpr int CP = kChunksPerPass<DQ, PR>;
  std::int64_t keys = 0;
  for (int r = 0; r < PR; ++r) keys = std::max(keys, valid[r]);
  if (keys == 0) return;  // alpha is 1
  // Where the features take more than one pass (4 rows at D 128: two of
  // 64), the passes go over sub-blocks of kSubPairs pairs, the sums saved
  // in between: a pass over the whole block read half of every V row, 64
  // keys apart from the other half, and the memory stream of those pieces
  // ran at half the speed of whole rows (AMD EPYC Zen 4, a probe of these
  // passes over 64 MiB: 11.6-11.9 against 21-23.5 GB/s). AMD EPYC Turin
  // (Zen 5), bench attention decode_b1_kv4096 bf16, alternating: 1 thread
  // 0.93 -> 0.81 ms, 2 threads 0.47 -> 0.42 (2 pairs and 8: between).
  const std::int64_t pairs = (keys + 1) / 2, step = CP < DQ ? kSubPairs : pairs;
  float one[PR];
  std::fill(one, one + PR, 1.0f);
  for (std::int64_t t0 = 0; t0 < pairs; t0 += step)
    for (int c = 0; c < DQ; c += CP) pv_chunks<DQ, PR, CP>(p, t0, std::min(t0 + step, pairs), vrow, c, t0 == 0 ? alpha : one, o, pf);
}

// The prefetch ticks of all rows' P V passes over a full block.
template <int DQ>
static int pv_ticks(std::int64_t rows) {
  int ticks = 0;
  for_row_passes(rows, [&](std::int64_t, auto pr) { ticks += int(kBlock / 2) * DQ / kChunksPerPass<DQ, pr()>; });
  return ticks;
}

template <int DQ>
static void decode(const AttentionArgs& a, std::int64_t t0, std::int64_t t1, const AttentionOutput& out) {
  constexpr std::int64_t dim = 32 * DQ, row_bytes = 2 * dim;
  constexpr int R = DQ <= 2 ? 4 : 2;   // rows per score pass: q, the sums and a key's vectors in registers
  const std::int64_t rows = a.rows;
  RowView view[kMaxRows];
  const std::int64_t t_end = decode_views(a, t1, view);

  // Scratch: row sums (interleaved features), then in order; m, l; q rows,
  // the rows' probabilities and a zero row in bf16.
  const std::size_t floats = std::size_t(2 * rows * dim + 2 * rows);
  const std::size_t halves = std::size_t((rows + 1) * dim + rows * kBlock);
  auto* o = static_cast<float*>(thread_scratch(ScratchSlot::a_panel, floats * sizeof(float) + halves * 2));
  float* ordered = o + rows * dim;
  float* m = ordered + rows * dim;
  float* l = m + rows;
  auto* qb = reinterpret_cast<std::uint16_t*>(l + rows);
  std::uint16_t* zero = qb + rows * dim;
  std::uint16_t* pb = zero + dim;
  std::memset(zero, 0, dim * 2);
  for (std::int64_t r = 0; r < rows; ++r) {
    q_bf16(a, r, qb + r * dim);
    std::fill(o + r * dim, o + (r + 1) * dim, 0.0f);
    m[r] = kNegInf;
    l[r] = 0.0f;
  }

  KvRows<kBlock> block;
  Prefetcher<row_bytes, kBlock> pf(a.prefetch_l1);
  alignas(64) float s[kMaxRows * kBlock];
  float alpha[kMaxRows];
  const int ticks = score_block_ticks<R, kBlock>(rows) + pv_ticks<DQ>(rows);
  for (std::int64_t tb = t0; tb < t_end; tb += kBlock) {
    std::int64_t valid[kMaxRows];
    const std::int64_t n = start_block(a, view, tb, t_end, zero, block, pf, valid);
    pf.pace(ticks);
    score_block<DQ, R, Bf16Dot>(reinterpret_cast<const char*>(qb), 2 * dim, rows, block, n, s, pf);

    const int groups = int((n + kDecodeKeys - 1) / kDecodeKeys);
    for (std::int64_t r = 0; r < rows; ++r) {
      __m512 x[kGroups];
      for (int g = 0; g < kGroups; ++g) x[g] = g < groups ? _mm512_load_ps(s + r * kBlock + 16 * g) : _mm512_set1_ps(kNegInf);
      softmax_step<kGroups>(a, view[r], tb, valid[r], x, m[r], l[r], alpha[r]);
      for (int g = 0; g < kGroups; g += 2) _mm512_storeu_si512(pb + r * kBlock + 16 * g, to_bf16x2(x[g], x[g + 1]));
    }
    for_row_passes(rows, [&](std::int64_t r, auto pr) {
      pv_rows<DQ, pr()>(pb + r * kBlock, valid + r, block.v, alpha + r, o + r * dim, pf);
    });
    pf.issue(0, 1);  // whatever is left
  }

  for (std::int64_t d = 0; d < rows * dim; d += 32) from_pair_order(o + d, ordered + d);
  finish_rows(a, out, ordered, dim, m, l);
}

}  // namespace

void attention_decode_bf16_dot(const AttentionArgs& a, std::int64_t t0, std::int64_t t1, const AttentionOutput& out) {
  switch (a.head_dim) {  // the head dims the row admits (kernels/attention.cpp)
    case 64: return decode<2>(a, t0, t1, out);
    case 96: return decode<3>(a, t0, t1, out);
    case 128: return decode<4>(a, t0, t1, out);
    default: return decode<8>(a, t0, t1, out);
  }
}

}  // namespace tessera::kernels::avx512_bf16
