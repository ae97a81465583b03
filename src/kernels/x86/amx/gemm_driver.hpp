#pragma once
// The loop nest the AMX matmul kernels share. Tiles: tmm0-3 accumulate a
// 32 x 32 block of C (2 x 2 tiles of 16 x 16 f32 / i32), tmm4-5 hold 16-row
// slices of A, tmm6-7 the two 16-column halves of a B panel step. A kernel
// supplies the element type through a Traits struct:
//
//   using Elem;                        // bf16 (uint16_t) or int8
//   static constexpr int64 kKStep;     // K per tile step: 32 (bf16) or 64 (int8)
//   const Elem* a_rows(p, m0, m1, k0, kc, buf, lda&);  // A's rows [m0, m1 rounded up to 16) from
//                                      // column k0, zero past K: packed into buf (row stride lda
//                                      // on entry) or in place (setting lda)
//   const Elem* b_tiles(p, n, n_end, k0, kc, buf);  // panel steps: [kc/kKStep][2 halves][16 x 64 B]
//   void dot_r0_h0() .. dot_r1_h1();   // _tile_dpbf16ps / _tile_dpbssd on C tile (r, h)
//   void finish(p, tile, ld, rows, m, n, n_end);  // accumulators (f32 or i32 bits) -> epilogue
//
// Static template code: instantiated only inside the AMX translation units.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/matmul.hpp"
#include "kernels/scratch.hpp"
#include "kernels/x86/amx/tiles.hpp"
#include "kernels/x86/avx512/epilogue.hpp"

namespace tessera::kernels::amx {

constexpr std::int64_t kTileAhead = 4;  // steps ahead for B's first fetch (measured: 2 and 8 within noise of 4)

// C[m0:m1, n0:n1] with K in slices of t.k_block (a multiple of kKStep),
// sized so that a 32-row slice of A and one B panel step fit L1 together.
// Per slice: A's rows are packed once; then for each 32-row block (its A
// tiles stay in L1) every B panel of the task is swept (from L2), the
// accumulators round-tripping through the task's f32 / i32 partial sums.
template <class Traits>
static void amx_gemm(Traits& tr, const MatmulArgs& p, const MatmulTiling& t, std::int64_t m0, std::int64_t m1,
                     std::int64_t n0, std::int64_t n1) {
  using Elem = typename Traits::Elem;
  constexpr std::int64_t ks = Traits::kKStep, tile_elems = 16 * 64 / sizeof(Elem);
  const std::int64_t rows_pad = round_up(m1 - m0, 16), panels = (n1 - n0 + kPanelCols - 1) / kPanelCols;
  const std::int64_t kb = amx_k_slice(t.k_block, p.k, ks);
  const std::int64_t ldp = panels * kPanelCols;
  auto* a_pack = static_cast<Elem*>(thread_scratch(ScratchSlot::a_panel, std::size_t(rows_pad * kb) * sizeof(Elem)));
  auto* b_buf = static_cast<Elem*>(thread_scratch(ScratchSlot::b_panel, std::size_t(kb * ldp) * sizeof(Elem)));
  // Partial sums between K slices, per 32 x 32 block of C: its four 16 x 16
  // tiles, 1 KiB each, one after another, so a block's trip to L2 and back
  // is 4 KiB of consecutive lines (with C's row stride, each tile row was a
  // line of its own, 1 KiB from the next). The last slice stores to `done`,
  // row-major and L1-hot, for the epilogue.
  auto* part = static_cast<float*>(thread_scratch(ScratchSlot::partial, std::size_t(round_up(rows_pad, 32) * ldp) * sizeof(float)));
  alignas(64) float done[32 * kPanelCols];
  constexpr std::int64_t done_bytes = kPanelCols * 4, tile_floats = 256;
  // Any n_block a tiling (or the tuner) picks: the table lives in scratch.
  auto** b_panel = static_cast<const Elem**>(thread_scratch(ScratchSlot::panel_table, std::size_t(panels) * sizeof(void*)));
  configure_tiles();
  if (p.k == 0) std::memset(done, 0, sizeof(done));
  for (std::int64_t k0 = 0; k0 < std::max<std::int64_t>(p.k, 1); k0 += kb) {
    const std::int64_t kc = std::min(kb, p.k - k0), steps = round_up(kc, ks) / ks;
    const bool first = k0 == 0, last = k0 + kb >= p.k;
    std::int64_t lda = kb;  // elements
    const Elem* a_base = nullptr;
    if (p.k > 0) {
      a_base = tr.a_rows(p, m0, m1, k0, kc, a_pack, lda);
      for (std::int64_t j = 0; j < panels; ++j)
        b_panel[j] = tr.b_tiles(p, n0 + j * kPanelCols, n1, k0, kc, b_buf + j * kb * kPanelCols);
    }
    for (std::int64_t m = 0; m < rows_pad; m += 32) {
      const bool two = m + 16 < rows_pad;  // a second 16-row tile of A
      const Elem* a = p.k > 0 ? a_base + m * lda : nullptr;
      const std::int64_t lda_bytes = lda * std::int64_t(sizeof(Elem));
      for (std::int64_t j = 0; j < panels; ++j) {
        float* c = part + ((m / 32) * panels + j) * 4 * tile_floats;
        const std::int64_t rows = std::min<std::int64_t>(32, (m1 - m0) - m);
        if (last && rows > 0) prefetch_epilogue(p, rows, m0 + m, n0 + j * kPanelCols);
        if (p.k > 0) {
          if (first) {
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
          } else {
            _tile_loadd(0, c, 64);
            _tile_loadd(1, c + tile_floats, 64);
            if (two) {
              _tile_loadd(2, c + 2 * tile_floats, 64);
              _tile_loadd(3, c + 3 * tile_floats, 64);
            }
          }
          for (std::int64_t s = 0; s < steps; ++s) {
            const Elem* bs = b_panel[j] + s * 2 * tile_elems;
            // The first row block of a K slice meets B's tiles as they come
            // from L3, and a tile load that misses stalls the TMUL: they are
            // fetched into L1 four steps ahead (the next panel's first ones
            // at the end of this one). The other row blocks find them in L2.
            // Measured: M = 128 and 512 (bf16) 3-12 % faster.
            if (m == 0) {
              const std::int64_t t = s + kTileAhead;
              const Elem* ahead = t < steps ? b_panel[j] + t * 2 * tile_elems
                                  : j + 1 < panels ? b_panel[j + 1] + (t - steps) * 2 * tile_elems
                                                   : nullptr;
              if (ahead)
                for (int line = 0; line < 32; ++line) _mm_prefetch(reinterpret_cast<const char*>(ahead) + 64 * line, _MM_HINT_T0);
            }
            _tile_loadd(6, bs, 64);
            _tile_loadd(7, bs + tile_elems, 64);
            _tile_loadd(4, a + s * ks, lda_bytes);
            Traits::dot_r0_h0();
            Traits::dot_r0_h1();
            if (two) {
              _tile_loadd(5, a + 16 * lda + s * ks, lda_bytes);
              Traits::dot_r1_h0();
              Traits::dot_r1_h1();
            }
          }
          // Tile (r, h) at dst + r * lower + h * right, rows `stride` bytes apart.
          float* dst = last ? done : c;
          const std::int64_t right = last ? 16 : tile_floats, lower = last ? 16 * kPanelCols : 2 * tile_floats;
          const std::int64_t stride = last ? done_bytes : 64;
          _tile_stored(0, dst, stride);
          _tile_stored(1, dst + right, stride);
          if (two) {
            _tile_stored(2, dst + lower, stride);
            _tile_stored(3, dst + lower + right, stride);
          }
        }
        if (last && rows > 0) tr.finish(p, done, kPanelCols, rows, m0 + m, n0 + j * kPanelCols, n1);
      }
    }
  }
  _tile_release();
  if (p.stream_c) _mm_sfence();
}

}  // namespace tessera::kernels::amx
