#include "kernels/moe.hpp"

namespace tessera::kernels {

namespace {
bool unit_rows(const MoeCombineProblem& p) { return is_floating(p.y) && is_floating(p.out) && p.unit_stride; }

// Tokens per task as the row ops take rows, a token moving k + 1 rows (k of y read, one of out written).
ElementwiseTiling tokens_tiling(const MoeCombineProblem& p, const hw::Info& hw) {
  return {row_tiling({p.y, p.out, p.y, p.tokens, (p.k + 1) * p.hidden, true}, hw).rows_per_task, false};
}
}  // namespace

std::span<const KernelRow<MoeCombineFamily>> rows(MoeCombineFamily) {
  static const KernelRow<MoeCombineFamily> kRows[] = {
      {"moe_combine_avx2", hw::Isa::avx2, unit_rows, tokens_tiling, avx2::moe_combine},
      {"moe_combine_ref", hw::Isa::scalar, supports_all, tokens_tiling, ref::moe_combine},
  };
  return kRows;
}

}  // namespace tessera::kernels
