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

// The online softmax's update of 8 rows after a block: alpha = exp(m_old -
// m_new), 0 for a row's first visible keys (old max -inf) and 1 for a row
// still empty (both -inf); l = alpha l + row_sum. alpha holds m_old on entry.
static inline void rescale_rows8(float* alpha, const float* m, const float* row_sum, float* l) {
  const __m256 mo = _mm256_loadu_ps(alpha), mn = _mm256_loadu_ps(m), neg_inf = _mm256_set1_ps(kNegInf);
  __m256 al = exp8<ExpArg::nonpositive, ExpTiny::normal>(_mm256_sub_ps(mo, mn));
  al = _mm256_blendv_ps(al, _mm256_setzero_ps(), _mm256_cmp_ps(mo, neg_inf, _CMP_EQ_OQ));
  al = _mm256_blendv_ps(al, _mm256_set1_ps(1.0f), _mm256_cmp_ps(mn, neg_inf, _CMP_EQ_OQ));
  _mm256_storeu_ps(alpha, al);
  _mm256_storeu_ps(l, _mm256_fmadd_ps(_mm256_loadu_ps(l), al, _mm256_loadu_ps(row_sum)));
}

// One row's softmax over the block's scores sr (keys from `valid` on are
// hidden, `mrow` the additive mask at the block's first key or nullptr):
// sr receives the probabilities exp(s - m_new), 0 where hidden; returns
// their sum and updates m. A row that sees nothing finite yet stays empty.
static inline float softmax_row(const AttentionArgs& a, float* sr, std::int64_t vectors, std::int64_t valid, const void* mrow,
                                float& m) {
  const auto clear = [&] {
    for (std::int64_t j = 0; j < vectors; ++j) _mm256_store_ps(sr + 8 * j, _mm256_setzero_ps());
    return 0.0f;
  };
  if (valid == 0) return clear();
  // Every lane of every vector visible and no mask: nothing to mask.
  const bool whole = valid == 8 * vectors && !mrow;
  __m256 vmax = _mm256_set1_ps(kNegInf);
  for (std::int64_t j = 0; j < vectors; ++j) {
    __m256 x = _mm256_load_ps(sr + 8 * j);
    if (!whole) {
      const std::int64_t left = valid - 8 * j;
      if (mrow && left > 0)
        x = _mm256_add_ps(x, load_mask8(a, advance(mrow, a.mask_dtype, 8 * j * a.mask_key_stride), std::min<std::int64_t>(left, 8)));
      x = _mm256_blendv_ps(_mm256_set1_ps(kNegInf), x, lanes_below(std::clamp<std::int64_t>(left, 0, 8)));
      _mm256_store_ps(sr + 8 * j, x);
    }
    vmax = _mm256_max_ps(vmax, x);
  }
  const float m_new = std::max(m, hmax(vmax));
  if (m_new == kNegInf) return clear();
  const __m256 mv = _mm256_set1_ps(m_new);
  __m256 sum = _mm256_setzero_ps();
  for (std::int64_t j = 0; j < vectors; ++j) {
    __m256 p = exp8<ExpArg::nonpositive, ExpTiny::normal>(_mm256_sub_ps(_mm256_load_ps(sr + 8 * j), mv));
    if (!whole) p = _mm256_and_ps(p, lanes_below(std::clamp<std::int64_t>(valid - 8 * j, 0, 8)));
    _mm256_store_ps(sr + 8 * j, p);
    sum = _mm256_add_ps(sum, p);
  }
  m = m_new;
  return hsum(sum);
}

// The unit's result from its row state: o sums [rows][dim], running max m and sum l.
static inline void finish_rows(const AttentionArgs& a, const AttentionOutput& out, const float* o, std::int64_t dim, const float* m,
                        const float* l) {
  if (out.partial_o) return store_partial(a, out, o, dim, m, l);
  const std::int64_t head_dim = a.head_dim;
  UnitRow u(a, 0);
  for (std::int64_t r = 0; r < a.rows; ++r, u.next(a)) {
    const bool empty = l[r] == 0.0f;  // a NaN sum stays NaN, as in the reference
    const __m256 inv = _mm256_set1_ps(empty ? 0.0f : 1.0f / l[r]);
    char* orow = out_row(a, out, u);
    for (std::int64_t d = 0; d < head_dim; d += 8)
      store8_n(advance(orow, out.o_dtype, d), out.o_dtype, _mm256_mul_ps(inv, _mm256_loadu_ps(o + r * dim + d)), head_dim - d);
    if (out.lse)
      out.lse[u.pos * out.lse_pos_stride + u.head * out.lse_head_stride] = empty ? kNegInf : m[r] + std::log(l[r]);
  }
}

}  // namespace tessera::kernels::avx2
