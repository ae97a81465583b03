#include "kernels/softmax.hpp"

namespace tessera::kernels {

std::span<const KernelRow<SoftmaxFamily>> rows(SoftmaxFamily) {
  static const KernelRow<SoftmaxFamily> kRows[] = {
      {"softmax_avx512", hw::Isa::avx512, row_vectorizable, row_tiling, avx512::softmax},
      {"softmax_avx2", hw::Isa::avx2, row_vectorizable, row_tiling, avx2::softmax},
      {"softmax_ref", hw::Isa::scalar, supports_all, row_tiling, ref::softmax},
  };
  return kRows;
}

}  // namespace tessera::kernels
