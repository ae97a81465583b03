#include "kernels/norm.hpp"

namespace tessera::kernels {

namespace {
bool bf16_output(const RowProblem& p) { return row_vectorizable(p) && p.y == DType::bf16; }
}  // namespace

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
