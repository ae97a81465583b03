#include "kernels/norm.hpp"

namespace tessera::kernels {

namespace {
bool bf16_output(const RowProblem& p) { return row_vectorizable(p) && p.y == DType::bf16; }
}  // namespace

// Blocks of 4 rows, their gamma and beta columns a quarter of L1d: LayerNorm
// 5120 x 4096, 1 thread (AMD EPYC, Zen 4; 48 KiB of f32 row, gamma and beta
// against 32 KiB of L1d), against row by row, alternating: f32 8.0-8.5 ->
// 6.3-6.5 ms, bf16 (40 KiB) even. RMSNorm f32 (32 KiB) stays row by row:
// blocks were no faster there, and slower for bf16 rows (24 KiB).
NormOutputBlock norm_output_block(std::int64_t cols, DType v, bool beta, const hw::Info& hw) {
  const std::int64_t param_bytes = 4 * (beta ? 2 : 1);
  if (cols * (bytes_of(v) + param_bytes) <= hw.l1d_bytes) return {1, cols};
  return {kNormOutputRows, std::max<std::int64_t>(32, hw.l1d_bytes / 4 / param_bytes / 32 * 32)};
}

std::span<const KernelRow<NormFamily>> rows(NormFamily) {
  static const KernelRow<NormFamily> kRows[] = {
      {"norm_avx512_bf16", hw::Isa::avx512_bf16, bf16_output, row_tiling, avx512_bf16::norm},
      {"norm_avx512", hw::Isa::avx512, row_vectorizable, row_tiling, avx512::norm},
      {"norm_avx2", hw::Isa::avx2, row_vectorizable, row_tiling, avx2::norm},
      {"norm_ref", hw::Isa::scalar, supports_all, row_tiling, ref::norm},
  };
  return kRows;
}

}  // namespace tessera::kernels
