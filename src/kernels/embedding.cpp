#include "kernels/embedding.hpp"

namespace tessera::kernels {

namespace {
EmbeddingTiling tiling(const EmbeddingProblem&, const hw::Info&) { return {64}; }
}  // namespace

std::span<const KernelRow<EmbeddingFamily>> rows(EmbeddingFamily) {
  static const KernelRow<EmbeddingFamily> kRows[] = {
      {"embedding_ref", hw::Isa::scalar, supports_all, tiling, ref::embedding},
  };
  return kRows;
}

}  // namespace tessera::kernels
