#include "kernels/rope.hpp"

namespace tessera::kernels {

namespace {
RopeTiling tiling(const RopeProblem&, const hw::Info&) { return {16}; }
}  // namespace

// Only the reference so far: the vectorized rotary kernels come with the
// memory-bound family work.
std::span<const KernelRow<RopeFamily>> rows(RopeFamily) {
  static const KernelRow<RopeFamily> kRows[] = {
      {"rope_ref", hw::Isa::scalar, supports_all, tiling, ref::rope},
  };
  return kRows;
}

}  // namespace tessera::kernels
