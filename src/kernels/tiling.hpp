#pragma once
// Tiling shared by the memory-bound families: elementwise ops split a flat
// run of elements, row ops (norms, softmax, reductions) split rows. Tasks
// move at least ~64 KiB so the pool's per-task cost is noise, and large
// problems get one share per core.
#include <cstdint>

#include "kernels/registry.hpp"
#include "tessera/core/dtype.hpp"

namespace tessera::kernels {

struct ElementwiseTiling {
  std::int64_t grain;  // elements per task
  // The op moves more bytes than the last-level cache holds: its output cannot
  // stay cached, so the kernels write it with streaming stores, which skip
  // reading each line before overwriting it (a third of a unary op's traffic).
  bool stream_output;
};
// Elements per task for an op over n elements moving bytes_per_element each.
ElementwiseTiling elementwise_tiling(std::int64_t n, std::int64_t bytes_per_element, const hw::Info& hw);

struct RowProblem {
  DType x, y, param;  // param: gamma's dtype
  std::int64_t rows, cols;
  bool unit_stride;   // x, y and gamma all have stride 1 along cols
};

struct RowTiling {
  std::int64_t rows_per_task;
  bool stream_output;  // as ElementwiseTiling's
};
// Rows per task so that a task moves at least ~64 KiB and each core gets a share.
RowTiling row_tiling(const RowProblem& p, const hw::Info& hw);
// Float storage everywhere and unit column strides: what the SIMD row kernels take.
bool row_vectorizable(const RowProblem& p);

}  // namespace tessera::kernels
