// Decode attention over an int8 KV cache with integer dot products
// (vpdpbusd), where the f32 kernel (avx512/attention_decode.cpp) spends ~100
// cycles a key converting and multiplying, 3x what memory takes for 256
// bytes of int8 K and V. Blocks are 64 keys, so each row's softmax
// bookkeeping (two reductions, the rescale's exp) is shared by 64 keys: with
// 16 this kernel was no faster than the f32 one. Per block:
//   1. scores, 16 keys at a time: q is quantized once per call (symmetric
//      int8 per row, as W8A8 does with activations); keys are made unsigned
//      on the fly (k ^ 0x80 = k + 128, taken back as 128 * sum(q)), so one
//      vpdpbusd multiplies 64 bytes of K by 64 of q; a row's 16 partial
//      vectors of a key become one score by the f32 kernel's shuffle tree
//      (the integer sums are exact in f32: below 2^24 for D <= 256);
//   2. the online softmax (shared with the f32 kernel) on the scores times
//      the keys' scales;
//   3. P V: each row's probabilities times the values' scales, quantized to
//      uint8 against the block's largest (so the largest is exact), against
//      V rows interleaved four keys to a 32-bit lane in registers (shared by
//      up to 4 rows), one vpdpbusd per 64 dims and four keys; the block's
//      i32 sums join the f32 row sums.
// The row sums live in the interleaved order of dims (from_quad_order) and are
// put back in order once, at the end. Numerics: see
// tolerance_for_int8_kv_cache (compare.hpp).
#include <cstring>

#include "kernels/matmul.hpp"
#include "kernels/scratch.hpp"
#include "kernels/x86/avx512/attention_common.hpp"

namespace tessera::kernels::avx512_bf16 {

namespace {

using avx512::finish_rows;
using avx512::kDecodeKeys;  // keys per score vector
using avx512::score_block;
using avx512::softmax_step;

// Row r of q (scaled by a.scale) as int8 steps of qscale[r], W8A8's row
// scale (w8a8_row_scale: max|q| / 127; NaN for a row holding NaN or Inf, so
// its scores are NaN), and the sum of its steps.
static void quantize_q(const AttentionArgs& a, std::int64_t r, std::int8_t* q8, float& qscale, std::int32_t& qsum) {
  const std::int64_t dim = a.head_dim;
  const void* src = q_row(a, r);
  const __m512 scale = _mm512_set1_ps(a.scale);
  __m512 absmax = _mm512_setzero_ps();
  __mmask16 finite = 0xffff;
  for (std::int64_t d = 0; d < dim; d += 16) {
    const __m512 v = _mm512_mul_ps(scale, avx512::load16(advance(src, a.q_dtype, d), a.q_dtype, 0xffff));
    finite &= _mm512_cmp_ps_mask(_mm512_sub_ps(v, v), _mm512_setzero_ps(), _CMP_EQ_OQ);  // v - v is 0 unless NaN or Inf
    absmax = _mm512_max_ps(absmax, _mm512_abs_ps(v));
  }
  qscale = w8a8_row_scale(_mm512_reduce_max_ps(absmax), finite == 0xffff);
  const __m512 inv = _mm512_set1_ps(1.0f / qscale);  // NaN: the clamp below turns its steps to -127, unused
  __m512i sum = _mm512_setzero_si512();
  for (std::int64_t d = 0; d < dim; d += 16) {
    const __m512 v = _mm512_mul_ps(scale, avx512::load16(advance(src, a.q_dtype, d), a.q_dtype, 0xffff));
    const __m512i q = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v, inv), _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q8 + d), _mm512_cvtsepi32_epi8(q));
    sum = _mm512_add_epi32(sum, q);
  }
  qsum = _mm512_reduce_add_epi32(sum);
}

// q . k as score_keys16 wants it: 64 int8 features a vector, the keys made
// unsigned on the fly, exact i32 sums (as f32: below 2^24 for D <= 256).
struct Int8Dot {
  using Vec = __m512i;
  static __m512i q(const char* row, int v) { return _mm512_loadu_si512(row + 64 * v); }
  static __m512i k(const void* row, int v) {
    return _mm512_xor_si512(_mm512_loadu_si512(static_cast<const char*>(row) + 64 * v), _mm512_set1_epi8(char(0x80)));
  }
  static __m512i dot(__m512i acc, __m512i k, __m512i q) { return _mm512_dpbusd_epi32(acc, k, q); }
  static __m512 sums(__m512i acc) { return _mm512_cvtepi32_ps(acc); }
};

constexpr std::int64_t kBlock = 4 * kDecodeKeys;  // keys per block
constexpr int kGroups = int(kBlock / kDecodeKeys);

// o[PR rows][dims of chunks c0 .. c0 + CP) = alpha o + pscale (pq V) over
// `quads` groups of four keys: pq the rows' uint8 probabilities (kBlock
// apart, zero past the visible keys), o in quad order (from_quad_order).
// vpdpbusd sums four adjacent bytes, so each 64-dim chunk of a quad's four
// V rows is interleaved in registers, two rounds of unpacking within 128-bit
// lanes (bytes, then words): lane 4L + p of vector j holds dim 16L + 4j + p
// of the four keys. PR rows share each unpack; writing the interleaved
// block out once and reading it back per row cost two stores and eight
// loads a key (int8 kv4096 from L3, 1 thread: 13-14 -> 18-19 GB/s; from
// memory within noise, 15-16 both).
template <int DQ, int PR, int CP, class Prefetch>
static void pv_quads(const std::uint8_t* pq, std::int64_t quads, const void* const* vrow, int c0, const float* alpha,
                     const float* pscale, float* o, Prefetch& pf) {
  constexpr std::int64_t dim = 64 * DQ;
  __m512i acc[PR][4 * CP];
  for (int r = 0; r < PR; ++r)
    for (int i = 0; i < 4 * CP; ++i) acc[r][i] = _mm512_setzero_si512();
  // A prefetch tick every two quads: between single quads, GCC kept the
  // sums in memory around the tick's loop, 16 stores a quad.
  for (std::int64_t g0 = 0; g0 < quads; g0 += 2) {
    pf.tick();
    for (std::int64_t g = g0; g < std::min(g0 + 2, quads); ++g) {
      __m512i p[PR];
      for (int r = 0; r < PR; ++r) {
        std::int32_t four;
        std::memcpy(&four, pq + r * kBlock + 4 * g, 4);
        p[r] = _mm512_set1_epi32(four);
      }
      for (int c = 0; c < CP; ++c) {
        const auto row = [&](int i) { return _mm512_loadu_si512(static_cast<const char*>(vrow[4 * g + i]) + 64 * (c0 + c)); };
        const __m512i v0 = row(0), v1 = row(1), v2 = row(2), v3 = row(3);
        const __m512i lo01 = _mm512_unpacklo_epi8(v0, v1), hi01 = _mm512_unpackhi_epi8(v0, v1);
        const __m512i lo23 = _mm512_unpacklo_epi8(v2, v3), hi23 = _mm512_unpackhi_epi8(v2, v3);
        const __m512i x0 = _mm512_unpacklo_epi16(lo01, lo23), x1 = _mm512_unpackhi_epi16(lo01, lo23);
        const __m512i x2 = _mm512_unpacklo_epi16(hi01, hi23), x3 = _mm512_unpackhi_epi16(hi01, hi23);
        for (int r = 0; r < PR; ++r) {
          acc[r][4 * c] = _mm512_dpbusd_epi32(acc[r][4 * c], p[r], x0);
          acc[r][4 * c + 1] = _mm512_dpbusd_epi32(acc[r][4 * c + 1], p[r], x1);
          acc[r][4 * c + 2] = _mm512_dpbusd_epi32(acc[r][4 * c + 2], p[r], x2);
          acc[r][4 * c + 3] = _mm512_dpbusd_epi32(acc[r][4 * c + 3], p[r], x3);
        }
      }
    }
  }
  for (int r = 0; r < PR; ++r) {
    const __m512 av = _mm512_set1_ps(alpha[r]), ps = _mm512_set1_ps(pscale[r]);
    float* orow = o + r * dim + 64 * c0;
    for (int i = 0; i < 4 * CP; ++i)
      _mm512_storeu_ps(orow + 16 * i, _mm512_fmadd_ps(ps, _mm512_cvtepi32_ps(acc[r][i]), _mm512_mul_ps(av, _mm512_loadu_ps(orow + 16 * i))));
  }
}
// 64 dims of row sums at p from pv_quads' order (dim 16L + 4j + p in lane
// 4L + p of vector j) back to theirs: a 4 x 4 transpose of 128-bit lanes.
static inline void from_quad_order(const float* p, float* out) {
  const __m512 v0 = _mm512_loadu_ps(p), v1 = _mm512_loadu_ps(p + 16), v2 = _mm512_loadu_ps(p + 32), v3 = _mm512_loadu_ps(p + 48);
  const __m512 t0 = _mm512_shuffle_f32x4(v0, v1, 0x44), t1 = _mm512_shuffle_f32x4(v2, v3, 0x44);
  const __m512 t2 = _mm512_shuffle_f32x4(v0, v1, 0xee), t3 = _mm512_shuffle_f32x4(v2, v3, 0xee);
  _mm512_storeu_ps(out, _mm512_shuffle_f32x4(t0, t1, 0x88));
  _mm512_storeu_ps(out + 16, _mm512_shuffle_f32x4(t0, t1, 0xdd));
  _mm512_storeu_ps(out + 32, _mm512_shuffle_f32x4(t2, t3, 0x88));
  _mm512_storeu_ps(out + 48, _mm512_shuffle_f32x4(t2, t3, 0xdd));
}

// P V for PR rows over all chunks, CP at a time: the most chunks whose sums
// fit 16 registers with the rows'.
template <int DQ, int PR>
constexpr int kChunksPerPass = 4 / PR >= DQ ? DQ : 4 / PR >= 2 && DQ % 2 == 0 ? 2 : 1;
template <int DQ, int PR, class Prefetch>
static void pv_rows(const std::uint8_t* pq, std::int64_t quads, const void* const* vrow, const float* alpha, const float* pscale,
                    float* o, Prefetch& pf) {
  constexpr int CP = kChunksPerPass<DQ, PR>;
  for (int c = 0; c < DQ; c += CP) pv_quads<DQ, PR, CP>(pq, quads, vrow, c, alpha, pscale, o, pf);
}
// The prefetch ticks of all rows' P V passes over a full block.
template <int DQ>
static int pv_ticks(std::int64_t rows) {
  int ticks = 0;
  for_row_passes(rows, [&](std::int64_t, auto pr) { ticks += int(kBlock / 8) * DQ / kChunksPerPass<DQ, pr()>; });
  return ticks;
}

template <int DQ>
static void decode(const AttentionArgs& a, std::int64_t t0, std::int64_t t1, const AttentionOutput& out) {
  constexpr std::int64_t dim = 64 * DQ;
  constexpr int R = DQ <= 2 ? 4 : 2;  // rows per score pass: q, the sums and a key's vectors in registers
  const std::int64_t rows = a.rows;
  RowView view[kMaxRows];
  const std::int64_t t_end = decode_views(a, t1, view);

  // Scratch: row sums (interleaved dims), then in order; m, l; q8 rows; a zero row.
  const std::size_t floats = std::size_t(2 * rows * dim + 2 * rows);
  auto* o = static_cast<float*>(thread_scratch(ScratchSlot::a_panel, floats * sizeof(float) + std::size_t(rows + 1) * dim));
  float* ordered = o + rows * dim;
  float* m = ordered + rows * dim;
  float* l = m + rows;
  auto* q8 = reinterpret_cast<std::int8_t*>(l + rows);
  const std::int8_t* zero = q8 + rows * dim;
  std::memset(q8 + rows * dim, 0, dim);
  float qscale[kMaxRows];
  std::int32_t qsum[kMaxRows];
  for (std::int64_t r = 0; r < rows; ++r) {
    quantize_q(a, r, q8 + r * dim, qscale[r], qsum[r]);
    std::fill(o + r * dim, o + (r + 1) * dim, 0.0f);
    m[r] = kNegInf;
    l[r] = 0.0f;
  }

  KvRows<kBlock> block;
  Prefetcher<dim, kBlock> pf(a.prefetch_l1);
  alignas(64) float s[kMaxRows * kBlock];
  const int ticks = avx512::score_block_ticks<R, kBlock>(rows) + pv_ticks<DQ>(rows);
  for (std::int64_t tb = t0; tb < t_end; tb += kBlock) {
    std::int64_t valid[kMaxRows];
    const std::int64_t n = start_block(a, view, tb, t_end, zero, block, pf, valid);
    for (std::int64_t i = n; i < kBlock; ++i) block.k_scale[i] = block.v_scale[i] = 0.0f;
    pf.pace(ticks);
    score_block<DQ, R, Int8Dot>(reinterpret_cast<const char*>(q8), dim, rows, block, n, s, pf);

    const int groups = int((n + kDecodeKeys - 1) / kDecodeKeys);
    alignas(64) std::uint8_t pq[kMaxRows * kBlock];
    float alpha[kMaxRows], pscale[kMaxRows];
    std::int64_t quads = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      __m512 x[kGroups];
      const __m512 offset = _mm512_set1_ps(128.0f * float(qsum[r])), qs = _mm512_set1_ps(qscale[r]);
      for (int g = 0; g < kGroups; ++g)
        x[g] = g < groups ? _mm512_mul_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_load_ps(s + r * kBlock + 16 * g), offset), qs),
                                          _mm512_loadu_ps(block.k_scale + 16 * g))
                          : _mm512_set1_ps(kNegInf);
      softmax_step<kGroups>(a, view[r], tb, valid[r], x, m[r], l[r], alpha[r]);
      __m512 pmax_v = _mm512_setzero_ps();
      for (int g = 0; g < kGroups; ++g) pmax_v = _mm512_max_ps(pmax_v, x[g] = _mm512_mul_ps(x[g], _mm512_loadu_ps(block.v_scale + 16 * g)));
      const float pmax = _mm512_reduce_max_ps(pmax_v);
      // Nothing to add where pmax is 0 (or NaN: the row's l is NaN already): P = 0, so o = alpha o.
      const bool adds = pmax > 0.0f;
      pscale[r] = adds ? pmax / 255.0f : 0.0f;
      const __m512 to_steps = _mm512_set1_ps(adds ? 255.0f / pmax : 0.0f);
      for (int g = 0; g < kGroups; ++g)
        _mm_store_si128(reinterpret_cast<__m128i*>(pq + r * kBlock + 16 * g),
                        _mm512_cvtusepi32_epi8(_mm512_cvtps_epu32(_mm512_mul_ps(x[g], to_steps))));
      if (adds) quads = std::max(quads, (valid[r] + 3) / 4);
    }
    for_row_passes(rows, [&](std::int64_t r, auto pr) {
      pv_rows<DQ, pr()>(pq + r * kBlock, quads, block.v, alpha + r, pscale + r, o + r * dim, pf);
    });
    pf.issue(0, 1);  // whatever is left
  }

  for (std::int64_t d = 0; d < rows * dim; d += 64) from_quad_order(o + d, ordered + d);
  finish_rows(a, out, ordered, dim, m, l);
}

}  // namespace

void attention_decode_vnni(const AttentionArgs& a, std::int64_t t0, std::int64_t t1, const AttentionOutput& out) {
  switch (a.head_dim) {  // the head dims the row admits (kernels/attention.cpp)
    case 64: return decode<1>(a, t0, t1, out);
    case 128: return decode<2>(a, t0, t1, out);
    default: return decode<4>(a, t0, t1, out);
  }
}

}  // namespace tessera::kernels::avx512_bf16
