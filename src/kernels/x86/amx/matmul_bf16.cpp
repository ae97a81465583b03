#include <type_traits>

#include "kernels/x86/amx/gemm_driver.hpp"
#include "kernels/x86/avx512/epilogue.hpp"
#include "kernels/x86/avx512/matmul_pack.hpp"

namespace tessera::kernels::amx {

namespace {

using avx512::load_a16;
using avx512::tail_mask;
using avx512::to_bf16;

struct Bf16Traits {
  using Elem = std::uint16_t;
  static constexpr std::int64_t kKStep = kBf16KStep;

  // Rows of A rounded to bf16 into dst, zero past m1 and past kc; or bf16
  // rows in place, when the tiles would read only A itself (whole 16-row
  // tiles, whole 32-deep steps) and the rows do not crowd into a few L1
  // sets: a row stride of a multiple of 1 KiB (K = 4096: 8 KiB) puts a
  // block's 32 rows in at most four set groups, and they evict each other.
  // Measured in place: K = 11008, M = 512 8-21 % faster (M = 128 2 %);
  // K = 4096, 12-19 % slower, hence the exception.
  static const Elem* a_rows(const MatmulArgs& p, std::int64_t m0, std::int64_t m1, std::int64_t k0, std::int64_t kc,
                            Elem* dst, std::int64_t& lda) {
    if (p.a_dtype == DType::bf16 && p.a_col_stride == 1 && kc % kKStep == 0 && (m1 - m0) % 16 == 0 &&
        p.a_row_stride * std::int64_t(sizeof(Elem)) % 1024 != 0) {
      lda = p.a_row_stride;
      return static_cast<const Elem*>(p.a) + m0 * p.a_row_stride + k0;
    }
    const std::int64_t kc_pad = round_up(kc, kKStep);
    for (std::int64_t m = m0; m < m0 + round_up(m1 - m0, 16); ++m) {
      Elem* out = dst + (m - m0) * lda;
      if (m >= m1) {
        std::memset(out, 0, std::size_t(kc_pad) * sizeof(Elem));
        continue;
      }
      if (p.a_dtype == DType::bf16 && p.a_col_stride == 1) {
        std::memcpy(out, static_cast<const Elem*>(p.a) + m * p.a_row_stride + k0, std::size_t(kc) * sizeof(Elem));
      } else {
        for (std::int64_t k = 0; k < kc; k += 16) {
          const __mmask16 mask = tail_mask(kc - k);
          _mm256_mask_storeu_epi16(out + k, mask, to_bf16(load_a16(p, m, k0 + k, mask)));
        }
      }
      std::memset(out + kc, 0, std::size_t(kc_pad - kc) * sizeof(Elem));
    }
    return dst;
  }

  // Word c of a bf16 tile row pair: the even row's column c, then the odd row's.
  alignas(64) static constexpr std::uint16_t kInterleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                                8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};

  // Quantized weights are dequantized to bf16 tile rows with vcvtne2ps2bf16
  // and one word shuffle (the integer rounding of bf16_b_tiles costs ~10x
  // more; its exact subnormal handling is moot for dequantized weights).
  static const Elem* b_tiles(const MatmulArgs& p, std::int64_t n, std::int64_t n_end, std::int64_t k0, std::int64_t kc,
                             Elem* buf) {
    if (!p.packed || (p.packed->dtype != DType::i8 && p.packed->dtype != DType::i4))
      return avx512::bf16_b_tiles(p, n, n_end, k0, kc, buf);
    const PackedB& b = *p.packed;
    if (b.dtype == DType::i4 && i4_groups_in_blocks(b.group_size, b.k)) return i4_b_tiles(b, n, k0, kc, buf);
    const __m512i interleave = _mm512_load_si512(kInterleave);
    avx512::BRows32 rows(p, n, n_end);
    for (std::int64_t k = 0; k < round_up(kc, kKStep); k += 2) {
      __m512 e0 = _mm512_setzero_ps(), e1 = e0, o0 = e0, o1 = e0;
      if (k < kc) rows.row(k0 + k, e0, e1);
      if (k + 1 < kc) rows.row(k0 + k + 1, o0, o1);
      Elem* tile = buf + (k / kKStep) * 2 * 512 + (k % kKStep) / 2 * 32;
      _mm512_store_si512(tile, _mm512_permutexvar_epi16(interleave, (__m512i)_mm512_cvtne2ps_pbh(o0, e0)));
      _mm512_store_si512(tile + 512, _mm512_permutexvar_epi16(interleave, (__m512i)_mm512_cvtne2ps_pbh(o1, e1)));
    }
    return buf;
  }

  // int4 weights whose groups are whole 64-byte blocks of 4 k (or one group
  // over K): each block is loaded once and gives its 4 rows of 32 columns
  // (i4_block_row), where a row at a time reloads it. k0 is a multiple of
  // 32; rows past kc are zero.
  static const Elem* i4_b_tiles(const PackedB& b, std::int64_t n, std::int64_t k0, std::int64_t kc, Elem* buf) {
    const __m512i interleave = _mm512_load_si512(kInterleave);
    const auto* blocks = static_cast<const std::uint8_t*>(b.values) + i4_byte_index(padded_k(DType::i4, b.k), k0, n);
    avx512::GroupScales scales;
    std::int64_t group = -1;
    for (std::int64_t k = 0; k < round_up(kc, kKStep); k += 4) {
      Elem* tile = buf + (k / kKStep) * 2 * 512 + (k % kKStep) / 2 * 32;  // pairs (k, k+1) and (k+2, k+3): two rows
      __m512 w[4][2] = {};
      if (k < kc) {
        if ((k0 + k) / b.group_size != group) scales.load(b, group = (k0 + k) / b.group_size, n);
        const __m512i d = _mm512_load_si512(blocks + k * 16);
        auto row = [&]<int E>(std::integral_constant<int, E>) {
          if (k + E >= kc) return;
          __m512i lo, hi;
          avx512::i4_block_row<E>(d, lo, hi);
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

  // C tile (row r, column half h) += A tile r x B tile h. The intrinsic is an
  // asm macro that stringifies its operands: the tile numbers must be literals.
  static void dot_r0_h0() { _tile_dpbf16ps(0, 4, 6); }
  static void dot_r0_h1() { _tile_dpbf16ps(1, 4, 7); }
  static void dot_r1_h0() { _tile_dpbf16ps(2, 5, 6); }
  static void dot_r1_h1() { _tile_dpbf16ps(3, 5, 7); }

  static void finish(const MatmulArgs& p, const float* tile, std::int64_t ld, std::int64_t rows, std::int64_t m,
                     std::int64_t n, std::int64_t n_end) {
    avx512::epilogue_tile32(p, tile, ld, rows, m, n, n_end);
  }
};

}  // namespace

// bf16 x bf16 -> f32 on AMX tiles; see gemm_driver.hpp for the loop nest.
void matmul_bf16(const MatmulArgs& p, const MatmulTiling& t, std::int64_t m0, std::int64_t m1, std::int64_t n0,
                 std::int64_t n1) {
  Bf16Traits traits;
  amx_gemm(traits, p, t, m0, m1, n0, n1);
}

}  // namespace tessera::kernels::amx
