// Flash attention on AVX-512 (f32 compute), one unit of query rows against
// a range of keys. Per block of up to 128 keys (whole 32-key chunks):
//   1. K is converted to f32 and transposed in registers into kt[D][keys],
//      so the score tile S = Q · Kᵀ is a small GEMM: broadcast q, FMA rows of kt.
//   2. Online softmax per row: new max, rescale factor alpha, p = exp(s - max).
//   3. O = alpha · O + P · V, with O row chunks held in registers across the
//      block's keys. f32 V is read in place; bf16 / int8 V is converted first.
// The next block's K and V rows are prefetched, a share per row of the
// softmax: in [B, S, H, D] layouts the rows of one head are a page apart,
// where the hardware prefetcher stops.
// Any head dim: q, kt, V and O are held padded with zeros to a multiple of
// 16 features (SD 1.x's 40-wide heads), the tails read and written masked.
#include <cstdint>

#include "kernels/scratch.hpp"
#include "kernels/x86/avx512/attention_common.hpp"

namespace tessera::kernels::avx512 {

namespace {

constexpr std::int64_t kKeys = 32;  // keys per chunk of scores
// Keys per block: whole 32-key chunks, up to this many (cross-attention to
// 77 text tokens: one block of 96, one exact softmax per row). Each block
// costs every row an online update (a max and a sum across the vector, a
// rescale of O) and transposes K once for all rows; 128 keys rather than 32
// (AMD EPYC, 1 thread, alternating: [1, 4096, 8, 40] 273-291 -> 247 ms;
// causal prefill S 1024 / 4096, 32 heads of 128: 98-105 -> 92-96 ms,
// 1535 -> 1391-1440 ms), though K's transposed block (64 KiB at D 128)
// no longer fits L1.
constexpr std::int64_t kBlockKeys = 128;

// S[RR rows][16 H] = Q[RR][D] · kt[D][16 H], q in a sliver of kScoreRows
// rows stored d-major ([D][kScoreRows]): the broadcasts read one sequential
// stream. kt and S rows are `width` floats apart (the block's width); H
// halves of a 32-key chunk: a last chunk of 16 keys or fewer (cross-attention
// to 77 tokens: 13) computes one.
constexpr std::int64_t kScoreRows = 8;

template <int RR, int H>
static void score_tile(const float* q, std::int64_t features, const float* kt, float* s, std::int64_t width) {
  __m512 acc[RR][H];
  for (int i = 0; i < RR; ++i)
    for (int h = 0; h < H; ++h) acc[i][h] = _mm512_setzero_ps();
  for (std::int64_t d = 0; d < features; ++d) {
    // Loaded into a local and pinned there: pinned as an array element, each
    // vector was also stored to the stack on every step.
    __m512 k[H];
    for (int h = 0; h < H; ++h) {
      __m512 v = _mm512_load_ps(kt + d * width + 16 * h);
      keep_in_register(v);
      k[h] = v;
    }
    for (int i = 0; i < RR; ++i) {
      const __m512 b = _mm512_set1_ps(q[d * kScoreRows + i]);
      for (int h = 0; h < H; ++h) acc[i][h] = _mm512_fmadd_ps(b, k[h], acc[i][h]);
    }
  }
  for (int i = 0; i < RR; ++i)
    for (int h = 0; h < H; ++h) _mm512_store_ps(s + i * width + 16 * h, acc[i][h]);
}

// The scores of chunk c (32 keys, or the block's last n - c <= 32) for
// every sliver of rows, by as many of its two 16-key halves as the sliver's
// last row sees (`visible`: keys of the block a row sees; rows go by
// position, the last one sees the most): under a causal mask the block on
// the diagonal is half hidden, and its hidden halves are skipped, not
// computed and then masked. Over the head's features only: q's padding
// features are zeros (SD's 40-wide heads: 40 steps, not 48).
static void score_rows(const float* q, std::int64_t rows, std::int64_t dim, std::int64_t head_dim, const float* kt, float* s,
                       std::int64_t width, std::int64_t c, std::int64_t n, const std::int64_t* visible) {
  for_visible_slivers<kScoreRows>(rows, c, n, visible, [&](std::int64_t r, std::int64_t rr, std::int64_t keys) {
    dispatch_count<kScoreRows>(rr, [&](auto tile) {
      if (keys <= 16) score_tile<tile(), 1>(q + r * dim, head_dim, kt + c, s + r * width + c, width);
      else score_tile<tile(), 2>(q + r * dim, head_dim, kt + c, s + r * width + c, width);
    });
  });
}

// O[RR][c : c + w] = alpha · O + P[RR][0 : n] · V[0 : n][c : c + w] (no
// alpha: O = P V, O not read), w = 16 NV (+ 8 with Half: a head dim of 16 j
// + 8 takes its last 8 features in a 256-bit vector, at the cost of 8 lanes,
// not 16: SD's 40-wide heads).
// RR (NV + Half + 1) + 1 <= 32 registers: accumulators, broadcasts, one V vector.
template <int NV, bool Half = false>
constexpr int pv_rows() { return std::min(8, 31 / (NV + Half + 1)); }

template <int RR, int NV, bool Half>
static void pv_tile(const float* p, std::int64_t width, const float* alpha, float* o, std::int64_t dim,
                    const float* const* vrow, std::int64_t n, std::int64_t c) {
  __m512 acc[RR][std::max(NV, 1)];  // NV = 0: a head of 8 features, the tail alone
  [[maybe_unused]] __m256 tail[RR];
#pragma GCC unroll 8
  for (int i = 0; i < RR; ++i) {
    if (!alpha) {  // the first block: O starts here
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
      if constexpr (Half) tail[i] = _mm256_setzero_ps();
      continue;
    }
    const __m512 a = _mm512_set1_ps(alpha[i]);
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_mul_ps(a, _mm512_loadu_ps(o + i * dim + c + 16 * v));
    if constexpr (Half) tail[i] = _mm256_mul_ps(_mm512_castps512_ps256(a), _mm256_loadu_ps(o + i * dim + c + 16 * NV));
  }
  for (std::int64_t t = 0; t < n; ++t) {
    __m512 b[RR];
#pragma GCC unroll 8
    for (int i = 0; i < RR; ++i) b[i] = _mm512_set1_ps(p[i * width + t]);
    const float* vr = vrow[t] + c;
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      __m512 x = _mm512_loadu_ps(vr + 16 * v);
      keep_in_register(x);
#pragma GCC unroll 8
      for (int i = 0; i < RR; ++i) acc[i][v] = _mm512_fmadd_ps(b[i], x, acc[i][v]);
    }
    if constexpr (Half) {
      const __m256 x = _mm256_loadu_ps(vr + 16 * NV);
#pragma GCC unroll 8
      for (int i = 0; i < RR; ++i) tail[i] = _mm256_fmadd_ps(_mm512_castps512_ps256(b[i]), x, tail[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < RR; ++i) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(o + i * dim + c + 16 * v, acc[i][v]);
    if constexpr (Half) _mm256_storeu_ps(o + i * dim + c + 16 * NV, tail[i]);
  }
}

// The rows [0, rows) in tiles of RR, the last one of fewer rows; each tile
// over the keys its last row sees (P is 0 past a row's own).
template <int RR, int NV, bool Half = false>
static void pv_chunk(const float* p, std::int64_t width, const float* alpha, float* o, std::int64_t rows,
                     std::int64_t dim, const float* const* vrow, const std::int64_t* visible, std::int64_t c) {
  for_row_tiles<RR>(rows, visible, [&](auto tile, std::int64_t r, std::int64_t keys) {
    pv_tile<tile(), NV, Half>(p + r * width, width, alpha ? alpha + r : nullptr, o + r * dim, dim, vrow, keys, c);
  });
}

// Head dims of 16 j + 8 up to 56 (j <= 3) end in a half vector; others are
// padded to whole vectors (at most 8 lanes in 72 wasted).
static bool half_tail(std::int64_t head_dim) { return head_dim % 16 == 8 && head_dim < 64; }

static void pv_rows_all(const float* p, std::int64_t width, const float* alpha, float* o, std::int64_t rows,
                        std::int64_t dim, std::int64_t head_dim, const float* const* vrow, const std::int64_t* visible) {
  if (half_tail(head_dim)) {
    switch (head_dim / 16) {
      case 0: return pv_chunk<pv_rows<0, true>(), 0, true>(p, width, alpha, o, rows, dim, vrow, visible, 0);
      case 1: return pv_chunk<pv_rows<1, true>(), 1, true>(p, width, alpha, o, rows, dim, vrow, visible, 0);
      case 2: return pv_chunk<pv_rows<2, true>(), 2, true>(p, width, alpha, o, rows, dim, vrow, visible, 0);
      default: return pv_chunk<pv_rows<3, true>(), 3, true>(p, width, alpha, o, rows, dim, vrow, visible, 0);
    }
  }
  for (std::int64_t c = 0; c < dim; c += 128) {
    switch (std::min<std::int64_t>(8, (dim - c) / 16)) {
      case 1: pv_chunk<pv_rows<1>(), 1>(p, width, alpha, o, rows, dim, vrow, visible, c); break;
      case 2: pv_chunk<pv_rows<2>(), 2>(p, width, alpha, o, rows, dim, vrow, visible, c); break;
      case 3: pv_chunk<pv_rows<3>(), 3>(p, width, alpha, o, rows, dim, vrow, visible, c); break;
      case 4: pv_chunk<pv_rows<4>(), 4>(p, width, alpha, o, rows, dim, vrow, visible, c); break;
      case 5: pv_chunk<pv_rows<5>(), 5>(p, width, alpha, o, rows, dim, vrow, visible, c); break;
      case 6: pv_chunk<pv_rows<6>(), 6>(p, width, alpha, o, rows, dim, vrow, visible, c); break;
      case 7: pv_chunk<pv_rows<7>(), 7>(p, width, alpha, o, rows, dim, vrow, visible, c); break;
      default: pv_chunk<pv_rows<8>(), 8>(p, width, alpha, o, rows, dim, vrow, visible, c); break;
    }
  }
}

}  // namespace

void flash_attention(const AttentionArgs& a, std::int64_t t0, std::int64_t t1, const AttentionOutput& out) {
  const std::int64_t head_dim = a.head_dim, dim = (head_dim + 15) / 16 * 16, rows = a.rows;
  const std::int64_t t_end = visible_keys_end(a, t1);
  const std::int64_t width = std::clamp<std::int64_t>((t_end - t0 + kKeys - 1) / kKeys * kKeys, kKeys, kBlockKeys);

  // Row state: q (pre-scaled), o sums, scores / probabilities, m, l, alpha,
  // the block's row sums, each row's key limit (keys t < limit are visible)
  // and its visible keys of the block.
  float* q = static_cast<float*>(thread_scratch(ScratchSlot::a_panel, sizeof(float) * (rows + 16) * (2 * dim + width + 8)));
  float* o = q + (rows + 16) * dim;  // q: whole pairs of slivers
  float* s = o + rows * dim;
  float* m = s + rows * width;
  float* l = m + rows;
  float* alpha = l + rows;
  float* row_sum = alpha + rows;
  auto* limit = reinterpret_cast<std::int64_t*>((reinterpret_cast<std::uintptr_t>(row_sum + rows) + 7) & ~std::uintptr_t(7));
  std::int64_t* visible = limit + rows;
  UnitRow u(a, 0);
  for (std::int64_t r = 0; r < rows; ++r, u.next(a)) limit[r] = a.causal ? std::min(t_end, u.pos + a.causal_offset + 1) : t_end;
  float* kt = static_cast<float*>(thread_scratch(ScratchSlot::b_panel, sizeof(float) * dim * width * 2));
  float* vb = kt + dim * width;

  const __m512 scale = _mm512_set1_ps(a.scale);
  // q, scaled, into slivers: 16 rows x 16 features transposed in registers,
  // the two halves of each transposed vector going to two 8-row slivers.
  static_assert(kScoreRows == 8);
  prefetch_q_rows(a);
  // Each row is addressed once: with its address (two divisions) per 16
  // features, q took ~11 % of cross-attention's 77 keys (perf, f32).
  u = UnitRow(a, 0);
  for (std::int64_t r0 = 0; r0 < rows; r0 += 16) {
    const std::int64_t rr = std::min<std::int64_t>(16, rows - r0);
    const void* src[16];
    for (std::int64_t i = 0; i < rr; ++i, u.next(a)) src[i] = q_row(a, u, a.q);
    for_each16(head_dim, [&](std::int64_t d, __mmask16 features) {  // whole vectors unmasked (vec.hpp)
      __m512 x[16];
      for (std::int64_t i = 0; i < 16; ++i)
        x[i] = i < rr ? _mm512_mul_ps(scale, load16(advance(src[i], a.q_dtype, d), a.q_dtype, features)) : _mm512_setzero_ps();
      transpose16x16(x);
      for (std::int64_t j = 0; j < 16; ++j) {
        _mm256_storeu_ps(q + r0 * dim + (d + j) * kScoreRows, _mm512_castps512_ps256(x[j]));
        _mm256_storeu_ps(q + (r0 + 8) * dim + (d + j) * kScoreRows, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x[j]), 1)));
      }
    });
  }
  std::fill(m, m + rows, kNegInf);
  std::fill(l, l + rows, 0.0f);

  const KvSource& kv = a.kv;
  const std::int64_t row_bytes = head_dim * bytes_of(kv.dtype);
  KvRows<kBlockKeys> block;
  const float* vrow[kBlockKeys];
  Prefetcher<0, kBlockKeys> pf(a.prefetch_l1);
  pf.row_bytes = row_bytes;

  for (std::int64_t tb = t0; tb < t_end; tb += width) {
    const std::int64_t n = std::min(width, t_end - tb);
    gather_rows(kv, tb, n, block);
    pf.add_rows(kv, tb + width, std::clamp<std::int64_t>(t_end - tb - width, 0, width));  // issued row by row of the softmax

    // 1. kt[d][key] for the block; keys past n are zero.
    for_each16(head_dim, [&](std::int64_t d, __mmask16 features) {
      for (std::int64_t h = 0; 16 * h < n; ++h) {
        __m512 r[16];
        for (std::int64_t i = 0; i < 16; ++i) {
          const std::int64_t key = 16 * h + i;
          r[i] = key < n ? load_kv16(block.k[key], kv.dtype, d, block.k_scale[key], features) : _mm512_setzero_ps();
        }
        transpose16x16(r);
        for (std::int64_t j = 0; j < 16; ++j) _mm512_store_ps(kt + (d + j) * width + 16 * h, r[j]);
      }
    });
    if (kv.dtype == DType::f32 && (dim == head_dim || half_tail(head_dim))) {  // read in place: no load past a row
      for (std::int64_t i = 0; i < n; ++i) vrow[i] = static_cast<const float*>(block.v[i]);
    } else {
      for (std::int64_t i = 0; i < n; ++i) {
        for_each16(head_dim, [&](std::int64_t d, __mmask16 features) {
          _mm512_store_ps(vb + i * dim + d, load_kv16(block.v[i], kv.dtype, d, block.v_scale[i], features));
        });
        vrow[i] = vb + i * dim;
      }
    }

    // 2. Scores, 32 keys at a time, then the online softmax row by row:
    //    the block's max (masked lanes -inf, written back), then its exps.
    for (std::int64_t r = 0; r < rows; ++r)
      visible[r] = std::clamp<std::int64_t>(limit[r] - tb, 0, n);
    for (std::int64_t c = 0; c < n; c += kKeys) score_rows(q, rows, dim, head_dim, kt, s, width, c, n, visible);
    // Per row: the new max, P and the row's sum; alpha holds the old max
    // until all rows have theirs, then alpha = exp(old - new) for 16 rows
    // per exp, and l follows.
    // In the last block, each row's output lines and the next task's row of
    // q are requested (prefetch_task_ends).
    const std::int64_t vectors = (n + 15) / 16;
    const bool last = tb + width >= t_end;
    u = UnitRow(a, 0);
    for (std::int64_t r = 0; r < rows; ++r, u.next(a)) {
      pf.issue(int(r), int(rows));
      if (last) prefetch_task_ends(a, out, r, u);
      float* sr = s + r * width;
      const std::int64_t valid = visible[r];
      alpha[r] = m[r];
      row_sum[r] = 0.0f;
      const auto clear = [&] {
        for (std::int64_t j = 0; j < vectors; ++j) _mm512_store_ps(sr + 16 * j, _mm512_setzero_ps());
      };
      if (valid == 0) {
        clear();
        continue;
      }
      const void* mrow = mask_row(a, u, tb);
      // Every lane of every vector visible and no mask: nothing to mask.
      const bool whole = valid == 16 * vectors && !mrow;
      __m512 vmax = _mm512_set1_ps(kNegInf);
      for (std::int64_t j = 0; j < vectors; ++j) {
        __m512 x = _mm512_load_ps(sr + 16 * j);
        if (!whole) {
          const std::int64_t left = valid - 16 * j;
          if (mrow && left > 0) x = _mm512_add_ps(x, load_mask16(a, advance(mrow, a.mask_dtype, 16 * j * a.mask_key_stride), std::min<std::int64_t>(left, 16)));
          x = _mm512_mask_mov_ps(_mm512_set1_ps(kNegInf), tail_mask(std::max<std::int64_t>(left, 0)), x);
          _mm512_store_ps(sr + 16 * j, x);
        }
        vmax = _mm512_max_ps(vmax, x);
      }
      const float m_new = std::max(m[r], _mm512_reduce_max_ps(vmax));
      if (m_new == kNegInf) {  // nothing visible yet: the row stays empty
        clear();
        continue;
      }
      const __m512 mv = _mm512_set1_ps(m_new);
      __m512 sum = _mm512_setzero_ps();
      for (std::int64_t j = 0; j < vectors; ++j) {
        __m512 p = exp16<ExpArg::nonpositive, ExpTiny::normal>(_mm512_sub_ps(_mm512_load_ps(sr + 16 * j), mv));
        if (!whole) p = _mm512_maskz_mov_ps(tail_mask(std::max<std::int64_t>(valid - 16 * j, 0)), p);
        _mm512_store_ps(sr + 16 * j, p);
        sum = _mm512_add_ps(sum, p);
      }
      row_sum[r] = _mm512_reduce_add_ps(sum);
      m[r] = m_new;
    }
    for (std::int64_t r = 0; r < rows; r += 16) rescale_rows16(alpha + r, m + r, row_sum + r, alpha + r, l + r, tail_mask(rows - r));

    // 3. O = alpha O + P V; the first block writes O without reading it
    //    (every row's tile is written, keys or not: for_row_tiles), so O
    //    needs no zeros first.
    pv_rows_all(s, width, tb == t0 ? nullptr : alpha, o, rows, dim, head_dim, vrow, visible);
  }

  finish_rows(a, out, o, dim, m, l);
}

}  // namespace tessera::kernels::avx512
