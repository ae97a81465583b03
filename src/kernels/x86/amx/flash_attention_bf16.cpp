// Flash attention with AMX-BF16 for bf16 q, k and v. The unit's rows go in
// groups of 32 (two 16-row tiles of q, zero-padded). Per block of 64 keys:
//   1. K is packed once into B tiles of Kᵀ (pairs of d per 32-bit element:
//      a 16 x 16 transpose of dwords per 16 keys x 32 d), V into B tiles of
//      key pairs (two rows interleaved by 16-bit element).
//   2. Per group: S = Q Kᵀ on tiles (2 x 2 f32 accumulators per 32 keys),
//      stored (the next group's go to the TMUL while this group's softmax
//      runs); the online softmax runs on AVX-512 and writes P as bf16 — the
//      A tiles of the next product; O = alpha O + P V, 32 columns of D at a
//      time over two 32-key steps, the tile result added to the f32 sums with
//      AVX-512. 64 keys per block halve the per-block work around the tiles
//      (storing results, the sums' update, the row reductions) per key.
// Scores and sums stay f32; only P is rounded to bf16, as q, k and v are.
#include "kernels/scratch.hpp"
#include "kernels/x86/amx/tiles.hpp"
#include "kernels/x86/avx512/attention_common.hpp"

namespace tessera::kernels::amx {

namespace {

using avx512::gather_rows;
using avx512::KvRows;
using avx512::kNegInf;

constexpr std::int64_t kKeys = 64;       // keys per block
constexpr std::int64_t kGroup = 32;      // rows per group: two tiles
constexpr std::int64_t kTileBytes = 1024;

// Kᵀ tiles of one block: [D / 32][4 quarters of 16 keys] tiles, row j = d
// pair j of the chunk, element (key, pair) = 32 bits. Keys past n are zero.
static void pack_k(const KvRows<kKeys>& rows, std::int64_t n, std::int64_t dim, std::uint16_t* out) {
  for (std::int64_t c = 0; c < dim / 32; ++c)
    for (std::int64_t h = 0; h < 4; ++h) {
      __m512 r[16];
      for (std::int64_t i = 0; i < 16; ++i) {
        const std::int64_t key = 16 * h + i;
        r[i] = key < n ? _mm512_loadu_ps(static_cast<const std::uint16_t*>(rows.k[key]) + 32 * c) : _mm512_setzero_ps();
      }
      avx512::transpose16x16(r);
      auto* tile = reinterpret_cast<char*>(out) + (4 * c + h) * kTileBytes;
      for (std::int64_t j = 0; j < 16; ++j) _mm512_store_ps(tile + 64 * j, r[j]);
    }
}

// V tiles of one block: [2 steps of 32 keys][D / 32][2 halves of 16 columns]
// tiles, row j = keys (2j, 2j + 1) of the step, element (column, key parity)
// = 16 bits. Keys past n are zero.
static void pack_v(const KvRows<kKeys>& rows, std::int64_t n, std::int64_t dim, std::uint16_t* out) {
  for (std::int64_t j = 0; j < kKeys / 2; ++j) {
    const auto* even = 2 * j < n ? static_cast<const std::uint16_t*>(rows.v[2 * j]) : nullptr;
    const auto* odd = 2 * j + 1 < n ? static_cast<const std::uint16_t*>(rows.v[2 * j + 1]) : nullptr;
    for (std::int64_t col = 0; col < dim; col += 16) {
      const __m512i e = even ? _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(even + col))) : _mm512_setzero_si512();
      const __m512i o = odd ? _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(odd + col))) : _mm512_setzero_si512();
      // Tile (step, chunk, half): step j / 16, (chunk, half) = col / 16.
      auto* tile = reinterpret_cast<char*>(out) + ((j / 16) * (dim / 16) + col / 16) * kTileBytes;
      _mm512_store_si512(tile + 64 * (j % 16), _mm512_or_si512(e, _mm512_slli_epi32(o, 16)));
    }
  }
}

}  // namespace

void flash_attention_bf16(const AttentionArgs& a, std::int64_t t0, std::int64_t t1, const AttentionOutput& out) {
  const std::int64_t dim = a.head_dim, rows = a.rows, group = a.group;
  const std::int64_t positions = (rows + group - 1) / group;
  const std::int64_t t_end = a.causal ? std::min(t1, positions - 1 + a.causal_offset + 1) : t1;
  const std::int64_t rows_pad = (std::max<std::int64_t>(rows, 1) + kGroup - 1) / kGroup * kGroup;

  // Row state: q (bf16, unscaled), o sums, m, l, alpha; per group the scores
  // (f32), P (bf16) and the P V tile result.
  const std::size_t state = std::size_t(rows_pad) * (dim * 2 + dim * 4 + 12 + 8) + kGroup * kKeys * (2 * 4 + 2) + 2 * kGroup * 32 * 4;
  char* base = static_cast<char*>(thread_scratch(ScratchSlot::a_panel, state));
  auto* q = reinterpret_cast<std::uint16_t*>(base);
  auto* o = reinterpret_cast<float*>(q + rows_pad * dim);
  float* m = o + rows_pad * dim;
  float* l = m + rows_pad;
  float* alpha = l + rows_pad;
  float* const s_buf[2] = {alpha + rows_pad, alpha + rows_pad + kGroup * kKeys};  // [32][64] f32 each
  float* const pv_buf[2] = {s_buf[1] + kGroup * kKeys, s_buf[1] + kGroup * kKeys + kGroup * 32};  // [32][32] f32 each
  auto* p = reinterpret_cast<std::uint16_t*>(pv_buf[1] + kGroup * 32);  // [32][64] bf16
  auto* limit = reinterpret_cast<std::int64_t*>(p + kGroup * kKeys);  // per row: keys t < limit are visible
  // K and V tiles of a block: (D / 32) x 4 tiles each.
  auto* packed = static_cast<char*>(thread_scratch(ScratchSlot::b_panel, std::size_t(dim / 32) * 8 * kTileBytes));
  char* kp = packed;
  char* vp = packed + (dim / 32) * 4 * kTileBytes;

  for (std::int64_t r = 0; r < rows_pad; ++r) {
    auto* qr = q + r * dim;
    if (r < rows) {
      const auto* src = static_cast<const std::uint16_t*>(a.q) + (r / group) * a.q_pos_stride + (r % group) * a.q_head_stride;
      std::copy(src, src + dim, qr);
    } else {
      std::fill(qr, qr + dim, std::uint16_t(0));
    }
    std::fill(o + r * dim, o + (r + 1) * dim, 0.0f);
    m[r] = kNegInf;
    l[r] = 0.0f;
    limit[r] = r >= rows ? 0 : a.causal ? std::min(t_end, r / group + a.causal_offset + 1) : t_end;
  }

  const KvSource& kv = a.kv;
  const std::int64_t row_bytes = dim * 2;
  const std::int64_t chunks = dim / 32;
  KvRows<kKeys> block;
  configure_tiles();
  for (std::int64_t tb = t0; tb < t_end; tb += kKeys) {
    const std::int64_t n = std::min(kKeys, t_end - tb);
    gather_rows(kv, tb, n, block);
    const std::int64_t next = std::min(kKeys, t_end - tb - kKeys);
    avx512::prefetch_rows(kv, kv.k, kv.k_token_stride, tb + kKeys, next, row_bytes);
    avx512::prefetch_rows(kv, kv.v, kv.v_token_stride, tb + kKeys, next, row_bytes);
    pack_k(block, n, dim, reinterpret_cast<std::uint16_t*>(kp));
    pack_v(block, n, dim, reinterpret_cast<std::uint16_t*>(vp));

    // The groups that see some of the block's keys: causal, a group whose
    // last row sees none of them is skipped, and those are the first ones
    // (rows go by position), so the rest start at g_first.
    std::int64_t g_first = 0;
    while (a.causal && g_first < rows_pad && (std::min(g_first + kGroup, rows) - 1) / group + a.causal_offset < tb) g_first += kGroup;
    const std::int64_t groups = (rows_pad - g_first) / kGroup;
    const auto active = [&](std::int64_t k) { return g_first + k * kGroup; };

    // S = Q Kᵀ for one group, as 2 x chunks tile steps (32 keys, 32 d each):
    // step st adds chunk st % chunks of half st / chunks and stores the half
    // after its last chunk.
    const std::int64_t q_stride = dim * 2, score_steps = 2 * chunks;
    const auto score_step = [&](std::int64_t g, std::int64_t st, float* sb) {
      const std::int64_t half = st / chunks, c = st % chunks;
      if (32 * half >= n) return;
      if (c == 0) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
      }
      _tile_loadd(4, q + g * dim + 32 * c, q_stride);
      _tile_loadd(5, q + (g + 16) * dim + 32 * c, q_stride);
      _tile_loadd(6, kp + (4 * c + 2 * half) * kTileBytes, 64);
      _tile_loadd(7, kp + (4 * c + 2 * half + 1) * kTileBytes, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
      if (c == chunks - 1) {
        float* sh = sb + 32 * half;
        _tile_stored(0, sh, kKeys * 4);
        _tile_stored(1, sh + 16, kKeys * 4);
        _tile_stored(2, sh + 16 * kKeys, kKeys * 4);
        _tile_stored(3, sh + 16 * kKeys + 16, kKeys * 4);
      }
    };

    // Online softmax of rows [i0, i1) of group g from its scores sb; P in
    // bf16. Per row: scaled (and masked) scores, the new max, P and the row
    // sum (alpha and l follow per 16 rows at once).
    const __m512 scale = _mm512_set1_ps(a.scale);
    alignas(64) float m_old[kGroup], row_sum[kGroup];
    const auto softmax_rows = [&](std::int64_t g, std::int64_t i0, std::int64_t i1, const float* sb) {
      for (std::int64_t i = i0; i < i1; ++i) {
        const std::int64_t r = g + i;
        auto* pr = p + i * kKeys;
        const float* sr = sb + i * kKeys;
        m_old[i] = m[r];
        row_sum[i] = 0.0f;
        const std::int64_t valid = std::clamp<std::int64_t>(limit[r] - tb, 0, n);
        __m512 x[4];
        if (valid == kKeys && !a.mask) {
          for (int v = 0; v < 4; ++v) x[v] = _mm512_mul_ps(scale, _mm512_load_ps(sr + 16 * v));
        } else {
          const std::int64_t pos = r / group;
          const void* mrow = a.mask ? avx512::advance(a.mask, a.mask_dtype, pos * a.mask_pos_stride + (r % group) * a.mask_head_stride + tb * a.mask_key_stride) : nullptr;
          for (int v = 0; v < 4; ++v) {
            const std::int64_t count = std::clamp<std::int64_t>(valid - 16 * v, 0, 16);
            x[v] = _mm512_set1_ps(kNegInf);
            if (count == 0) continue;
            x[v] = _mm512_mul_ps(scale, _mm512_load_ps(sr + 16 * v));
            if (mrow) x[v] = _mm512_add_ps(x[v], avx512::load_mask16(a, avx512::advance(mrow, a.mask_dtype, 16 * v * a.mask_key_stride), count));
            x[v] = _mm512_mask_mov_ps(_mm512_set1_ps(kNegInf), avx512::tail_mask(count), x[v]);
          }
        }
        const __m512 mx = _mm512_max_ps(_mm512_max_ps(x[0], x[1]), _mm512_max_ps(x[2], x[3]));
        const float m_new = valid == 0 ? kNegInf : std::max(m[r], _mm512_reduce_max_ps(mx));
        if (m_new == kNegInf) {  // nothing visible with a finite logit yet: alpha 1, P 0
          for (int v = 0; v < 4; v += 2) _mm512_storeu_si512(pr + 16 * v, _mm512_setzero_si512());
          continue;
        }
        const __m512 mv = _mm512_set1_ps(m_new);
        const bool all_visible = valid == kKeys && !a.mask;  // no -inf lanes to zero
        __m512 sum = _mm512_setzero_ps();
        for (int v = 0; v < 4; v += 2) {
          // Masked lanes are -inf: they are zeroed, for P and the sum. P
          // rounds to bf16 with vcvtne2ps2bf16 (p >= 0: flushing a subnormal
          // changes nothing).
          __m512 p0 = avx512::exp16_bf16<avx512::ExpArg::nonpositive, ExpTiny::normal>(_mm512_sub_ps(x[v], mv));
          __m512 p1 = avx512::exp16_bf16<avx512::ExpArg::nonpositive, ExpTiny::normal>(_mm512_sub_ps(x[v + 1], mv));
          if (!all_visible) {
            p0 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x[v], _mm512_set1_ps(kNegInf), _CMP_NEQ_UQ), p0);
            p1 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x[v + 1], _mm512_set1_ps(kNegInf), _CMP_NEQ_UQ), p1);
          }
          sum = _mm512_add_ps(sum, _mm512_add_ps(p0, p1));
          _mm512_storeu_si512(pr + 16 * v, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(p1, p0)));
        }
        row_sum[i] = _mm512_reduce_add_ps(sum);
        m[r] = m_new;
      }
    };

    // O = alpha O + (P V for 32 columns), from a chunk's stored tile result.
    const auto update_o = [&](std::int64_t g, std::int64_t c, const float* pvb) {
      for (std::int64_t i = 0; i < std::min(kGroup, rows - g); ++i) {
        float* orow = o + (g + i) * dim + 32 * c;
        const __m512 al = _mm512_set1_ps(alpha[g + i]);
        _mm512_storeu_ps(orow, _mm512_fmadd_ps(al, _mm512_loadu_ps(orow), _mm512_load_ps(pvb + i * 32)));
        _mm512_storeu_ps(orow + 16, _mm512_fmadd_ps(al, _mm512_loadu_ps(orow + 16), _mm512_load_ps(pvb + i * 32 + 16)));
      }
    };

    // Software-pipelined: the next group's score tiles go to the TMUL a step
    // at a time, each followed by a share of this group's softmax rows (the
    // tile instructions wait in the reorder buffer while the AVX-512 work
    // behind them executes). Measured interleaved: S = 1024, 1 and 2 threads,
    // 7-9 % faster; packing the next block's K and V during the last group's
    // P V tiles as well was slower.
    if (groups > 0)
      for (std::int64_t st = 0; st < score_steps; ++st) score_step(active(0), st, s_buf[0]);
    const std::int64_t share = (kGroup + score_steps - 1) / score_steps;  // softmax rows per score step
    for (std::int64_t k = 0; k < groups; ++k) {
      const std::int64_t g = active(k);
      for (std::int64_t st = 0; st < score_steps; ++st) {
        if (k + 1 < groups) score_step(active(k + 1), st, s_buf[(k + 1) & 1]);
        softmax_rows(g, std::min(kGroup, st * share), std::min(kGroup, (st + 1) * share), s_buf[k & 1]);
      }
      for (std::int64_t h = 0; h < kGroup; h += 16) {
        const __m512 mo = _mm512_load_ps(m_old + h), mn = _mm512_load_ps(m + g + h);
        __m512 al = avx512::exp16<avx512::ExpArg::nonpositive, ExpTiny::normal>(_mm512_sub_ps(mo, mn));
        al = _mm512_mask_mov_ps(al, _mm512_cmp_ps_mask(mo, _mm512_set1_ps(kNegInf), _CMP_EQ_OQ), _mm512_setzero_ps());
        al = _mm512_mask_mov_ps(al, _mm512_cmp_ps_mask(mn, _mm512_set1_ps(kNegInf), _CMP_EQ_OQ), _mm512_set1_ps(1.0f));
        _mm512_store_ps(alpha + g + h, al);
        _mm512_store_ps(l + g + h, _mm512_fmadd_ps(_mm512_load_ps(l + g + h), al, _mm512_load_ps(row_sum + h)));
      }

      // O = alpha O + P V, 32 columns at a time, 32 keys per tile step; each
      // chunk's O update runs while the next chunk's tiles execute.
      const std::int64_t steps = (n + 31) / 32;
      for (std::int64_t c = 0; c < chunks; ++c) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (std::int64_t step = 0; step < steps; ++step) {
          _tile_loadd(4, p + 32 * step, kKeys * 2);
          _tile_loadd(5, p + 16 * kKeys + 32 * step, kKeys * 2);
          _tile_loadd(6, vp + (step * 2 * chunks + 2 * c) * kTileBytes, 64);
          _tile_loadd(7, vp + (step * 2 * chunks + 2 * c + 1) * kTileBytes, 64);
          _tile_dpbf16ps(0, 4, 6);
          _tile_dpbf16ps(1, 4, 7);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
        float* pvb = pv_buf[c & 1];
        _tile_stored(0, pvb, 32 * 4);
        _tile_stored(1, pvb + 16, 32 * 4);
        _tile_stored(2, pvb + 16 * 32, 32 * 4);
        _tile_stored(3, pvb + 16 * 32 + 16, 32 * 4);
        if (c > 0) update_o(g, c - 1, pv_buf[(c - 1) & 1]);
      }
      update_o(g, chunks - 1, pv_buf[(chunks - 1) & 1]);
    }
  }
  _tile_release();
  avx512::finish_rows(a, out, o, a.head_dim, m, l);
}

}  // namespace tessera::kernels::amx
