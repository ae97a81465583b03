#pragma once
// What the two bf16 flash attention kernels share (AMX tiles, and
// AVX512-BF16 dot products where AMX is absent): per block of keys, K
// and V packed into the AMX B-tile layouts (pairs of bf16 per 32-bit
// element, the operand of both _tile_dpbf16ps and vdpbf16ps), and the
// unit's row state with the online softmax of a group of 32 rows, whose P
// is rounded to bf16 as q, k and v are; scores and sums stay f32. Static,
// like vec.hpp (the struct lives in an unnamed namespace).
#include "kernels/scratch.hpp"
#include "kernels/x86/avx512/attention_common.hpp"

namespace tessera::kernels::avx512 {

constexpr std::int64_t kBf16FlashKeys = 64;  // keys per block: the narrowest, the AMX kernel's
// The widest block. The dot-product kernel's blocks: a unit's whole key
// range when no longer (cross-attention to 77 text tokens: 96 keys, one
// softmax per row), else 128 keys, each block costing every row an online
// update (AMD EPYC, 1 thread, alternating, 64 -> 128 keys: [1, 4096, 8, 40]
// 165-168 -> 154-159 ms, [1, 2048, 8, 128] 98 -> 92-94 ms).
constexpr std::int64_t kBf16FlashShortKeys = 128;
constexpr std::int64_t kBf16FlashGroup = 32;  // rows per group
constexpr std::int64_t kTileBytes = 1024;

// Kᵀ tiles of one block of `keys`: [dim / 32][keys / 16 quarters of 16
// keys] tiles, row j = d pair j of the chunk, element (key, pair) = 32 bits.
// Keys past n and features past head_dim (dim: head_dim rounded up to 32)
// are zero.
static inline void pack_k_tiles(const KvRows<kBf16FlashShortKeys>& rows, std::int64_t n, std::int64_t head_dim,
                                std::int64_t dim, std::int64_t keys, char* out) {
  for (std::int64_t c = 0; c < dim / 32; ++c)
    for (std::int64_t h = 0; h < keys / 16; ++h) {
      const __mmask32 features = tail_mask32(head_dim - 32 * c);  // the padded dims read as 0
      __m512 r[16];
      for (std::int64_t i = 0; i < 16; ++i) {
        const std::int64_t key = 16 * h + i;
        r[i] = key < n ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(features, static_cast<const std::uint16_t*>(rows.k[key]) + 32 * c))
                       : _mm512_setzero_ps();
      }
      transpose16x16(r);
      char* tile = out + (keys / 16 * c + h) * kTileBytes;
      for (std::int64_t j = 0; j < 16; ++j) _mm512_store_ps(tile + 64 * j, r[j]);
    }
}

// V tiles of one block of `keys`: [keys / 32 steps of 32 keys][dim /
// 32][2 halves of 16 columns] tiles, row j = keys (2j, 2j + 1) of the step,
// element (column, key parity) = 16 bits. Keys past n and columns past
// head_dim are zero.
static inline void pack_v_tiles(const KvRows<kBf16FlashShortKeys>& rows, std::int64_t n, std::int64_t head_dim,
                                std::int64_t dim, std::int64_t keys, char* out) {
  for (std::int64_t j = 0; j < keys / 2; ++j) {
    const auto* even = 2 * j < n ? static_cast<const std::uint16_t*>(rows.v[2 * j]) : nullptr;
    const auto* odd = 2 * j + 1 < n ? static_cast<const std::uint16_t*>(rows.v[2 * j + 1]) : nullptr;
    std::int64_t col = 0;
    // 32 columns of both keys at once: the pairs interleaved within 128-bit
    // lanes (unpack), then the lanes put in column order (two permutes).
    for (; even && odd && col + 32 <= head_dim; col += 32) {
      const __m512i e = _mm512_loadu_si512(even + col), o = _mm512_loadu_si512(odd + col);
      const __m512i lo = _mm512_unpacklo_epi16(e, o), hi = _mm512_unpackhi_epi16(e, o);  // columns 8L + 0..3, 8L + 4..7 of lane L
      char* tile = out + ((j / 16) * (dim / 16) + col / 16) * kTileBytes + 64 * (j % 16);
      _mm512_store_si512(tile, _mm512_permutex2var_epi64(lo, _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), hi));
      _mm512_store_si512(tile + kTileBytes, _mm512_permutex2var_epi64(lo, _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15), hi));
    }
    for (; col < dim; col += 16) {
      const __mmask16 cols = tail_mask(std::max<std::int64_t>(0, head_dim - col));
      const __m512i e = even ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(cols, even + col)) : _mm512_setzero_si512();
      const __m512i o = odd ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(cols, odd + col)) : _mm512_setzero_si512();
      // Tile (step, chunk, half): step j / 16, (chunk, half) = col / 16.
      char* tile = out + ((j / 16) * (dim / 16) + col / 16) * kTileBytes;
      _mm512_store_si512(tile + 64 * (j % 16), _mm512_or_si512(e, _mm512_slli_epi32(o, 16)));
    }
  }
}

namespace {

// One unit's rows (rows_pad: whole groups, zero-padded) through the blocks
// of `keys` keys of [t0, t_end): q (bf16, unscaled), the f32 sums o, m, l
// and alpha; per group its scores (f32, [32][keys]) and P (bf16,
// [32][keys]); the block's packed K and V tiles. Rows of q, o and the tiles
// span dim, the head dim rounded up to 32 with zero features. Blocks are
// block_keys wide, or the whole range in one block of whole steps of 32
// keys (at least kBf16FlashKeys) where it is shorter.
struct Bf16FlashRows {
  const AttentionArgs& a;
  std::int64_t head_dim, dim, rows, group, t_end, rows_pad, keys;
  std::uint16_t* q;
  float *o, *m, *l, *alpha;
  float* s_buf[2];  // two groups' scores (the AMX kernel overlaps them)
  std::uint16_t* p;
  std::int64_t* limit;  // per row: keys t < limit are visible
  char *kp, *vp;        // K and V tiles: (D / 32) x 4 tiles each
  KvRows<kBf16FlashShortKeys> block;
  Prefetcher<0, kBf16FlashShortKeys> pf{a.prefetch_l1};  // the next block's rows, a share per row of the softmax
  alignas(64) float m_old[kBf16FlashGroup], row_sum[kBf16FlashGroup];

  Bf16FlashRows(const AttentionArgs& args, std::int64_t t0, std::int64_t t1, std::int64_t block_keys)
      : a(args), head_dim(args.head_dim), dim((args.head_dim + 31) / 32 * 32), rows(args.rows), group(args.group) {
    t_end = visible_keys_end(a, t1);
    keys = std::clamp((t_end - t0 + 31) / 32 * 32, kBf16FlashKeys, block_keys);
    rows_pad = (std::max<std::int64_t>(rows, 1) + kBf16FlashGroup - 1) / kBf16FlashGroup * kBf16FlashGroup;
    const std::size_t state = std::size_t(rows_pad) * (dim * 2 + dim * 4 + 12 + 8) + kBf16FlashGroup * keys * (2 * 4 + 2);
    char* base = static_cast<char*>(thread_scratch(ScratchSlot::a_panel, state));
    q = reinterpret_cast<std::uint16_t*>(base);
    o = reinterpret_cast<float*>(q + rows_pad * dim);
    m = o + rows_pad * dim;
    l = m + rows_pad;
    alpha = l + rows_pad;
    s_buf[0] = alpha + rows_pad;
    s_buf[1] = s_buf[0] + kBf16FlashGroup * keys;
    p = reinterpret_cast<std::uint16_t*>(s_buf[1] + kBf16FlashGroup * keys);
    limit = reinterpret_cast<std::int64_t*>(p + kBf16FlashGroup * keys);
    pf.row_bytes = 2 * head_dim;
    kp = static_cast<char*>(thread_scratch(ScratchSlot::b_panel, std::size_t(dim / 32) * (keys / 16) * 2 * kTileBytes));
    vp = kp + (dim / 32) * (keys / 16) * kTileBytes;
    prefetch_q_rows(a);
    UnitRow u(a, 0);
    for (std::int64_t r = 0; r < rows_pad; ++r, u.next(a)) {
      auto* qr = q + r * dim;
      if (r < rows) {
        const void* src = q_row(a, u, a.q);
        if (a.q_dtype == DType::bf16) {
          std::copy_n(static_cast<const std::uint16_t*>(src), head_dim, qr);
        } else {  // f32 q under FpMath::bf16 (kernels/attention.cpp, bf16_q): rounded here, once
          for_each16(head_dim, [&](std::int64_t d, __mmask16 m) {
            store16(qr + d, DType::bf16, load16(advance(src, a.q_dtype, d), a.q_dtype, m), m);
          });
        }
        std::fill(qr + head_dim, qr + dim, std::uint16_t(0));
      } else {
        std::fill(qr, qr + dim, std::uint16_t(0));
      }
      std::fill(o + r * dim, o + (r + 1) * dim, 0.0f);
      m[r] = kNegInf;
      l[r] = 0.0f;
      limit[r] = r >= rows ? 0 : a.causal ? std::min(t_end, u.pos + a.causal_offset + 1) : t_end;
    }
  }

  // Keys [tb, tb + n) gathered and packed; the next block's rows listed
  // for the prefetcher (softmax_rows issues them).
  void load_block(std::int64_t tb, std::int64_t n) {
    const KvSource& kv = a.kv;
    gather_rows(kv, tb, n, block);
    pf.add_rows(kv, tb + keys, std::clamp<std::int64_t>(t_end - tb - keys, 0, keys));
    pack_k_tiles(block, n, head_dim, dim, keys, kp);
    pack_v_tiles(block, n, head_dim, dim, keys, vp);
  }

  // The first group that sees some of the block's keys: causal, a group
  // whose last row sees none of them is skipped, and those are the first
  // ones (rows go by position).
  std::int64_t first_group(std::int64_t tb) const {
    std::int64_t g = 0;
    while (a.causal && g < rows_pad && (std::min(g + kBf16FlashGroup, rows) - 1) / group + a.causal_offset < tb) g += kBf16FlashGroup;
    return g;
  }

  // Online softmax of rows [i0, i1) of group g from its scores sb (block
  // [tb, tb + n)); P in bf16. Per row: scaled (and masked) scores, the new
  // max, P and the row sum (alpha and l follow in finish_group).
  void softmax_rows(std::int64_t g, std::int64_t i0, std::int64_t i1, const float* sb, std::int64_t tb, std::int64_t n) {
    const __m512 scale = _mm512_set1_ps(a.scale);
    for (std::int64_t i = i0; i < i1; ++i) {
      const std::int64_t r = g + i;
      pf.issue(int(r), int(rows_pad));
      auto* pr = p + i * keys;
      const float* sr = sb + i * keys;
      m_old[i] = m[r];
      row_sum[i] = 0.0f;
      const std::int64_t valid = std::clamp<std::int64_t>(limit[r] - tb, 0, n);
      const std::int64_t vectors = keys / 16;
      __m512 x[kBf16FlashShortKeys / 16];
      if (valid == keys && !a.mask) {
        for (std::int64_t v = 0; v < vectors; ++v) x[v] = _mm512_mul_ps(scale, _mm512_load_ps(sr + 16 * v));
      } else {
        const void* mrow = mask_row(a, UnitRow(a, r), tb);
        for (std::int64_t v = 0; v < vectors; ++v) {
          const std::int64_t count = std::clamp<std::int64_t>(valid - 16 * v, 0, 16);
          x[v] = _mm512_set1_ps(kNegInf);
          if (count == 0) continue;
          x[v] = _mm512_mul_ps(scale, _mm512_load_ps(sr + 16 * v));
          if (mrow) x[v] = _mm512_add_ps(x[v], load_mask16(a, advance(mrow, a.mask_dtype, 16 * v * a.mask_key_stride), count));
          x[v] = _mm512_mask_mov_ps(_mm512_set1_ps(kNegInf), tail_mask(count), x[v]);
        }
      }
      __m512 mx = x[0];
      for (std::int64_t v = 1; v < vectors; ++v) mx = _mm512_max_ps(mx, x[v]);
      const float m_new = valid == 0 ? kNegInf : std::max(m[r], _mm512_reduce_max_ps(mx));
      if (m_new == kNegInf) {  // nothing visible with a finite logit yet: alpha 1, P 0
        for (std::int64_t v = 0; v < vectors; v += 2) _mm512_storeu_si512(pr + 16 * v, _mm512_setzero_si512());
        continue;
      }
      const __m512 mv = _mm512_set1_ps(m_new);
      const bool all_visible = valid == keys && !a.mask;  // no -inf lanes to zero
      __m512 sum = _mm512_setzero_ps();
      for (std::int64_t v = 0; v < vectors; v += 2) {
        // Masked lanes are -inf: they are zeroed, for P and the sum. P
        // rounds to bf16 with vcvtne2ps2bf16 (p >= 0: flushing a subnormal
        // changes nothing).
        __m512 p0 = exp16_bf16<ExpArg::nonpositive, ExpTiny::normal>(_mm512_sub_ps(x[v], mv));
        __m512 p1 = exp16_bf16<ExpArg::nonpositive, ExpTiny::normal>(_mm512_sub_ps(x[v + 1], mv));
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
  }

  // alpha = exp(m_old - m) and l = alpha l + the row sums, for group g.
  void finish_group(std::int64_t g) {
    for (std::int64_t h = 0; h < kBf16FlashGroup; h += 16)
      rescale_rows16(m_old + h, m + g + h, row_sum + h, alpha + g + h, l + g + h, 0xffff);
  }
};

}  // namespace

}  // namespace tessera::kernels::avx512
