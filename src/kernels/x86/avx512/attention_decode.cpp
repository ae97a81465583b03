// Decode attention on AVX-512: a few query rows (positions × the query heads
// of one kv head, at most 16) against a long run of keys, where the kernel
// must keep up with memory. Per block of 16 keys and for each row:
//   - q stays in registers; each score is a dot product with the key row
//     (two FMA chains per key, four keys at a time), and the 16 partial
//     vectors are summed into one vector of 16 scores by a shuffle tree —
//     far fewer shuffles than transposing K, which the flash kernel
//     amortizes over many rows and this one cannot;
//   - online softmax on that vector, then O_row = alpha · O_row + Σ p_t V_t
//     with O_row in registers.
// The block's K and V rows are read from memory once (by the first row) and
// from L1 after; bf16 / int8 rows are converted to f32 once per block. The
// next block is prefetched while this one is computed.
#include "kernels/scratch.hpp"
#include "kernels/x86/avx512/attention_common.hpp"

namespace tessera::kernels::avx512 {

namespace {

constexpr std::int64_t kKeys = 16;  // keys per block

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

// The visible key range and mask row of each query row, fixed for the unit.
struct RowView {
  std::int64_t limit;  // keys t < limit are visible (causal)
  const void* mask;    // at key 0, or nullptr
};

// Rows r0 .. r0 + R - 1 against one block of n <= 16 keys from tb: q · k for
// four keys at a time (one FMA chain per row and key, the key vector loaded
// once for the R rows), the 16 scores of a row summed into one vector, the
// online softmax, then o = alpha o + p V with o in registers. R = 2 halves the
// loads per FMA and doubles the independent chains.
template <int NV, int R>
static void attend_rows(const AttentionArgs& a, const RowView* view, const float* q, float* o, float* m, float* l,
                        const float* const* krow, const float* const* vrow, std::int64_t tb, std::int64_t n) {
  constexpr std::int64_t dim = 16 * NV;
  std::int64_t valid[R];
  bool any = false;
  for (int i = 0; i < R; ++i) any |= (valid[i] = std::clamp<std::int64_t>(view[i].limit - tb, 0, n)) > 0;
  if (!any) return;
  __m512 qv[R][NV];
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < NV; ++v) qv[i][v] = _mm512_loadu_ps(q + i * dim + 16 * v);
  __m512 part[4][R];
  for (int g = 0; g < 4; ++g) {
    __m512 acc[R][4];
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < 4; ++j) acc[i][j] = _mm512_setzero_ps();
    for (int v = 0; v < NV; ++v)
      for (int j = 0; j < 4; ++j) {
        __m512 k = _mm512_loadu_ps(krow[4 * g + j] + 16 * v);
        if (R > 1) keep_in_register(k);
        for (int i = 0; i < R; ++i) acc[i][j] = _mm512_fmadd_ps(qv[i][v], k, acc[i][j]);
      }
    for (int i = 0; i < R; ++i) part[g][i] = sum4_lanes(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
  }
  alignas(64) float pt[R][kKeys];
  float alpha[R];
  for (int i = 0; i < R; ++i) {
    alpha[i] = 1.0f;
    _mm512_store_ps(pt[i], _mm512_setzero_ps());
    if (valid[i] == 0) continue;  // the row sees none of these keys
    __m512 s = sum16(part[0][i], part[1][i], part[2][i], part[3][i]);
    if (view[i].mask) s = _mm512_add_ps(s, load_mask16(a, advance(view[i].mask, a.mask_dtype, tb * a.mask_key_stride), valid[i]));
    const __mmask16 visible = tail_mask(valid[i]);
    s = _mm512_mask_mov_ps(_mm512_set1_ps(kNegInf), visible, s);
    const float m_new = std::max(m[i], _mm512_reduce_max_ps(s));
    if (m_new == kNegInf) continue;  // nothing visible with a finite logit yet
    const __m512 p = _mm512_maskz_mov_ps(visible, exp16(_mm512_sub_ps(s, _mm512_set1_ps(m_new))));
    alpha[i] = m[i] == kNegInf ? 0.0f : std::exp(m[i] - m_new);
    l[i] = l[i] * alpha[i] + _mm512_reduce_add_ps(p);
    m[i] = m_new;
    _mm512_store_ps(pt[i], p);
  }
  __m512 acc[R][NV];
  for (int i = 0; i < R; ++i) {
    const __m512 av = _mm512_set1_ps(alpha[i]);
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_mul_ps(av, _mm512_loadu_ps(o + i * dim + 16 * v));
  }
  // Keys past a row's valid count have p = 0 and point at real or zero rows.
  const std::int64_t keys = R == 1 ? valid[0] : std::max(valid[0], valid[R - 1]);
  for (std::int64_t t = 0; t < keys; ++t) {
    __m512 b[R];
    for (int i = 0; i < R; ++i) b[i] = _mm512_set1_ps(pt[i][t]);
    for (int v = 0; v < NV; ++v) {
      __m512 x = _mm512_loadu_ps(vrow[t] + 16 * v);
      if (R > 1) keep_in_register(x);
      for (int i = 0; i < R; ++i) acc[i][v] = _mm512_fmadd_ps(b[i], x, acc[i][v]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(o + i * dim + 16 * v, acc[i][v]);
}

// Pairs of rows while q for two fits in registers (D <= 128), then single rows.
template <int NV>
static void attend_block(const AttentionArgs& a, const RowView* view, const float* q, float* o, float* m, float* l,
                         const float* const* krow, const float* const* vrow, std::int64_t tb, std::int64_t n) {
  constexpr std::int64_t dim = 16 * NV;
  std::int64_t r = 0;
  if constexpr (NV <= 8)
    for (; r + 2 <= a.rows; r += 2)
      attend_rows<NV, 2>(a, view + r, q + r * dim, o + r * dim, m + r, l + r, krow, vrow, tb, n);
  for (; r < a.rows; ++r) attend_rows<NV, 1>(a, view + r, q + r * dim, o + r * dim, m + r, l + r, krow, vrow, tb, n);
}

template <int NV>
static void decode(const AttentionArgs& a, std::int64_t t0, std::int64_t t1, const AttentionOutput& out) {
  constexpr std::int64_t dim = 16 * NV;
  const std::int64_t rows = a.rows, positions = (rows + a.group - 1) / a.group;
  const std::int64_t t_end = a.causal ? std::min(t1, positions - 1 + a.causal_offset + 1) : t1;

  // Row state, then f32 copies of a block's K and V rows and one zero row.
  float* q = static_cast<float*>(thread_scratch(ScratchSlot::a_panel, sizeof(float) * (rows * (2 * dim + 2) + (2 * kKeys + 1) * dim)));
  float* o = q + rows * dim;
  float* m = o + rows * dim;
  float* l = m + rows;
  float* kb = l + rows;
  float* vb = kb + kKeys * dim;
  float* zero = vb + kKeys * dim;
  std::fill(zero, zero + dim, 0.0f);
  const __m512 scale = _mm512_set1_ps(a.scale);
  RowView view[16];
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t pos = r / a.group;
    view[r].limit = a.causal ? std::min(t_end, pos + a.causal_offset + 1) : t_end;
    view[r].mask = a.mask ? advance(a.mask, a.mask_dtype, pos * a.mask_pos_stride + (r % a.group) * a.mask_head_stride) : nullptr;
    const void* qr = advance(a.q, a.q_dtype, (r / a.group) * a.q_pos_stride + (r % a.group) * a.q_head_stride);
    for (std::int64_t d = 0; d < dim; d += 16) {
      _mm512_storeu_ps(q + r * dim + d, _mm512_mul_ps(scale, load16(advance(qr, a.q_dtype, d), a.q_dtype, 0xffff)));
      _mm512_storeu_ps(o + r * dim + d, _mm512_setzero_ps());
    }
    m[r] = kNegInf;
    l[r] = 0.0f;
  }

  const KvSource& kv = a.kv;
  const std::int64_t row_bytes = dim * bytes_of(kv.dtype);
  KvRows<kKeys> block;
  const float* krow[kKeys];
  const float* vrow[kKeys];
  for (std::int64_t tb = t0; tb < t_end; tb += kKeys) {
    const std::int64_t n = std::min(kKeys, t_end - tb);
    gather_rows(kv, tb, n, block);
    // Two blocks ahead: the block after next is in flight while this one computes.
    const std::int64_t ahead = 2 * kKeys, next = std::min(kKeys, t_end - tb - ahead);
    prefetch_rows(kv, kv.k, kv.k_token_stride, tb + ahead, next, row_bytes);
    prefetch_rows(kv, kv.v, kv.v_token_stride, tb + ahead, next, row_bytes);
    for (std::int64_t i = 0; i < kKeys; ++i) {
      if (i >= n) {
        krow[i] = vrow[i] = zero;
      } else if (kv.dtype == DType::f32) {
        krow[i] = static_cast<const float*>(block.k[i]);
        vrow[i] = static_cast<const float*>(block.v[i]);
      } else {
        const float ks = kv.dtype == DType::i8 ? block.k_scale[i] : 1.0f, vs = kv.dtype == DType::i8 ? block.v_scale[i] : 1.0f;
        for (int v = 0; v < NV; ++v) {
          _mm512_storeu_ps(kb + i * dim + 16 * v, load_kv16(block.k[i], kv.dtype, 16 * v, ks));
          _mm512_storeu_ps(vb + i * dim + 16 * v, load_kv16(block.v[i], kv.dtype, 16 * v, vs));
        }
        krow[i] = kb + i * dim;
        vrow[i] = vb + i * dim;
      }
    }
    attend_block<NV>(a, view, q, o, m, l, krow, vrow, tb, n);
  }
  finish_rows(a, out, o, m, l);
}

}  // namespace

void attention_decode(const AttentionArgs& a, std::int64_t t0, std::int64_t t1, const AttentionOutput& out) {
  switch (a.head_dim / 16) {
    case 1: return decode<1>(a, t0, t1, out);
    case 2: return decode<2>(a, t0, t1, out);
    case 3: return decode<3>(a, t0, t1, out);
    case 4: return decode<4>(a, t0, t1, out);
    case 5: return decode<5>(a, t0, t1, out);
    case 6: return decode<6>(a, t0, t1, out);
    case 7: return decode<7>(a, t0, t1, out);
    case 8: return decode<8>(a, t0, t1, out);
    case 9: return decode<9>(a, t0, t1, out);
    case 10: return decode<10>(a, t0, t1, out);
    case 11: return decode<11>(a, t0, t1, out);
    case 12: return decode<12>(a, t0, t1, out);
    case 13: return decode<13>(a, t0, t1, out);
    case 14: return decode<14>(a, t0, t1, out);
    case 15: return decode<15>(a, t0, t1, out);
    default: return decode<16>(a, t0, t1, out);
  }
}

}  // namespace tessera::kernels::avx512
