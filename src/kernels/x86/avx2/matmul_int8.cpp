#include <algorithm>
#include <cstring>

#include "kernels/scratch.hpp"
#include "kernels/x86/avx2/epilogue.hpp"

namespace tessera::kernels::avx2 {

namespace {

// Rows of C per micro-tile: 2 x 32 takes 8 accumulators, the 2 rows' A
// broadcasts, a B vector, its magnitude, a product and the ones.
constexpr std::int64_t kMr = 2;

// part[0:MR, 0:32] (int32) = (first ? 0 : part) + A[0:MR, 0:4u) x
// B[0:4u, 0:32) for u = `units` quads of k. A: MR quantized rows lda bytes
// apart, read in place (one 32-bit broadcast per quad); B: a panel slice in
// the int8 tile layout (packed_weights.hpp: per quad a 64-byte row of 16
// columns, the other 16 columns 1 KiB on, 16 quads a tile).
//
// AVX2 has no vpdpbusd. vpmaddubsw (u8 x s8, pairs summed into saturating
// int16) is exact here as |b| x (a sign(b)): both factors within 127 (A and
// the weights are quantized to [-127, 127]), a pair's sum within 2 x 127^2
// < 2^15; vpmaddwd with ones then sums the pairs into int32. The usual form
// without VNNI, vpmaddubsw on (a + 128) x b, is a step shorter but
// saturates for large pairs (oneDNN's "Nuances of int8 computations"
// documents that for its own kernels).
template <int MR>
void micro_tile(std::int64_t units, const std::int8_t* a, std::int64_t lda, const char* b, std::int32_t* part,
                std::int64_t ldp, bool first) {
  // Sums from zero, part added at the end: with part's values as the start
  // GCC kept a stack copy of every accumulator, stored each step.
  __m256i acc[MR][4];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < 4; ++j) acc[i][j] = _mm256_setzero_si256();
  const __m256i ones = _mm256_set1_epi16(1);
  for (std::int64_t u0 = 0; u0 < units; u0 += 16) {
    const char* tile = b + u0 / 16 * 2048;
    const std::int64_t quads = std::min<std::int64_t>(16, units - u0);
    for (std::int64_t q = 0; q < quads; ++q) {
      const char* row = tile + q * 64;
      __m256i av[MR];
      for (int i = 0; i < MR; ++i) {
        std::int32_t quad;
        std::memcpy(&quad, a + i * lda + 4 * (u0 + q), sizeof(quad));
        av[i] = _mm256_set1_epi32(quad);
      }
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        const __m256i bv = _mm256_load_si256(reinterpret_cast<const __m256i*>(row + (j >> 1) * 1024 + (j & 1) * 32));
        const __m256i mag = _mm256_abs_epi8(bv);
        for (int i = 0; i < MR; ++i)
          acc[i][j] = _mm256_add_epi32(acc[i][j], _mm256_madd_epi16(_mm256_maddubs_epi16(mag, _mm256_sign_epi8(av[i], bv)), ones));
      }
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < 4; ++j) {
      auto* out = reinterpret_cast<__m256i*>(part + i * ldp + 8 * j);
      _mm256_store_si256(out, first ? acc[i][j] : _mm256_add_epi32(acc[i][j], _mm256_load_si256(out)));
    }
}

using MicroTile = void (*)(std::int64_t, const std::int8_t*, std::int64_t, const char*, std::int32_t*, std::int64_t, bool);
constexpr MicroTile kMicroTiles[kMr + 1] = {nullptr, micro_tile<1>, micro_tile<2>};

}  // namespace

// W8A8 where neither AMX nor VNNI is present: exact int32 sums of the
// quantized rows of A and the int8 weights, then acc * a_scale * w_scale and
// the epilogue. K in slices of t.k_block (whole tiles of kI8KStep); per
// slice each 32-column panel of the packed weights is read in place and
// reused from L1 by every 2-row micro-tile of the task; the int32 partial
// sums of the slices stay in an L2-resident tile.
void matmul_int8(const MatmulArgs& p, const MatmulTiling& t, std::int64_t m0, std::int64_t m1, std::int64_t n0,
                 std::int64_t n1) {
  const PackedB& b = *p.packed;
  const std::int64_t rows = m1 - m0, ldp = round_up(n1 - n0, kPanelCols), k_pad = padded_k(b.dtype, b.k);
  const std::int64_t kb = round_up(std::max<std::int64_t>(1, std::min(t.k_block, p.k)), kI8KStep);
  auto* part = static_cast<std::int32_t*>(thread_scratch(ScratchSlot::partial, std::size_t(rows * ldp) * sizeof(std::int32_t)));
  if (p.k == 0) std::memset(part, 0, std::size_t(rows * ldp) * sizeof(std::int32_t));
  for (std::int64_t k0 = 0; k0 < std::max<std::int64_t>(p.k, 1); k0 += kb) {
    const std::int64_t units = (std::min(kb, p.k - k0) + 3) / 4;
    const bool first = k0 == 0, last = k0 + kb >= p.k;
    for (std::int64_t n = n0; n < n1; n += kPanelCols) {
      const char* panel = static_cast<const char*>(b.values) + (n / kPanelCols * k_pad + k0) * kPanelCols;
      for (std::int64_t m = m0; m < m1; m += kMr) {
        const std::int64_t mr = std::min(kMr, m1 - m);
        std::int32_t* tile = part + (m - m0) * ldp + (n - n0);
        if (units > 0) kMicroTiles[mr](units, p.a_q + m * p.a_q_stride + k0, p.a_q_stride, panel, tile, ldp, first);
        if (last) epilogue_i32_tile32(p, tile, ldp, mr, m, n, n1);
      }
    }
  }
}

}  // namespace tessera::kernels::avx2
