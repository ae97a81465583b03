#include "kernels/rms_norm.hpp"

namespace tessera::kernels {

std::span<const KernelRow<RmsNormFamily>> rows(RmsNormFamily) {
  static const KernelRow<RmsNormFamily> kRows[] = {
      {"rms_norm_avx512", hw::Isa::avx512, row_vectorizable, row_tiling, avx512::rms_norm},
      {"rms_norm_avx2", hw::Isa::avx2, row_vectorizable, row_tiling, avx2::rms_norm},
      {"rms_norm_ref", hw::Isa::scalar, supports_all, row_tiling, ref::rms_norm},
  };
  return kRows;
}

}  // namespace tessera::kernels
