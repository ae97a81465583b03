#include <algorithm>

#include "kernels/scratch.hpp"
#include "kernels/x86/avx512/epilogue.hpp"
#include "kernels/x86/avx512/matmul_pack.hpp"

namespace tessera::kernels::avx512_bf16 {

namespace {

using namespace avx512;  // this level extends AVX-512: its helpers apply as they are

constexpr std::int64_t kMr = 14;  // 28 accumulators + the two B rows

// C[0:MR, 0:32] over all of K with vdpbf16ps: each 64-byte row of a B tile
// holds the pairs (k, k+1) of 16 columns, and one 32-bit broadcast of A's
// pair (a[k], a[k+1]) multiplies all of them. A rows are bf16, lda apart.
template <int MR>
void micro_tile(std::int64_t pairs, const std::uint32_t* a, std::int64_t lda, const std::uint16_t* b, float* tile) {
  __m512 acc[2 * MR];
  for (__m512& v : acc) v = _mm512_setzero_ps();
  for (std::int64_t kk = 0; kk < pairs; ++kk) {
    // Tile layout: 16 pairs per 1 KiB tile, the two column halves side by side.
    const std::uint16_t* row = b + (kk >> 4) * 1024 + (kk & 15) * 32;
    const __m512bh b0 = (__m512bh)_mm512_load_si512(row), b1 = (__m512bh)_mm512_load_si512(row + 512);
#pragma GCC unroll 14
    for (int i = 0; i < MR; ++i) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(int(a[i * lda + kk]));
      acc[2 * i] = _mm512_dpbf16_ps(acc[2 * i], av, b0);
      acc[2 * i + 1] = _mm512_dpbf16_ps(acc[2 * i + 1], av, b1);
    }
  }
  for (int i = 0; i < MR; ++i) {
    _mm512_store_ps(tile + i * kPanelCols, acc[2 * i]);
    _mm512_store_ps(tile + i * kPanelCols + 16, acc[2 * i + 1]);
  }
}

using MicroTile = void (*)(std::int64_t, const std::uint32_t*, std::int64_t, const std::uint16_t*, float*);
constexpr MicroTile kMicroTiles[kMr + 1] = {nullptr,        micro_tile<1>,  micro_tile<2>,  micro_tile<3>,  micro_tile<4>,
                                            micro_tile<5>,  micro_tile<6>,  micro_tile<7>,  micro_tile<8>,  micro_tile<9>,
                                            micro_tile<10>, micro_tile<11>, micro_tile<12>, micro_tile<13>, micro_tile<14>};

}  // namespace

// bf16 x bf16 -> f32 with AVX512-BF16 where AMX is absent: A's rows rounded
// to bf16 once per task, B panels in the tile layout (packed bf16 weights in
// place), each panel swept over all of K by every 14-row micro-tile.
void matmul_bf16_dot(const MatmulArgs& p, const MatmulTiling&, std::int64_t m0, std::int64_t m1, std::int64_t n0,
                     std::int64_t n1) {
  const std::int64_t rows = m1 - m0, k_pad = round_up(std::max<std::int64_t>(p.k, 1), kBf16KStep), pairs = k_pad / 2;
  auto* a = static_cast<std::uint16_t*>(thread_scratch(ScratchSlot::a_panel, std::size_t(rows * k_pad) * 2));
  auto* b_buf = static_cast<std::uint16_t*>(thread_scratch(ScratchSlot::b_panel, std::size_t(k_pad * kPanelCols) * 2));
  auto* tile = static_cast<float*>(thread_scratch(ScratchSlot::partial, std::size_t(kMr * kPanelCols) * sizeof(float)));
  for (std::int64_t m = m0; m < m1; ++m)
    for (std::int64_t k = 0; k < k_pad; k += 16) {
      const __mmask16 valid = tail_mask(std::max<std::int64_t>(0, p.k - k));  // zero past K
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(a + (m - m0) * k_pad + k), to_bf16(load_a16(p, m, k, valid)));
    }
  for (std::int64_t n = n0; n < n1; n += kPanelCols) {
    const std::uint16_t* panel = bf16_b_tiles(p, n, n1, 0, std::max<std::int64_t>(p.k, 1), b_buf);
    for (std::int64_t m = m0; m < m1; m += kMr) {
      const std::int64_t mr = std::min(kMr, m1 - m);
      kMicroTiles[mr](p.k > 0 ? pairs : 0, reinterpret_cast<const std::uint32_t*>(a + (m - m0) * k_pad), pairs, panel, tile);
      epilogue_tile32(p, tile, kPanelCols, mr, m, n, n1);
    }
  }
}

}  // namespace tessera::kernels::avx512_bf16
