#include "kernels/unary.hpp"

namespace tessera::kernels {

namespace {
bool unit_floats(const UnaryProblem& p) {
  return is_floating(p.x) && is_floating(p.y) && p.x_stride == 1 && p.y_stride == 1;
}
bool unit_floats_to_bf16(const UnaryProblem& p) { return unit_floats(p) && p.y == DType::bf16; }
ElementwiseTiling tiling(const UnaryProblem& p, const hw::Info& hw) {
  return elementwise_tiling(p.n, bytes_of(p.x) + bytes_of(p.y), hw, act_work(p.act));
}
}  // namespace

std::span<const KernelRow<UnaryFamily>> rows(UnaryFamily) {
  static const KernelRow<UnaryFamily> kRows[] = {
      {"unary_avx512_bf16", hw::Isa::avx512_bf16, unit_floats_to_bf16, tiling, avx512_bf16::unary},
      {"unary_avx512", hw::Isa::avx512, unit_floats, tiling, avx512::unary},
      {"unary_avx2", hw::Isa::avx2, unit_floats, tiling, avx2::unary},
      {"unary_ref", hw::Isa::scalar, supports_all, tiling, ref::unary},
  };
  return kRows;
}

}  // namespace tessera::kernels
