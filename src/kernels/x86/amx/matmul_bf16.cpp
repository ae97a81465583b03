#include <type_traits>

#include "kernels/x86/amx/gemm_driver.hpp"
#include "kernels/x86/avx512/epilogue.hpp"
#include "kernels/x86/avx512/matmul_pack.hpp"
#include "kernels/x86/avx512_bf16/bf16_b_tiles.hpp"

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

  static const Elem* b_tiles(const MatmulArgs& p, std::int64_t n, std::int64_t n_end, std::int64_t k0, std::int64_t kc,
                             Elem* buf) {
    return avx512_bf16::bf16_tiles_of(p, n, n_end, k0, kc, buf);
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
