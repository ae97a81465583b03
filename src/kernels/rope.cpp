#include "kernels/rope.hpp"

namespace tessera::kernels {

namespace {
RopeTiling tiling(const RopeProblem&, const hw::Info&) { return {16}; }
bool vectorizable(const RopeProblem& p) { return is_floating(p.x) && is_floating(p.y) && p.unit_stride; }
}  // namespace

std::span<const KernelRow<RopeFamily>> rows(RopeFamily) {
  static const KernelRow<RopeFamily> kRows[] = {
      {"rope_avx512", hw::Isa::avx512, vectorizable, tiling, avx512::rope},
      {"rope_avx2", hw::Isa::avx2, vectorizable, tiling, avx2::rope},
      {"rope_ref", hw::Isa::scalar, supports_all, tiling, ref::rope},
  };
  return kRows;
}

}  // namespace tessera::kernels
