#include <type_traits>

#include "kernels/x86/amx/gemm_driver.hpp"
#include "kernels/x86/avx512/epilogue.hpp"
#include "kernels/x86/avx512/matmul_pack.hpp"
#include "kernels/x86/avx512_bf16/bf16_b_tiles.hpp"
#include "kernels/x86/avx512_bf16/round_a_rows.hpp"

namespace tessera::kernels::amx {

namespace {

struct Bf16Traits {
  using Elem = std::uint16_t;
  static constexpr std::int64_t kKStep = kBf16KStep;

  // Rows of A rounded to bf16 into dst, zero past m1 and past kc; or read
  // in place: the rows the pre-pass rounded (a_bf16), or bf16 rows that
  // tiles can read as they are (amx_reads_a_in_place).
  static const Elem* a_rows(const MatmulArgs& p, std::int64_t m0, std::int64_t m1, std::int64_t k0, std::int64_t kc,
                            Elem* dst, std::int64_t& lda) {
    if (p.a_bf16) {
      lda = p.a_bf16_slice;
      return p.a_bf16 + (k0 / lda * p.a_bf16_rows + m0) * lda;
    }
    if (amx_reads_a_in_place(p.a_dtype, p.a_row_stride, p.a_col_stride, m1 - m0, kc)) {
      lda = p.a_row_stride;
      return static_cast<const Elem*>(p.a) + m0 * p.a_row_stride + k0;
    }
    const std::int64_t kc_pad = round_up(kc, kKStep);
    for (std::int64_t m = m0; m < m0 + round_up(m1 - m0, 16); ++m) {
      Elem* out = dst + (m - m0) * lda;
      if (m < m1) round_a_row(p, m, k0, kc, kc_pad, out);
      else std::memset(out, 0, std::size_t(kc_pad) * sizeof(Elem));
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

void round_a_rows(const MatmulArgs& p, std::int64_t m0, std::int64_t m1, void* dst, std::int64_t rows, std::int64_t slice) {
  round_a_rows_in_slices(p, m0, m1, static_cast<std::uint16_t*>(dst), rows, slice);
}

// bf16 x bf16 -> f32 on AMX tiles; see gemm_driver.hpp for the loop nest.
void matmul_bf16(const MatmulArgs& p, const MatmulTiling& t, std::int64_t m0, std::int64_t m1, std::int64_t n0,
                 std::int64_t n1) {
  Bf16Traits traits;
  amx_gemm(traits, p, t, m0, m1, n0, n1);
}

}  // namespace tessera::kernels::amx
