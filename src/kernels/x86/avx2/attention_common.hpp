#pragma once
// Pieces shared by the AVX2 attention kernels (flash: flash_attention.cpp,
// decode: attention_decode.cpp): the additive mask, one row's online-softmax
// step over a block's scores, and writing a unit's final rows or its
// split-KV piece (addressing and prefetching K and V rows:
// x86/attention_rows.hpp). Static, like vec.hpp.
#include <algorithm>
#include <cmath>

#include "kernels/x86/attention_rows.hpp"
#include "kernels/x86/avx2/math.hpp"
#include "kernels/x86/load1.hpp"
#include "kernels/x86/prefetch.hpp"

namespace tessera::kernels::avx2 {

// The additive mask of one row for `count` <= 8 keys from `row` (zeros past count).
static inline __m256 load_mask8(const AttentionArgs& a, const void* row, std::int64_t count) {
  if (a.mask_key_stride == 1) return load8_n(row, a.mask_dtype, count);
  alignas(32) float v[8] = {};
  for (std::int64_t i = 0; i < count; ++i) v[i] = load1(row, a.mask_dtype, i * a.mask_key_stride);
  return _mm256_load_ps(v);
}

// What q is scaled by: the attention's scale times log2 e, so that the
// scores come out in the log2 units softmax_rows8 takes.
static inline __m256 q_scale(const AttentionArgs& a) { return _mm256_set1_ps(a.scale * kLog2e); }

// The online softmax's step after a block for up to 8 rows (count) of
// scores s, `width` apart, `vectors` of them in the block. The scores are in
// log2 units (q carries log2 e, q_scale; the additive mask is scaled here),
// so that p = 2^(s - m) skips exp's reduction by ln 2; soft-capping (a.softcap)
// keeps them so: log2 e c tanh(s / c) of a logit s is C tanh(s2 / C) of s2 = s
// log2 e, C = c log2 e. valid[i]: the keys of
// the block row i sees (past them hidden); masks[i]: its additive mask at
// the block's first key, or nullptr. On return s holds p, 0 where hidden
// (a row that sees nothing finite yet stays empty); m the new maxima; alpha
// = 2^(m_old - m_new), 0 for a row's first visible keys and 1 for a row
// still empty; l = alpha l + the block's sums. m, l and alpha: 8 each.
// The 8 rows' maxima and sums come out of 8 x 8 transposes in one vector:
// one row at a time, with a horizontal reduction each and a masking blend on
// every vector of a block with a partial last one, the softmax took a fifth
// of cross-attention's time (AMD EPYC Zen 3, rows of 77 keys: 48 -> 38 ns a
// row in a driver, before the log2 units).
static inline void softmax_rows8(const AttentionArgs& a, float* s, std::int64_t width, std::int64_t vectors, std::int64_t count,
                                 const std::int64_t* valid, const void* const* masks, float* m, float* l, float* alpha) {
  const __m256 neg_inf = _mm256_set1_ps(kNegInf), log2e = _mm256_set1_ps(kLog2e);
  __m256 mx[8];
  for (std::int64_t i = 0; i < 8; ++i) {
    __m256 m0 = neg_inf, m1 = neg_inf;
    if (i < count) {
      float* sr = s + i * width;
      const std::int64_t n = valid[i], whole = n / 8, tail = n % 8;
      if (a.softcap > 0.0f) {  // the last vector's lanes past n too: masked below
        const __m256 cap = _mm256_set1_ps(a.softcap * kLog2e), inv_cap = _mm256_set1_ps(1.0f / (a.softcap * kLog2e));
        for (std::int64_t j = 0; 8 * j < n; ++j)
          _mm256_store_ps(sr + 8 * j, _mm256_mul_ps(cap, tanh8(_mm256_mul_ps(inv_cap, _mm256_load_ps(sr + 8 * j)))));
      }
      if (masks[i]) {  // s + mask log2 e into s
        for (std::int64_t j = 0; 8 * j < n; ++j) {
          const std::int64_t keys = std::min<std::int64_t>(8, n - 8 * j);
          const __m256 mask = load_mask8(a, advance(masks[i], a.mask_dtype, 8 * j * a.mask_key_stride), keys);
          _mm256_store_ps(sr + 8 * j, _mm256_fmadd_ps(mask, log2e, _mm256_load_ps(sr + 8 * j)));
        }
      }
      std::int64_t j = 0;
      for (; j + 2 <= whole; j += 2) {
        m0 = _mm256_max_ps(m0, _mm256_load_ps(sr + 8 * j));
        m1 = _mm256_max_ps(m1, _mm256_load_ps(sr + 8 * j + 8));
      }
      if (j < whole) m0 = _mm256_max_ps(m0, _mm256_load_ps(sr + 8 * j));
      if (tail) m1 = _mm256_max_ps(m1, _mm256_blendv_ps(neg_inf, _mm256_load_ps(sr + 8 * whole), lanes_below(tail)));
    }
    mx[i] = _mm256_max_ps(m0, m1);
  }
  transpose8x8(mx);
  const __m256 block_max = _mm256_max_ps(_mm256_max_ps(_mm256_max_ps(mx[0], mx[1]), _mm256_max_ps(mx[2], mx[3])),
                                         _mm256_max_ps(_mm256_max_ps(mx[4], mx[5]), _mm256_max_ps(mx[6], mx[7])));
  const __m256 m_old = _mm256_loadu_ps(m);
  const __m256 m_new = _mm256_max_ps(block_max, m_old);  // a NaN maximum keeps the old one (NaN p make l NaN)
  alignas(32) float row_max[8];
  _mm256_store_ps(row_max, m_new);

  __m256 sums[8];
  for (std::int64_t i = 0; i < 8; ++i) {
    __m256 sum = _mm256_setzero_ps();
    if (i < count) {
      float* sr = s + i * width;
      const std::int64_t n = row_max[i] == kNegInf ? 0 : valid[i], whole = n / 8, tail = n % 8;
      const __m256 mv = _mm256_set1_ps(row_max[i]);
      const auto p8 = [&](std::int64_t j) __attribute__((always_inline)) {
        return exp2_8<DType::f32, ExpArg::nonpositive, ExpTiny::normal>(_mm256_sub_ps(_mm256_load_ps(sr + 8 * j), mv));
      };
      std::int64_t j = 0;
      for (; j < whole; ++j) {
        const __m256 p = p8(j);
        _mm256_store_ps(sr + 8 * j, p);
        sum = _mm256_add_ps(sum, p);
      }
      if (tail) {
        const __m256 p = _mm256_and_ps(p8(j), lanes_below(tail));
        _mm256_store_ps(sr + 8 * j++, p);
        sum = _mm256_add_ps(sum, p);
      }
      for (; j < vectors; ++j) _mm256_store_ps(sr + 8 * j, _mm256_setzero_ps());
    }
    sums[i] = sum;
  }
  transpose8x8(sums);
  const __m256 block_sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(sums[0], sums[1]), _mm256_add_ps(sums[2], sums[3])),
                                         _mm256_add_ps(_mm256_add_ps(sums[4], sums[5]), _mm256_add_ps(sums[6], sums[7])));
  __m256 al = exp2_8<DType::f32, ExpArg::nonpositive, ExpTiny::normal>(_mm256_sub_ps(m_old, m_new));
  al = _mm256_blendv_ps(al, _mm256_setzero_ps(), _mm256_cmp_ps(m_old, neg_inf, _CMP_EQ_OQ));
  al = _mm256_blendv_ps(al, _mm256_set1_ps(1.0f), _mm256_cmp_ps(m_new, neg_inf, _CMP_EQ_OQ));
  _mm256_storeu_ps(alpha, al);
  _mm256_storeu_ps(m, m_new);
  _mm256_storeu_ps(l, _mm256_fmadd_ps(_mm256_loadu_ps(l), al, block_sum));
}

// The unit's result from its row state: o sums [rows][dim], running max m
// (in log2 units, see softmax_rows8; converted in place) and sum l.
static inline void finish_rows(const AttentionArgs& a, const AttentionOutput& out, const float* o, std::int64_t dim, float* m,
                               const float* l) {
  for (std::int64_t r = 0; r < a.rows; ++r) m[r] *= kLn2;
  if (out.partial_o) return store_partial(a, out, o, dim, m, l);
  const std::int64_t head_dim = a.head_dim;
  UnitRow u(a, 0);
  dispatch_float(out.o_dtype, [&](auto ot) {
    for (std::int64_t r = 0; r < a.rows; ++r, u.next(a)) {
      const RowEnd end = row_end(m[r], l[r], out.sinks ? out.sinks + u.head : nullptr);
      const __m256 inv = _mm256_set1_ps(end.inv);
      char* orow = out_row(a, out, u);
      for (std::int64_t d = 0; d < head_dim; d += 8)
        store8_n(advance(orow, ot, d), ot, end.inv == 0.0f ? inv : _mm256_mul_ps(inv, _mm256_loadu_ps(o + r * dim + d)), head_dim - d);
      if (out.lse) out.lse[u.pos * out.lse_pos_stride + u.head * out.lse_head_stride] = end.lse;
    }
  });
}

}  // namespace tessera::kernels::avx2
