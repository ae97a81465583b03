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
// The packing and the softmax: avx512/flash_bf16_blocks.hpp.
#include "kernels/x86/amx/tiles.hpp"
#include "kernels/x86/avx512/flash_bf16_blocks.hpp"

namespace tessera::kernels::amx {

namespace {

constexpr std::int64_t kKeys = avx512::kBf16FlashKeys;
constexpr std::int64_t kGroup = avx512::kBf16FlashGroup;
constexpr std::int64_t kTileBytes = avx512::kTileBytes;

}  // namespace

void flash_attention_bf16(const AttentionArgs& a, std::int64_t t0, std::int64_t t1, const AttentionOutput& out) {
  avx512::Bf16FlashRows rs(a, t0, t1, kKeys);  // blocks of kKeys: the tile steps below assume them
  const std::int64_t dim = rs.dim, rows = rs.rows, rows_pad = rs.rows_pad, t_end = rs.t_end;
  const std::uint16_t* q = rs.q;
  float* o = rs.o;
  const float* alpha = rs.alpha;
  const std::uint16_t* p = rs.p;
  const char *kp = rs.kp, *vp = rs.vp;
  // The P V tile results, [32][32] f32 each.
  auto* pv = static_cast<float*>(thread_scratch(ScratchSlot::partial, 2 * kGroup * 32 * sizeof(float)));
  float* const pv_buf[2] = {pv, pv + kGroup * 32};

  const std::int64_t chunks = dim / 32;
  configure_tiles();
  for (std::int64_t tb = t0; tb < t_end; tb += kKeys) {
    const std::int64_t n = std::min(kKeys, t_end - tb);
    rs.load_block(tb, n);
    const std::int64_t g_first = rs.first_group(tb);
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
      for (std::int64_t step = 0; step < score_steps; ++step) score_step(active(0), step, rs.s_buf[0]);
    const std::int64_t share = (kGroup + score_steps - 1) / score_steps;  // softmax rows per score step
    for (std::int64_t k = 0; k < groups; ++k) {
      const std::int64_t g = active(k);
      for (std::int64_t step = 0; step < score_steps; ++step) {
        if (k + 1 < groups) score_step(active(k + 1), step, rs.s_buf[(k + 1) & 1]);
        rs.softmax_rows(g, std::min(kGroup, step * share), std::min(kGroup, (step + 1) * share), rs.s_buf[k & 1], tb, n);
      }
      rs.finish_group(g);

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
  avx512::finish_rows(a, out, o, dim, rs.m, rs.l);
}

}  // namespace tessera::kernels::amx
