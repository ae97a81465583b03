#pragma once
// Pieces shared by the AVX-512 attention kernels (flash and decode): reading
// key / value rows of a KvSource as f32, the additive mask, and writing a
// unit's final rows or its split-KV piece (addressing and prefetching the
// rows: x86/attention_rows.hpp). Static, like vec.hpp.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/x86/attention_rows.hpp"
#include "kernels/x86/load1.hpp"
#include "kernels/x86/avx512/math.hpp"

namespace tessera::kernels::avx512 {

// 16 features of one key or value row as f32 (int8: times the token's
// scale); features outside `mask` (past the head dim) read as 0.
static inline __m512 load_kv16(const void* row, DType t, std::int64_t d, float scale, __mmask16 mask = 0xffff) {
  if (t == DType::i8) {
    const __m128i q = _mm_maskz_loadu_epi8(mask, static_cast<const std::int8_t*>(row) + d);
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), _mm512_set1_ps(scale));
  }
  return load16(advance(row, t, d), t, mask);
}

// The additive mask of one row for `count` <= 16 keys from `row` (zeros past count).
static inline __m512 load_mask16(const AttentionArgs& a, const void* row, std::int64_t count) {
  if (a.mask_key_stride == 1) return load16(row, a.mask_dtype, tail_mask(count));
  alignas(64) float v[16] = {};
  for (std::int64_t i = 0; i < count; ++i) v[i] = load1(row, a.mask_dtype, i * a.mask_key_stride);
  return _mm512_load_ps(v);
}

// ------------------------------------------------------------------ decode
// Shared by the decode kernels (avx512/attention_decode.cpp, f32 dot
// products; avx512_bf16/attention_decode_vnni.cpp, int8 ones).

constexpr std::int64_t kDecodeKeys = 16;  // keys per block

// Lane 4i + j: the sum of 128-bit lane i of a_j.
static inline __m512 sum4_lanes(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  const __m512 b01 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
  const __m512 b23 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
  return _mm512_add_ps(_mm512_shuffle_ps(b01, b23, 0x44), _mm512_shuffle_ps(b01, b23, 0xee));
}

// From four sum4_lanes results c_g (keys 4g .. 4g + 3): lane 4g + j = the whole sum of key 4g + j.
static inline __m512 sum16(__m512 c0, __m512 c1, __m512 c2, __m512 c3) {
  const __m512 e01 = _mm512_add_ps(_mm512_shuffle_f32x4(c0, c1, 0x88), _mm512_shuffle_f32x4(c0, c1, 0xdd));
  const __m512 e23 = _mm512_add_ps(_mm512_shuffle_f32x4(c2, c3, 0x88), _mm512_shuffle_f32x4(c2, c3, 0xdd));
  return _mm512_add_ps(_mm512_shuffle_f32x4(e01, e23, 0x88), _mm512_shuffle_f32x4(e01, e23, 0xdd));
}

// Scores of R query rows for 16 keys, by dot products a kernel supplies
// (Dot): a row's q as NQ vectors, each key as NQ vectors, read in order, key
// after key (vector v of four keys at a time, addresses jumping a row ahead
// and back, held the hardware prefetcher back: AMD EPYC, Zen 4, a model of
// the pass streamed 14 GB/s against 24 in order; bench attention decode
// bf16 at 1 thread 35-36 % -> 40-42 % of the read bandwidth). One
// accumulator per row and key, each key vector loaded once for the R rows;
// a row's 16 sums become one vector of 16 scores by the shuffle tree, far
// fewer shuffles than transposing K (which the flash kernels amortize over
// many rows and decode cannot). Dot:
//   using Vec;                                  // __m512 or __m512i
//   static Vec q(const char* row, int v);       // vector v of a q row
//   static Vec k(const void* row, int v);       // vector v of a key row
//   static Vec dot(Vec acc, Vec k, Vec q);      // acc += k . q, lane-wise partial sums
//   static __m512 sums(Vec acc);                // the partial sums as f32
template <int NQ, int R, class Dot, class Prefetch>
static void score_keys16(const char* q, std::int64_t q_stride, const void* const* krow, float* s, std::int64_t s_stride, Prefetch& pf) {
  using Vec = typename Dot::Vec;
  Vec qv[R][NQ];
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < NQ; ++v) qv[i][v] = Dot::q(q + i * q_stride, v);
  __m512 part[4][R];
  for (int g = 0; g < 4; ++g) {
    pf.tick();
    Vec acc[R][4];
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < 4; ++j) acc[i][j] = Vec{};
    for (int j = 0; j < 4; ++j)
      for (int v = 0; v < NQ; ++v) {
        Vec k = Dot::k(krow[4 * g + j], v);
        if (R > 1) keep_in_register(k);
        for (int i = 0; i < R; ++i) acc[i][j] = Dot::dot(acc[i][j], k, qv[i][v]);
      }
    for (int i = 0; i < R; ++i)
      part[g][i] = sum4_lanes(Dot::sums(acc[i][0]), Dot::sums(acc[i][1]), Dot::sums(acc[i][2]), Dot::sums(acc[i][3]));
  }
  for (int i = 0; i < R; ++i) _mm512_store_ps(s + i * s_stride, sum16(part[0][i], part[1][i], part[2][i], part[3][i]));
}

// The scores of a block's first n keys (of N, 16 at a time) for every row:
// row r's at s + r N. Rows go R at a time (q, the sums and a key's vectors
// in registers), a prefetch tick every four keys.
template <int NQ, int R, class Dot, int N, class Prefetch>
static inline void score_block(const char* q, std::int64_t q_stride, std::int64_t rows, const KvRows<N>& block, std::int64_t n,
                               float* s, Prefetch& pf) {
  for (std::int64_t g = 0; g < N / kDecodeKeys && g * kDecodeKeys < n; ++g) {
    std::int64_t r = 0;
    for (; r + R <= rows; r += R)
      score_keys16<NQ, R, Dot>(q + r * q_stride, q_stride, block.k + g * kDecodeKeys, s + r * N + g * kDecodeKeys, N, pf);
    for (; r < rows; ++r) score_keys16<NQ, 1, Dot>(q + r * q_stride, q_stride, block.k + g * kDecodeKeys, s + r * N + g * kDecodeKeys, N, pf);
  }
}
// Its prefetch ticks for a full block.
template <int R, int N>
constexpr int score_block_ticks(std::int64_t rows) {
  return int(4 * (N / kDecodeKeys) * (rows / R + rows % R));
}

// One row's online-softmax step over a block of 16 V keys from tb: x holds
// its scaled logits (keys from `valid` on are not visible) and receives the
// probabilities exp(x - m), 0 where not visible. Updates the running max m
// and sum l; alpha is the factor for the row's earlier sums (1 when the row
// sees nothing finite yet).
template <int V>
static inline void softmax_step(const AttentionArgs& a, const RowView& view, std::int64_t tb, std::int64_t valid,
                                __m512* x, float& m, float& l, float& alpha) {
  alpha = 1.0f;
  __mmask16 visible[V];
  __m512 vmax = _mm512_set1_ps(kNegInf);
  for (int v = 0; v < V; ++v) {
    const std::int64_t left = std::clamp<std::int64_t>(valid - 16 * v, 0, 16);
    visible[v] = tail_mask(left);
    if (view.mask && left > 0)
      x[v] = _mm512_add_ps(x[v], load_mask16(a, advance(view.mask, a.mask_dtype, (tb + 16 * v) * a.mask_key_stride), left));
    x[v] = _mm512_mask_mov_ps(_mm512_set1_ps(kNegInf), visible[v], x[v]);
    vmax = _mm512_max_ps(vmax, x[v]);
  }
  const float m_new = valid > 0 ? std::max(m, _mm512_reduce_max_ps(vmax)) : kNegInf;
  if (m_new == kNegInf) {  // the row sees none of these keys, or nothing finite yet
    for (int v = 0; v < V; ++v) x[v] = _mm512_setzero_ps();
    return;
  }
  __m512 sum = _mm512_setzero_ps();
  for (int v = 0; v < V; ++v) {
    x[v] = _mm512_maskz_mov_ps(visible[v], exp16<ExpArg::nonpositive, ExpTiny::normal>(_mm512_sub_ps(x[v], _mm512_set1_ps(m_new))));
    sum = _mm512_add_ps(sum, x[v]);
  }
  alpha = m == kNegInf ? 0.0f : _mm512_cvtss_f32(exp16<ExpArg::nonpositive, ExpTiny::normal>(_mm512_set1_ps(m - m_new)));  // no libm call per row and block
  l = l * alpha + _mm512_reduce_add_ps(sum);
  m = m_new;
}

// The online softmax's update of 16 rows (lanes `live`) after a block:
// alpha = exp(m_old - m_new), 0 for a row's first visible keys (old max
// -inf) and 1 for a row still empty (both -inf); l = alpha l + row_sum.
static inline void rescale_rows16(const float* m_old, const float* m_new, const float* row_sum, float* alpha, float* l,
                                  __mmask16 live) {
  const __m512 mo = _mm512_maskz_loadu_ps(live, m_old), mn = _mm512_maskz_loadu_ps(live, m_new);
  __m512 al = exp16<ExpArg::nonpositive, ExpTiny::normal>(_mm512_sub_ps(mo, mn));
  al = _mm512_mask_mov_ps(al, _mm512_cmp_ps_mask(mo, _mm512_set1_ps(kNegInf), _CMP_EQ_OQ), _mm512_setzero_ps());
  al = _mm512_mask_mov_ps(al, _mm512_cmp_ps_mask(mn, _mm512_set1_ps(kNegInf), _CMP_EQ_OQ), _mm512_set1_ps(1.0f));
  _mm512_mask_storeu_ps(alpha, live, al);
  _mm512_mask_storeu_ps(l, live, _mm512_fmadd_ps(_mm512_maskz_loadu_ps(live, l), al, _mm512_maskz_loadu_ps(live, row_sum)));
}

// The unit's result from its row state: o sums [rows][dim] (row stride
// o_stride >= dim), running max m and sum l.
static inline void finish_rows(const AttentionArgs& a, const AttentionOutput& out, const float* o, std::int64_t o_stride,
                               const float* m, const float* l) {
  if (out.partial_o) return store_partial(a, out, o, o_stride, m, l);
  const std::int64_t rows = a.rows, dim = a.head_dim;
  // Output rows are a position apart (2 KiB and more), so the hardware
  // prefetcher does not see them: each row's stores waited on their lines'
  // reads. Asked for 4 rows ahead: cross-attention f32 (S_q 4096, S_kv 77)
  // 10-13 % faster. (The f32 flash kernel requests them earlier, in its last
  // block; the bf16 ones measured slower so.)
  const std::int64_t row_bytes = dim * bytes_of(out.o_dtype);
  UnitRow u(a, 0), ahead(a, 4);
  for (std::int64_t r = 0; r < rows; ++r, u.next(a), ahead.next(a)) {
    if (r + 4 < rows) prefetch_lines<_MM_HINT_T0>(out_row(a, out, ahead), row_bytes);
    const RowEnd end = row_end(m[r], l[r], out.sinks ? out.sinks + u.head : nullptr);
    const __m512 inv = _mm512_set1_ps(end.inv);
    char* orow = out_row(a, out, u);
    for_each16(dim, [&](std::int64_t d, __mmask16 mask) {
      store16(advance(orow, out.o_dtype, d), out.o_dtype,
              end.inv == 0.0f ? inv : _mm512_mul_ps(inv, _mm512_maskz_loadu_ps(mask, o + r * o_stride + d)), mask);
    });
    if (out.lse) out.lse[u.pos * out.lse_pos_stride + u.head * out.lse_head_stride] = end.lse;
  }
}

}  // namespace tessera::kernels::avx512
