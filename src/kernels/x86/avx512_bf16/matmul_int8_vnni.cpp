#include <algorithm>

#include "kernels/scratch.hpp"
#include "kernels/x86/avx512/epilogue.hpp"
#include "kernels/x86/avx512/matmul_pack.hpp"

namespace tessera::kernels::avx512_bf16 {

namespace {

using namespace avx512;  // this level extends AVX-512: its helpers apply as they are

constexpr std::int64_t kMr = 14;

// C[0:MR, 0:32] over all of K with vpdpbusd (u8 x s8): A's int8 steps are
// offset by +128 to be unsigned, and the offset is taken back with the
// column sums of B, which one more vpdpbusd per B row (against all-ones)
// accumulates alongside. Each 64-byte tile row holds four k of 16 columns.
template <int MR>
void micro_tile(std::int64_t quads, const std::uint32_t* a, std::int64_t lda, const std::int8_t* b, std::int32_t* tile) {
  __m512i acc[2 * MR], sum0 = _mm512_setzero_si512(), sum1 = sum0;
  for (__m512i& v : acc) v = _mm512_setzero_si512();
  const __m512i ones = _mm512_set1_epi8(1);
  for (std::int64_t q = 0; q < quads; ++q) {
    // Tile layout: 16 quads per 1 KiB tile, the two column halves side by side.
    const std::int8_t* row = b + (q >> 4) * 2048 + (q & 15) * 64;
    const __m512i b0 = _mm512_load_si512(row), b1 = _mm512_load_si512(row + 1024);
    sum0 = _mm512_dpbusd_epi32(sum0, ones, b0);
    sum1 = _mm512_dpbusd_epi32(sum1, ones, b1);
#pragma GCC unroll 14
    for (int i = 0; i < MR; ++i) {
      const __m512i av = _mm512_set1_epi32(int(a[i * lda + q]));
      acc[2 * i] = _mm512_dpbusd_epi32(acc[2 * i], av, b0);
      acc[2 * i + 1] = _mm512_dpbusd_epi32(acc[2 * i + 1], av, b1);
    }
  }
  const __m512i off0 = _mm512_slli_epi32(sum0, 7), off1 = _mm512_slli_epi32(sum1, 7);  // 128 * column sums
  for (int i = 0; i < MR; ++i) {
    _mm512_store_si512(tile + i * kPanelCols, _mm512_sub_epi32(acc[2 * i], off0));
    _mm512_store_si512(tile + i * kPanelCols + 16, _mm512_sub_epi32(acc[2 * i + 1], off1));
  }
}

using MicroTile = void (*)(std::int64_t, const std::uint32_t*, std::int64_t, const std::int8_t*, std::int32_t*);
constexpr MicroTile kMicroTiles[kMr + 1] = {nullptr,        micro_tile<1>,  micro_tile<2>,  micro_tile<3>,  micro_tile<4>,
                                            micro_tile<5>,  micro_tile<6>,  micro_tile<7>,  micro_tile<8>,  micro_tile<9>,
                                            micro_tile<10>, micro_tile<11>, micro_tile<12>, micro_tile<13>, micro_tile<14>};

}  // namespace

// W8A8 with AVX512-VNNI where AMX is absent: A comes quantized (the op's
// pre-pass); its rows are made unsigned once per task; int8 weights are read
// in place in the tile layout; exact i32 sums, then acc * a_scale * w_scale
// and the epilogue.
void matmul_int8_vnni(const MatmulArgs& p, const MatmulTiling&, std::int64_t m0, std::int64_t m1, std::int64_t n0,
                      std::int64_t n1) {
  const PackedB& b = *p.packed;
  const std::int64_t k_pad = padded_k(DType::i8, std::max<std::int64_t>(p.k, 1)), quads = k_pad / 4;
  const std::uint8_t* a = unsigned_a_rows(p, m0, m1, k_pad);
  auto* tile = static_cast<std::int32_t*>(thread_scratch(ScratchSlot::partial, std::size_t(kMr * kPanelCols) * 4));
  for (std::int64_t n = n0; n < n1; n += kPanelCols) {
    const auto* panel = static_cast<const std::int8_t*>(b.values) + (n / kPanelCols) * k_pad * kPanelCols;
    for (std::int64_t m = m0; m < m1; m += kMr) {
      const std::int64_t mr = std::min(kMr, m1 - m);
      kMicroTiles[mr](p.k > 0 ? quads : 0, reinterpret_cast<const std::uint32_t*>(a + (m - m0) * k_pad), quads, panel, tile);
      epilogue_i32_tile32(p, tile, kPanelCols, mr, m, n, n1);
    }
  }
}

}  // namespace tessera::kernels::avx512_bf16
