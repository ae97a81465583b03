#include <algorithm>
#include <cstring>

#include "kernels/scratch.hpp"
#include "kernels/x86/avx512/epilogue.hpp"
#include "kernels/x86/avx512/matmul_pack.hpp"

namespace tessera::kernels::avx512 {

namespace {

constexpr std::int64_t kMr = 14;  // rows of C per micro-tile: 28 accumulators + 2 B registers of 32

// part[0:MR, 0:32] = (first ? 0 : part) + A[0:MR, 0:kc] * B[0:kc, 0:32]. A is
// a packed k-major sliver ([k][lda], lda >= MR), B a dense 32-wide panel:
// two sequential streams, one pointer each.
template <int MR>
void micro_tile(std::int64_t kc, const float* a, std::int64_t lda, const float* b, float* part, std::int64_t ldp,
                bool first, const char* prefetch, std::int64_t prefetch_bytes) {
  __m512 acc[2 * MR];
#pragma GCC unroll 14
  for (int i = 0; i < MR; ++i) {
    acc[2 * i] = first ? _mm512_setzero_ps() : _mm512_load_ps(part + i * ldp);
    acc[2 * i + 1] = first ? _mm512_setzero_ps() : _mm512_load_ps(part + i * ldp + 16);
  }
  auto step = [&](std::int64_t k) {
    const __m512 b0 = _mm512_load_ps(b + k * kPanelCols);
    const __m512 b1 = _mm512_load_ps(b + k * kPanelCols + 16);
#pragma GCC unroll 14
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_set1_ps(a[k * lda + i]);
      acc[2 * i] = _mm512_fmadd_ps(av, b0, acc[2 * i]);
      acc[2 * i + 1] = _mm512_fmadd_ps(av, b1, acc[2 * i + 1]);
    }
  };
  // Prefetches spread over the K loop (a few lines per 8 steps), so they
  // never fill the line-fill buffers and stall the FMAs.
  const std::int64_t lines = prefetch_bytes / 64, per8 = (lines + std::max<std::int64_t>(1, kc / 8) - 1) / std::max<std::int64_t>(1, kc / 8);
  std::int64_t k = 0, off = 0;
  for (; k + 8 <= kc; k += 8) {
    for (std::int64_t j = 0; j < per8 && off < prefetch_bytes; ++j, off += 64) _mm_prefetch(prefetch + off, _MM_HINT_T0);
#pragma GCC unroll 8
    for (int u = 0; u < 8; ++u) step(k + u);
  }
  for (; k < kc; ++k) step(k);
#pragma GCC unroll 14
  for (int i = 0; i < MR; ++i) {
    _mm512_store_ps(part + i * ldp, acc[2 * i]);
    _mm512_store_ps(part + i * ldp + 16, acc[2 * i + 1]);
  }
}

using MicroTile = void (*)(std::int64_t, const float*, std::int64_t, const float*, float*, std::int64_t, bool, const char*,
                           std::int64_t);
constexpr MicroTile kMicroTiles[kMr + 1] = {nullptr,        micro_tile<1>,  micro_tile<2>,  micro_tile<3>,  micro_tile<4>,
                                            micro_tile<5>,  micro_tile<6>,  micro_tile<7>,  micro_tile<8>,  micro_tile<9>,
                                            micro_tile<10>, micro_tile<11>, micro_tile<12>, micro_tile<13>, micro_tile<14>};

}  // namespace

// Blocked GEMM for one tile of C: K in slices of t.k_block; per slice the
// task's rows of A are packed once (converted to f32, W8A8-rounded when
// asked) and each 32-column panel of B is either read in place (packed f32
// weights) or converted once into an L1-resident panel, then reused by every
// micro-tile of up to 14 rows (evened out: 16 rows run as 8 + 8, not 14 + 2).
// Partial sums of the slices stay in an L2-resident tile; the epilogue runs
// on each micro-tile right after its last slice.
void matmul_f32(const MatmulArgs& p, const MatmulTiling& t, std::int64_t m0, std::int64_t m1, std::int64_t n0,
                std::int64_t n1) {
  const std::int64_t rows = m1 - m0, kb = std::max<std::int64_t>(1, std::min(t.k_block, p.k));
  const std::int64_t slivers = (rows + kMr - 1) / kMr, mr_max = (rows + slivers - 1) / slivers;
  const std::int64_t ldp = round_up(n1 - n0, kPanelCols);
  auto* a_pack = static_cast<float*>(thread_scratch(ScratchSlot::a_panel, std::size_t(slivers * mr_max * kb) * sizeof(float)));
  auto* b_buf = static_cast<float*>(thread_scratch(ScratchSlot::b_panel, std::size_t(kb * kPanelCols) * sizeof(float)));
  auto* part = static_cast<float*>(thread_scratch(ScratchSlot::partial, std::size_t(rows * ldp) * sizeof(float)));
  if (p.k == 0) std::memset(part, 0, std::size_t(rows * ldp) * sizeof(float));
  for (std::int64_t k0 = 0; k0 < p.k; k0 += kb) {
    const std::int64_t kc = std::min(kb, p.k - k0);
    pack_a_f32(p, m0, m1, k0, kc, a_pack, mr_max);
    for (std::int64_t n = n0; n < n1; n += kPanelCols) {
      const float* panel = b_panel_f32(p, n, n1, k0, kc, b_buf);
      // Packed weights stream from L3 or memory. K in slices (many rows):
      // each micro-tile pulls in a share of the next panel while this one is
      // hot in L1. Whole K (few rows): the first micro-tile streams the panel
      // from memory, 4 KiB ahead of itself (the hardware prefetcher stops at
      // page boundaries); the others find it in L2.
      const std::int64_t panel_bytes = kc * kPanelCols * 4;
      const bool packed = panel != b_buf;
      const char* next = reinterpret_cast<const char*>(panel);
      std::int64_t share = 0, shares = slivers;
      if (packed && kc == p.k) {
        next += 4096, share = panel_bytes, shares = 1;
      } else if (packed && n + kPanelCols < n1) {
        next += p.packed->k * kPanelCols * 4, share = round_up(panel_bytes / slivers, 64);
      }
      for (std::int64_t m = m0, s = 0; m < m1; m += mr_max, ++s) {
        const std::int64_t mr = std::min(mr_max, m1 - m);
        float* tile = part + (m - m0) * ldp + (n - n0);
        if (k0 + kc == p.k) prefetch_epilogue(p, mr, m, n);
        kMicroTiles[mr](kc, a_pack + (m - m0) * kc, mr_max, panel, tile, ldp, k0 == 0, next + s * share, s < shares ? share : 0);
        if (k0 + kc == p.k) epilogue_tile32(p, tile, ldp, mr, m, n, n1);
      }
    }
  }
  if (p.k == 0)
    for (std::int64_t n = n0; n < n1; n += kPanelCols) epilogue_tile32(p, part + (n - n0), ldp, rows, m0, n, n1);
}

}  // namespace tessera::kernels::avx512
