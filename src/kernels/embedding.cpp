#include "kernels/embedding.hpp"

namespace tessera::kernels {

namespace {
EmbeddingTiling tiling(const EmbeddingProblem& p, const hw::Info& hw) {
  return {64, elementwise_tiling(p.n, bytes_of(p.out), hw).stream_output};
}
bool whole_rows(const EmbeddingProblem& p) { return p.unit_stride; }
}  // namespace

std::span<const KernelRow<EmbeddingFamily>> rows(EmbeddingFamily) {
  static const KernelRow<EmbeddingFamily> kRows[] = {
      {"embedding_avx2", hw::Isa::avx2, whole_rows, tiling, avx2::embedding},
      {"embedding_ref", hw::Isa::scalar, supports_all, tiling, ref::embedding},
  };
  return kRows;
}

}  // namespace tessera::kernels
