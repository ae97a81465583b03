// Flash attention with AVX512-BF16 dot products (vdpbf16ps) for bf16 q, k
// and v where AMX is absent. The AMX kernel's blocks, wider (128 keys, or a
// unit's whole key range up to 128 in one block; groups of 32 rows, K and V
// packed into the tile layouts, the same online softmax with P in bf16:
// avx512/flash_bf16_blocks.hpp), each tile product done with
// vectors: a 32-bit broadcast of a bf16 pair of q (or P) times a 64-byte
// tile row, the pairs of 16 columns. That is half the instructions of the
// f32 kernel's FMAs for the same products, and no f32 copies of K or V.
#include <cstring>

#include "kernels/x86/avx512/flash_bf16_blocks.hpp"

namespace tessera::kernels::avx512_bf16 {

namespace {

using namespace avx512;  // this level extends AVX-512: its helpers apply as they are

constexpr std::int64_t kGroup = kBf16FlashGroup;
// Score tiles: 8 rows by up to 3 quarters of 16 keys (24 sums).
constexpr std::int64_t kScoreRows = 8;
constexpr std::int64_t kScoreQuarters = 3;
// P V tiles: 4 rows by up to 4 vectors of 16 columns (16 sums). Against
// 12 + 12 + 8 rows by 2 vectors (1 thread, alternating, 7-9 rounds, median
// ratio of times): causal [1, 1024, 32/8, 128] 0.97-0.99x, cross to 77 keys
// (d 64) 0.83-0.96x, [1, 4096, 8, 40] 0.94x; 8 x 3 measured even and 4 x 6
// 0.95-1.04x.
constexpr std::int64_t kPvRows = 4;
constexpr std::int64_t kPvVectors = 4;

// The bf16 pair at `pair` in every 32-bit lane, for vdpbf16ps against tile rows.
static inline __m512bh broadcast_pair(const void* pair) {
  std::int32_t bits;
  std::memcpy(&bits, pair, sizeof(bits));
  return (__m512bh)_mm512_set1_epi32(bits);
}

// Scores of RR rows of q (bf16, `dim` apart) for the 16 QN keys of quarters
// [quarter, quarter + QN) of a block of `keys`: each Kᵀ tile row is d pair
// j of 16 keys, and a quarter's tile follows the one before. Each pair of a
// row's q is broadcast once for the QN tiles: with one quarter per tile
// (16 rows x 16 keys), every product needed its own broadcast load, and
// those loads were as hot as the products (perf).
// The last tile's pairs past head_dim (zeros) are skipped: SD's 40-wide
// heads take 20 pairs, not 32.
// The rows' pairs are read through (RR + 2) / 3 base pointers, each serving
// three rows as base, base + L and base + 2 L (an index register scaled by
// 1 or 2), and a tile's 16 steps are unrolled into displacements: with a
// pointer per row the 16 addresses took more registers than there are, and
// each step reloaded a third of them from the stack.
template <int RR, int QN>
static void score_tile(const std::uint16_t* q, std::int64_t dim, std::int64_t head_dim, const char* kp, std::int64_t keys,
                       std::int64_t quarter, float* s) {
  constexpr int kBases = (RR + 2) / 3;
  const std::int64_t row_bytes = 2 * dim;
  const char* base[kBases];
#pragma GCC unroll 6
  for (int b = 0; b < kBases; ++b) base[b] = reinterpret_cast<const char*>(q) + 3 * b * row_bytes;
  __m512 acc[RR][QN];
#pragma GCC unroll 16
  for (int i = 0; i < RR; ++i)
    for (int h = 0; h < QN; ++h) acc[i][h] = _mm512_setzero_ps();
  const auto pair_step = [&](const char* tile, int j) {
    __m512i k[QN];
    for (int h = 0; h < QN; ++h) k[h] = _mm512_load_si512(tile + h * kTileBytes + 64 * j);
#pragma GCC unroll 16
    for (int i = 0; i < RR; ++i) {
      const __m512bh pair = broadcast_pair(base[i / 3] + (i % 3) * row_bytes + 4 * j);
      for (int h = 0; h < QN; ++h) acc[i][h] = _mm512_dpbf16_ps(acc[i][h], pair, (__m512bh)k[h]);
    }
  };
  const std::int64_t chunks = dim / 32, last_pairs = (head_dim - 32 * (chunks - 1) + 1) / 2;
  for (std::int64_t c = 0; c < chunks; ++c) {
    const char* tile = kp + (keys / 16 * c + quarter) * kTileBytes;
    if (c + 1 < chunks || last_pairs == 16) {
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) pair_step(tile, j);
    } else {
      for (int j = 0; j < last_pairs; ++j) pair_step(tile, j);
    }
#pragma GCC unroll 6
    for (int b = 0; b < kBases; ++b) base[b] += 64;  // the next 32 features
  }
#pragma GCC unroll 16
  for (int i = 0; i < RR; ++i)
    for (int h = 0; h < QN; ++h) _mm512_store_ps(s + i * keys + 16 * (quarter + h), acc[i][h]);
}

// O[RR rows][16 c : 16 (c + NV)] = alpha O + P V over the first n keys of
// a block of `keys`: each V tile row is the key pair j of 16 columns, tile
// (step of 32 keys, vector c) at step * dim / 16 + c. Each pair of a row's P
// is broadcast once for the NV tiles.
template <int RR, int NV>
static void pv_tile(const std::uint16_t* p, std::int64_t keys, const float* alpha, float* o, std::int64_t dim, const char* vp,
                    std::int64_t c, std::int64_t n) {
  __m512 acc[RR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < RR; ++i) {
    const __m512 al = _mm512_set1_ps(alpha[i]);
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_mul_ps(al, _mm512_loadu_ps(o + i * dim + 16 * v));
  }
  for (std::int64_t step = 0; 32 * step < n; ++step) {
    const char* t0 = vp + (step * (dim / 16) + c) * kTileBytes;
    for (std::int64_t j = 0, pairs = std::min<std::int64_t>(16, (n - 32 * step + 1) / 2); j < pairs; ++j) {
      __m512i x[NV];
      for (int v = 0; v < NV; ++v) x[v] = _mm512_load_si512(t0 + v * kTileBytes + 64 * j);
#pragma GCC unroll 16
      for (int i = 0; i < RR; ++i) {
        const __m512bh pair = broadcast_pair(p + i * keys + 32 * step + 2 * j);
        for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], pair, (__m512bh)x[v]);
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < RR; ++i)
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(o + i * dim + 16 * v, acc[i][v]);
}

// P V for a group's 32 rows, kPvRows at a time over the keys the tile's last
// row sees, its columns up to head_dim kPvVectors vectors at a time (SD's
// 40-wide heads: 48 columns, not 64).
template <class Seen>
static void pv_group(const Bf16FlashRows& rs, std::int64_t g, const Seen& seen) {
  const std::int64_t dim = rs.dim, keys = rs.keys, vectors = (rs.head_dim + 15) / 16;
  for (std::int64_t r = 0; r < kGroup; r += kPvRows)
    for (std::int64_t c = 0; c < vectors; c += kPvVectors)
      dispatch_count<kPvVectors>(std::min(kPvVectors, vectors - c), [&](auto nv) {
        pv_tile<kPvRows, nv()>(rs.p + r * keys, keys, rs.alpha + g + r, rs.o + (g + r) * dim + 16 * c, dim, rs.vp, c,
                               seen(r + kPvRows - 1));
      });
}

}  // namespace

// Whole groups of 32 rows (the padding rows are zero q with no visible
// keys): scores in tiles of kScoreRows rows, P V in tiles of kPvRows.
void flash_attention_bf16_dot(const AttentionArgs& a, std::int64_t t0, std::int64_t t1, const AttentionOutput& out) {
  Bf16FlashRows rs(a, t0, t1, kBf16FlashShortKeys);
  const std::int64_t dim = rs.dim, keys = rs.keys;
  for (std::int64_t tb = t0; tb < rs.t_end; tb += keys) {
    const std::int64_t n = std::min(keys, rs.t_end - tb);
    rs.load_block(tb, n);
    for (std::int64_t g = rs.first_group(tb); g < rs.rows_pad; g += kGroup) {
      float* sb = rs.s_buf[0];
      // Rows go by position: a sliver's or tile's last row (of the unit's,
      // not the padding) sees the most keys, and what none of its rows sees
      // is not computed (under a causal mask, the hidden part of the
      // diagonal blocks).
      const auto seen = [&](std::int64_t last) {
        return std::clamp<std::int64_t>(rs.limit[std::clamp<std::int64_t>(rs.rows - 1, 0, g + last)] - tb, 0, n);
      };
      for (std::int64_t r = 0; r < kGroup; r += kScoreRows) {
        const std::int64_t quarters = (seen(r + kScoreRows - 1) + 15) / 16;
        for (std::int64_t quarter = 0; quarter < quarters; quarter += kScoreQuarters)
          dispatch_count<kScoreQuarters>(std::min(kScoreQuarters, quarters - quarter), [&](auto qn) {
            score_tile<kScoreRows, qn()>(rs.q + (g + r) * dim, dim, rs.head_dim, rs.kp, keys, quarter, sb + r * keys);
          });
      }
      rs.softmax_rows(g, 0, kGroup, sb, tb, n);
      rs.finish_group(g);
      pv_group(rs, g, seen);
    }
  }
  finish_rows(a, out, rs.o, dim, rs.m, rs.l);
}

}  // namespace tessera::kernels::avx512_bf16
