#include "kernels/x86/amx/gemm_driver.hpp"
#include "kernels/x86/avx512/epilogue.hpp"
#include "kernels/x86/avx512/matmul_pack.hpp"

namespace tessera::kernels::amx {

namespace {

using avx512::load_a16;
using avx512::tail_mask;

// W8A8: rows of A quantized per token by the op layer's pre-pass (s8), int8
// weights (s8) per output channel; s8 x s8 -> i32 on AMX, then
// acc * a_scale[m] * w_scale[n]. Both operands are read in place as tiles.
struct Int8Traits {
  using Elem = std::int8_t;
  static constexpr std::int64_t kKStep = 64;

  static const Elem* a_rows(const MatmulArgs& p, std::int64_t m0, std::int64_t, std::int64_t k0, std::int64_t, Elem*,
                            std::int64_t& lda) {
    lda = p.a_q_stride;
    return p.a_q + m0 * p.a_q_stride + k0;
  }

  // int8 weights are stored in the tile layout: read in place.
  static const Elem* b_tiles(const MatmulArgs& p, std::int64_t n, std::int64_t, std::int64_t k0, std::int64_t, Elem*) {
    const PackedB& b = *p.packed;
    const std::int64_t steps = padded_k(b.dtype, b.k) / kKStep;
    return static_cast<const Elem*>(b.values) + ((n / kPanelCols) * steps + k0 / kKStep) * 2 * 1024;
  }

  // C tile (row r, column half h) += A tile r x B tile h. The intrinsic is an
  // asm macro that stringifies its operands: the tile numbers must be literals.
  static void dot_r0_h0() { _tile_dpbssd(0, 4, 6); }
  static void dot_r0_h1() { _tile_dpbssd(1, 4, 7); }
  static void dot_r1_h0() { _tile_dpbssd(2, 5, 6); }
  static void dot_r1_h1() { _tile_dpbssd(3, 5, 7); }

  static void finish(const MatmulArgs& p, const float* tile, std::int64_t ld, std::int64_t rows, std::int64_t m, std::int64_t n,
              std::int64_t n_end) {
    avx512::epilogue_i32_tile32(p, reinterpret_cast<const std::int32_t*>(tile), ld, rows, m, n, n_end);
  }
};

}  // namespace

// W8A8 on AMX-INT8; see gemm_driver.hpp for the loop nest.
void matmul_int8(const MatmulArgs& p, const MatmulTiling& t, std::int64_t m0, std::int64_t m1, std::int64_t n0,
                 std::int64_t n1) {
  Int8Traits traits;
  amx_gemm(traits, p, t, m0, m1, n0, n1);
}

}  // namespace tessera::kernels::amx
