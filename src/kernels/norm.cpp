#include "kernels/norm.hpp"

namespace tessera::kernels {

std::span<const KernelRow<NormFamily>> rows(NormFamily) {
  static const KernelRow<NormFamily> kRows[] = {
      {"norm_avx512", hw::Isa::avx512, row_vectorizable, row_tiling, avx512::norm},
      {"norm_avx2", hw::Isa::avx2, row_vectorizable, row_tiling, avx2::norm},
      {"norm_ref", hw::Isa::scalar, supports_all, row_tiling, ref::norm},
  };
  return kRows;
}

}  // namespace tessera::kernels
