#pragma once
// B in the bf16 tile layout for the bf16 matmul kernels built with
// AVX512-BF16 (the AMX tiles and the vdpbf16ps dot products): quantized
// weights (int8, int4) are dequantized to bf16 tile rows with
// vcvtne2ps2bf16 and one word shuffle, where the integer rounding of
// avx512::bf16_b_tiles costs ~10x more (its exact subnormal handling is moot
// for dequantized weights). Static, like vec.hpp.
#include <type_traits>

#include "kernels/x86/avx512/matmul_pack.hpp"

namespace tessera::kernels::avx512_bf16 {

// Word c of a bf16 tile row pair: the even row's column c, then the odd row's.
alignas(64) static constexpr std::uint16_t kTileInterleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                                  8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};

// Byte E of each 32-bit lane of int8 tile rows (four k of a column), as
// integers: shifted to the top, then down with its sign (or without, for
// weights stored unsigned with zero points), by constant counts.
template <int E>
static inline __m512i i8_lane_byte(__m512i d, bool is_unsigned) {
  const __m512i top = E == 3 ? d : _mm512_slli_epi32(d, 8 * (3 - E));
  return is_unsigned ? _mm512_srli_epi32(top, 24) : _mm512_srai_epi32(top, 24);
}

// Quantized weights whose groups are whole quads of k (or one group over
// K), D int4 or int8: each 64-byte block of 4 k is loaded once and gives
// its 4 rows (int4: one block of 32 columns, i4_block_row; int8: the two
// 16-column halves of a tile row, 1 KiB apart), where a row at a time
// reloads it. Row by row (BRows32: the dtype, the group and the address
// worked out again per row, a variable shift per lane) the int8 tiles took
// a quarter of a weight-only int8 linear at M = 128 (AMD EPYC Turin, K = N
// = 4096, 1 thread). k0 is a multiple of 32; rows past kc are zero.
template <DType D>
static inline const std::uint16_t* quad_b_tiles(const PackedB& b, std::int64_t n, std::int64_t k0, std::int64_t kc,
                                                std::uint16_t* buf) {
  const __m512i interleave = _mm512_load_si512(kTileInterleave);
  const auto* values = static_cast<const std::uint8_t*>(b.values);
  // int4: the blocks of k0 on, 64 bytes per 4 k; int8: the panel's tiles, 2 KiB per 64 k.
  const std::uint8_t* base = D == DType::i4 ? values + i4_byte_index(padded_k(D, b.k), k0, n)
                                            : values + (n / kPanelCols) * (padded_k(D, b.k) / kI8KStep) * 2048;
  const bool is_unsigned = b.zeros != nullptr;
  avx512::GroupScales scales;
  std::int64_t group = -1;
  for (std::int64_t k = 0; k < round_up(kc, kBf16KStep); k += 4) {
    std::uint16_t* tile = buf + (k / kBf16KStep) * 2 * 512 + (k % kBf16KStep) / 2 * 32;  // pairs (k, k+1) and (k+2, k+3): two rows
    __m512 w[4][2] = {};
    if (k < kc) {
      if ((k0 + k) / b.group_size != group) scales.load(b, group = (k0 + k) / b.group_size, n);
      __m512i d[2];
      if constexpr (D == DType::i4) {
        d[0] = _mm512_load_si512(base + k * 16);
      } else {
        const std::uint8_t* at = base + (k0 + k) / kI8KStep * 2048 + (k0 + k) % kI8KStep / 4 * 64;
        d[0] = _mm512_load_si512(at), d[1] = _mm512_load_si512(at + 1024);
      }
      auto row = [&]<int E>(std::integral_constant<int, E>) {
        if (k + E >= kc) return;
        __m512i lo, hi;
        if constexpr (D == DType::i4) avx512::i4_block_row<E>(d[0], lo, hi);
        else lo = i8_lane_byte<E>(d[0], is_unsigned), hi = i8_lane_byte<E>(d[1], is_unsigned);
        scales.apply(lo, hi, w[E][0], w[E][1]);
      };
      row(std::integral_constant<int, 0>()), row(std::integral_constant<int, 1>());
      row(std::integral_constant<int, 2>()), row(std::integral_constant<int, 3>());
    }
    for (int pair = 0; pair < 2; ++pair)
      for (int h = 0; h < 2; ++h)
        _mm512_store_si512(tile + pair * 32 + h * 512,
                           _mm512_permutexvar_epi16(interleave, (__m512i)_mm512_cvtne2ps_pbh(w[2 * pair + 1][h], w[2 * pair][h])));
  }
  return buf;
}

// B[k0 : k0 + kc, n : n + 32] in the bf16 tile layout: packed bf16 weights
// in place, quantized ones dequantized into buf as above, anything else by
// avx512::bf16_b_tiles. k0 is a multiple of 32.
static inline const std::uint16_t* bf16_tiles_of(const MatmulArgs& p, std::int64_t n, std::int64_t n_end, std::int64_t k0,
                                                 std::int64_t kc, std::uint16_t* buf) {
  if (!p.packed || (p.packed->dtype != DType::i8 && p.packed->dtype != DType::i4))
    return avx512::bf16_b_tiles(p, n, n_end, k0, kc, buf);
  const PackedB& b = *p.packed;
  if (groups_in_quads(b.group_size, b.k))
    return b.dtype == DType::i4 ? quad_b_tiles<DType::i4>(b, n, k0, kc, buf) : quad_b_tiles<DType::i8>(b, n, k0, kc, buf);
  const __m512i interleave = _mm512_load_si512(kTileInterleave);
  avx512::BRows32 rows(p, n, n_end);
  for (std::int64_t k = 0; k < round_up(kc, kBf16KStep); k += 2) {
    __m512 e0 = _mm512_setzero_ps(), e1 = e0, o0 = e0, o1 = e0;
    if (k < kc) rows.row(k0 + k, e0, e1);
    if (k + 1 < kc) rows.row(k0 + k + 1, o0, o1);
    std::uint16_t* tile = buf + (k / kBf16KStep) * 2 * 512 + (k % kBf16KStep) / 2 * 32;
    _mm512_store_si512(tile, _mm512_permutexvar_epi16(interleave, (__m512i)_mm512_cvtne2ps_pbh(o0, e0)));
    _mm512_store_si512(tile + 512, _mm512_permutexvar_epi16(interleave, (__m512i)_mm512_cvtne2ps_pbh(o1, e1)));
  }
  return buf;
}

}  // namespace tessera::kernels::avx512_bf16
