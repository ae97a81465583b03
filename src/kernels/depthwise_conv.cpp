#include "kernels/depthwise_conv.hpp"

namespace tessera::kernels {

namespace {

bool float_operands(const DepthwiseProblem& p) {
  return is_floating(p.x) && is_floating(p.y) && is_floating(p.bias) && is_floating(p.residual);
}

// Split as a row op over output rows of OW * C elements. The taps make a
// row heavier than a norm's, which only makes its minimum task more than enough.
RowTiling depthwise_tiling(const DepthwiseProblem& p, const hw::Info& hw) {
  return row_tiling(RowProblem{p.x, p.y, DType::f32, p.rows, p.out_width * p.channels, true}, hw);
}

}  // namespace

std::span<const KernelRow<DepthwiseFamily>> rows(DepthwiseFamily) {
  static const KernelRow<DepthwiseFamily> kRows[] = {
      {"depthwise_conv_avx512", hw::Isa::avx512, float_operands, depthwise_tiling, avx512::depthwise_conv},
      {"depthwise_conv_avx2", hw::Isa::avx2, float_operands, depthwise_tiling, avx2::depthwise_conv},
      {"depthwise_conv_ref", hw::Isa::scalar, supports_all, depthwise_tiling, ref::depthwise_conv},
  };
  return kRows;
}

}  // namespace tessera::kernels
