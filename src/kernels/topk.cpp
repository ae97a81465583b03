#include "kernels/topk.hpp"

#include <algorithm>

namespace tessera::kernels {

namespace {
// Contiguous rows of float storage, indices within 32 bits: the SIMD filter.
bool unit_rows(const TopKProblem& p) { return is_floating(p.x) && p.x_step == 1 && p.length <= (std::int64_t(1) << 32); }

// Rows per task as the row ops take them: a share per core in quarters,
// each at least ~64 KiB. (elementwise_tiling rounds shares to 64 units:
// 163 rows of a vocabulary went as tasks of 128 and 35, and 2 threads ran
// no faster than 1.)
ElementwiseTiling rows_tiling(const TopKProblem& p, const hw::Info& hw) {
  return {row_tiling({p.x, p.x, p.x, p.rows, p.length, true}, hw).rows_per_task, false};
}
}  // namespace

std::span<const KernelRow<TopKFamily>> rows(TopKFamily) {
  static const KernelRow<TopKFamily> kRows[] = {
      {"top_k_rows_avx2", hw::Isa::avx2, unit_rows, rows_tiling, avx2::top_k_rows},
      {"top_k_ref", hw::Isa::scalar, supports_all, rows_tiling, ref::top_k},
  };
  return kRows;
}

}  // namespace tessera::kernels
