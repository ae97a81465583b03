#include "kernels/softmax.hpp"

#include "kernels/activation.hpp"

namespace tessera::kernels {

namespace {
// bf16 rows: the AVX512-BF16 build rounds with one instruction per 32
// values where AVX-512 takes several (AMD EPYC, Zen 4, bench membound large
// bf16, 1 thread, alternating binaries: softmax 8.2-10.2 -> 11.2-11.5 GB/s,
// log_softmax within noise).
bool bf16_rows(const RowProblem& p) { return row_vectorizable(p) && p.x == DType::bf16 && p.y == DType::bf16; }
// Vector instructions per 16 elements (tiling.hpp, arithmetic_bound): the
// exp's, which the max, the sum and the scaling ride along.
constexpr int kSoftmaxWork = act_work(Act::exp);
RowTiling softmax_tiling(const RowProblem& p, const hw::Info& hw) {
  return row_tiling(p, hw, kSoftmaxWork);
}
}  // namespace

std::span<const KernelRow<SoftmaxFamily>> rows(SoftmaxFamily) {
  static const KernelRow<SoftmaxFamily> kRows[] = {
      {"softmax_avx512_bf16", hw::Isa::avx512_bf16, bf16_rows, softmax_tiling, avx512_bf16::softmax},
      {"softmax_avx512", hw::Isa::avx512, row_vectorizable, softmax_tiling, avx512::softmax},
      {"softmax_avx2", hw::Isa::avx2, row_vectorizable, softmax_tiling, avx2::softmax},
      {"softmax_ref", hw::Isa::scalar, supports_all, softmax_tiling, ref::softmax},
  };
  return kRows;
}

}  // namespace tessera::kernels
