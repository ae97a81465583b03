#pragma once
// The loop nest the AVX-512 register-blocked matmul kernels share (f32 with
// FMAs, bf16 with vdpbf16ps, W8A8 with vpdpbusd): 14 x 32 micro-tiles of C
// in 28 registers, K in slices. A kernel supplies its arithmetic through a
// Traits struct; per k "unit" (what one 32-bit broadcast of A holds: one
// f32, a pair of bf16, four u8) it multiplies one 128-byte row of B's panel:
//
//   static constexpr int64 kUnitK;             // k per unit: 1, 2 or 4
//   static constexpr int64 kKGrain;            // K slices start at multiples of it (B's layout)
//   static const char* b_row(panel, u);        // unit u's 16 columns; the other 16 kHalfBytes on
//   static constexpr int64 kHalfBytes;
//   static __m512 dot(__m512 acc, float a_unit, __m512 b);  // acc += a_unit x 16 columns
//                                              // (integer sums: their bits, in float vectors)
//   void pack_a(p, m0, m1, k0, kc, float* dst, mr);        // pack_a_units' layout
//   static const char* a_in_place(p);          // A's units as stored, or nullptr (then packed)
//   const char* b_panel(p, n, n_end, k0, kc, char* buf);   // a slice of B's panel (in place or in buf)
//   void panel_ready(p, n, k0);                 // after b_panel (W8A8: the columns' offsets)
//   __m512 finish(__m512 acc, int half);       // before a micro-tile stores its sums
//   void epilogue(p, const float* tile, ld, rows, m, n, n_end);  // sums (f32 or i32 bits) -> C
//
// Static template code: instantiated only inside the kernels' translation units.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "kernels/matmul.hpp"
#include "kernels/scratch.hpp"
#include "kernels/x86/avx512/epilogue.hpp"
#include "kernels/x86/avx512/matmul_pack.hpp"

namespace tessera::kernels::avx512 {

constexpr std::int64_t kBlockedMr = 14;  // rows of C per micro-tile: 28 accumulators + 2 B registers of 32

// B in a tile layout (packed_weights.hpp: bf16 pairs, int8 quads): 16 units
// per 2 KiB tile, a unit's two 16-column halves 1 KiB apart. The traits of
// the bf16 and int8 kernels derive from it.
struct TileLayoutB {
  static constexpr std::int64_t kHalfBytes = 1024;
  static const char* b_row(const char* panel, std::int64_t u) { return panel + (u >> 4) * 2048 + (u & 15) * 64; }
};

// A's rows as the micro-kernel reads them in place (a_in_place): A of
// dtype t, its 32-bit units (unit_k elements each) contiguous and whole, no
// W8A8 rounding, and a micro-tile's rows spread over L1 (rows_spread_in_l1).
static inline const char* rows_of_units(const MatmulArgs& p, DType t, std::int64_t unit_k) {
  const bool rows = !p.a_q && blocked_reads_a_in_place(p.a_dtype, t, p.a_row_stride, p.a_col_stride, p.k, unit_k);
  return rows ? static_cast<const char*>(p.a) : nullptr;
}

// What the traits whose sums are f32 (f32 FMAs, bf16 dot products) share:
// nothing to prepare per panel or finish per tile, the f32 epilogue.
struct F32SumsTraits {
  static void panel_ready(const MatmulArgs&, std::int64_t, std::int64_t) {}
  static __m512 finish(__m512 acc, int) { return acc; }
  static void epilogue(const MatmulArgs& p, const float* tile, std::int64_t ld, std::int64_t rows, std::int64_t m,
                       std::int64_t n, std::int64_t n_end) {
    epilogue_tile32(p, tile, ld, rows, m, n, n_end);
  }
};

// f32 FMAs on a dense panel: row k of B is 32 floats (the f32 matmul, and
// the Winograd planes' GEMMs on weights transformed per slice).
struct F32Traits : F32SumsTraits {
  static constexpr std::int64_t kUnitK = 1, kKGrain = 1, kHalfBytes = 64;

  static const char* b_row(const char* panel, std::int64_t k) { return panel + k * kPanelCols * 4; }
  static __m512 dot(__m512 acc, float a, __m512 b) { return _mm512_fmadd_ps(_mm512_set1_ps(a), b, acc); }
  static void pack_a(const MatmulArgs& p, std::int64_t m0, std::int64_t m1, std::int64_t k0, std::int64_t kc, float* dst,
                     std::int64_t mr) {
    pack_a_f32(p, m0, m1, k0, kc, dst, mr);
  }
  static const char* b_panel(const MatmulArgs& p, std::int64_t n, std::int64_t n_end, std::int64_t k0, std::int64_t kc,
                             char* buf) {
    return reinterpret_cast<const char*>(b_panel_f32(p, n, n_end, k0, kc, reinterpret_cast<float*>(buf)));
  }
  static const char* a_in_place(const MatmulArgs& p) { return rows_of_units(p, DType::f32, kUnitK); }
};

// part[0:MR, 0:32] = (first ? 0 : part) + A[0:MR, units] x B[units, 0:32].
// A is either a packed unit-major sliver ([unit][lda], lda >= MR) or, with
// RowsA, MR rows lda units apart; B is a panel slice, one sequential stream.
template <class Traits, int MR, bool RowsA>
void blocked_micro_tile(const Traits& tr, std::int64_t units, const float* a, std::int64_t lda, const char* b, float* part,
                        std::int64_t ldp, bool first, const char* prefetch, std::int64_t prefetch_bytes) {
  __m512 acc[2 * MR];
#pragma GCC unroll 14
  for (int i = 0; i < MR; ++i) {
    acc[2 * i] = first ? _mm512_setzero_ps() : _mm512_load_ps(part + i * ldp);
    acc[2 * i + 1] = first ? _mm512_setzero_ps() : _mm512_load_ps(part + i * ldp + 16);
  }
  // Rows of A in place: five base pointers, each serving three rows as
  // base, base + L and base + 2 L (an index register scaled by 1 or 2), so
  // the 14 broadcasts need 6 registers, not 14.
  const std::int64_t row_bytes = lda * 4;
  [[maybe_unused]] const char* base[5];
  if constexpr (RowsA)
    for (int j = 0; j < 5; ++j) base[j] = reinterpret_cast<const char*>(a) + 3 * j * row_bytes;
  auto a_unit = [&](int i, std::int64_t u) {
    if constexpr (RowsA) return *reinterpret_cast<const float*>(base[i / 3] + (i % 3) * row_bytes + u * 4);
    else return a[u * lda + i];
  };
  auto step = [&](std::int64_t u) {
    const char* row = Traits::b_row(b, u);
    const __m512 b0 = _mm512_load_ps(reinterpret_cast<const float*>(row));
    const __m512 b1 = _mm512_load_ps(reinterpret_cast<const float*>(row + Traits::kHalfBytes));
#pragma GCC unroll 14
    for (int i = 0; i < MR; ++i) {
      const float av = a_unit(i, u);
      acc[2 * i] = Traits::dot(acc[2 * i], av, b0);
      acc[2 * i + 1] = Traits::dot(acc[2 * i + 1], av, b1);
    }
  };
  // Prefetches spread over the K loop (a few lines per 8 steps), so they
  // never fill the line-fill buffers and stall the FMAs.
  const std::int64_t lines = prefetch_bytes / 64, per8 = (lines + std::max<std::int64_t>(1, units / 8) - 1) / std::max<std::int64_t>(1, units / 8);
  std::int64_t u = 0, off = 0;
  for (; u + 8 <= units; u += 8) {
    for (std::int64_t j = 0; j < per8 && off < prefetch_bytes; ++j, off += 64) _mm_prefetch(prefetch + off, _MM_HINT_T0);
#pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) step(u + v);
  }
  for (; u < units; ++u) step(u);
#pragma GCC unroll 14
  for (int i = 0; i < MR; ++i) {
    _mm512_store_ps(part + i * ldp, tr.finish(acc[2 * i], 0));
    _mm512_store_ps(part + i * ldp + 16, tr.finish(acc[2 * i + 1], 1));
  }
}

template <class Traits>
using BlockedMicroTile = void (*)(const Traits&, std::int64_t, const float*, std::int64_t, const char*, float*, std::int64_t,
                                  bool, const char*, std::int64_t);

template <class Traits, bool RowsA, int... MR>
constexpr auto blocked_micro_tiles(std::integer_sequence<int, MR...>) {
  return std::array<BlockedMicroTile<Traits>, sizeof...(MR)>{blocked_micro_tile<Traits, MR, RowsA>...};
}

// Blocked GEMM for one tile of C: K in slices of t.k_block (rounded to the
// layout's grain); per slice the task's rows of A are packed once and each
// 32-column panel of B is either read in place (packed weights) or
// converted once into an L1-resident panel, then reused by every micro-tile
// of up to 14 rows (evened out: 16 rows run as 8 + 8, not 14 + 2); up to
// two micro-tiles of rows go panel after panel instead (panel_major).
// Partial sums of the slices stay in an L2-resident tile; the epilogue runs
// on each micro-tile right after its last slice.
template <class Traits>
static void blocked_gemm(Traits& tr, const MatmulArgs& p, const MatmulTiling& t, std::int64_t m0, std::int64_t m1,
                         std::int64_t n0, std::int64_t n1) {
  constexpr std::int64_t uk = Traits::kUnitK, grain = Traits::kKGrain, kRowBytes = 2 * 64;  // B bytes per unit
  static constexpr auto kPackedTiles = blocked_micro_tiles<Traits, false>(std::make_integer_sequence<int, kBlockedMr + 1>());
  static constexpr auto kRowTiles = blocked_micro_tiles<Traits, true>(std::make_integer_sequence<int, kBlockedMr + 1>());
  const std::int64_t rows = m1 - m0, kb = round_up(std::max<std::int64_t>(1, std::min(t.k_block, p.k)), grain);
  const std::int64_t slivers = (rows + kBlockedMr - 1) / kBlockedMr, mr_max = (rows + slivers - 1) / slivers;
  const std::int64_t ldp = round_up(n1 - n0, kPanelCols), kb_units = kb / uk;
  const char* a_rows = Traits::a_in_place(p);  // row m's unit u at a_rows + (m * a_row_stride + u * uk) * elem
  const std::int64_t a_elem = a_rows ? std::int64_t(bytes_of(p.a_dtype)) : 0, a_units_per_row = a_rows ? p.a_row_stride / uk : 0;
  const auto& micro_tiles = a_rows ? kRowTiles : kPackedTiles;
  const std::int64_t slices = (p.k + kb - 1) / kb, slice_floats = slivers * mr_max * kb_units;
  // Few rows with packed weights: panel after panel, each over all of K, so
  // B streams as one run of memory (the panels lie end to end) and A is
  // packed once for all of them (AMD EPYC, M = 16 cold, 1 thread,
  // alternating: bf16 +1-9 %, int8 +2-7 %, f32 even); else K slice after
  // slice, each panel's slice reused by all the task's rows.
  const bool panel_major = slivers <= 2 && slices > 1 && p.packed;
  auto* a_pack = a_rows ? nullptr
                        : static_cast<float*>(thread_scratch(ScratchSlot::a_panel, std::size_t((panel_major ? slices : 1) * slice_floats) * 4));
  auto* b_buf = static_cast<char*>(thread_scratch(ScratchSlot::b_panel, std::size_t(kb_units * kRowBytes)));
  auto* part = static_cast<float*>(thread_scratch(ScratchSlot::partial, std::size_t(rows * ldp) * sizeof(float)));
  if (p.k == 0) std::memset(part, 0, std::size_t(rows * ldp) * sizeof(float));
  // Panel n's K slice from k0 (A packed at a_slice) through every micro-tile.
  const auto panel_slice = [&](std::int64_t n, std::int64_t k0, const float* a_slice) {
    const std::int64_t kc = std::min(kb, p.k - k0), units = (kc + uk - 1) / uk;
    const char* panel = tr.b_panel(p, n, n1, k0, kc, b_buf);
    tr.panel_ready(p, n, k0);
    // Packed weights stream from L3 or memory. One or two micro-tiles of
    // rows (whole K, or panel after panel in K slices): the first streams
    // the panel from memory, 8 KiB ahead of itself (the hardware prefetcher
    // stops at page boundaries); the other finds it in L1 or L2. Before, the
    // slices went panel after panel with each micro-tile sending a share of
    // the next slice to L2, 1.05-1.2x slower (AMD EPYC Turin, 4096 x 4096
    // cold, in one process alternating, 15 rounds, time at 8 KiB over the
    // shares at 1 / 2 threads: M = 16 f32 0.96-0.97 / 0.96, bf16 0.95 /
    // 0.95, W8A8 0.91 / 0.92; M = 24 f32 0.87 / 0.88, bf16 0.91 / 0.83, W8A8
    // 0.85 / 0.87; 6 KiB a little behind, 2 and 12 KiB behind; whole K, M 8
    // and 14, 8 KiB within noise of the 4 it had). K in slices (many rows):
    // each micro-tile pulls in a share of the next panel's slice while this
    // one is hot in L1.
    const std::int64_t panel_bytes = round_up(kc, grain) / uk * kRowBytes;
    const bool packed = panel != b_buf;
    const char* next = panel;
    std::int64_t share = 0, shares = slivers;
    if (packed && (kc == p.k || panel_major)) {
      next += 8192, share = panel_bytes, shares = 1;
    } else if (packed && n + kPanelCols < n1) {
      next += padded_k(p.packed->dtype, p.packed->k) * panel_row_bytes(p.packed->dtype), share = round_up(panel_bytes / slivers, 64);
    }
    for (std::int64_t m = m0, s = 0; m < m1; m += mr_max, ++s) {
      const std::int64_t mr = std::min(mr_max, m1 - m);
      float* tile = part + (m - m0) * ldp + (n - n0);
      if (k0 + kc == p.k) prefetch_epilogue(p, mr, m, n);
      const float* a = a_rows ? reinterpret_cast<const float*>(a_rows + (m * p.a_row_stride + k0) * a_elem) : a_slice + (m - m0) * units;
      micro_tiles[mr](tr, units, a, a_rows ? a_units_per_row : mr_max, panel, tile, ldp, k0 == 0, next + s * share,
                      s < shares ? share : 0);
      if (k0 + kc == p.k) tr.epilogue(p, tile, ldp, mr, m, n, n1);
    }
  };
  if (panel_major) {
    if (!a_rows)
      for (std::int64_t j = 0; j < slices; ++j) tr.pack_a(p, m0, m1, j * kb, std::min(kb, p.k - j * kb), a_pack + j * slice_floats, mr_max);
    for (std::int64_t n = n0; n < n1; n += kPanelCols)
      for (std::int64_t j = 0; j < slices; ++j) panel_slice(n, j * kb, a_pack + j * slice_floats);
  } else {
    for (std::int64_t k0 = 0; k0 < p.k; k0 += kb) {
      if (!a_rows) tr.pack_a(p, m0, m1, k0, std::min(kb, p.k - k0), a_pack, mr_max);
      for (std::int64_t n = n0; n < n1; n += kPanelCols) panel_slice(n, k0, a_pack);
    }
  }
  if (p.k == 0)
    for (std::int64_t n = n0; n < n1; n += kPanelCols) tr.epilogue(p, part + (n - n0), ldp, rows, m0, n, n1);
  if (p.stream_c) _mm_sfence();
}

}  // namespace tessera::kernels::avx512
