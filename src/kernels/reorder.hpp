#pragma once
// Reorder family: y[r, c] = x[r, c] over one 2-D block [rows, cols] with any
// element strides, converting between float storage types (round to nearest
// even) and moving the bytes of one dtype unchanged. The op layer lays the
// block out so that, where the strides allow, both x and y have stride 1
// along cols (a copy of runs) or x has stride 1 along cols and y along rows
// (a transpose); anything else is `strided`.
#include <cstdint>
#include <span>

#include "kernels/tiling.hpp"

namespace tessera::kernels {

enum class ReorderMode { copy, transpose, strided };

struct ReorderProblem {
  ReorderMode mode;
  DType x, y;
  std::int64_t rows, cols;  // the plane the blocks tile (the op's outer dims excluded)
  std::int64_t n;           // elements in the whole op
};

// copy: x_col_stride == y_col_stride == 1. transpose: x_col_stride == 1 and
// y_row_stride == 1.
struct ReorderArgs {
  DType x_dtype, y_dtype;
  std::int64_t rows, cols;
  const void* x;
  std::int64_t x_row_stride, x_col_stride;
  void* y;
  std::int64_t y_row_stride, y_col_stride;
  bool stream_y;  // streaming stores for y (ReorderTiling::stream_output)
};

struct ReorderTiling {
  // One kernel call's block. Transposes in cache: an x tile and a y tile fit
  // in half of L1 together, so the lines a block touches are read and written
  // once. Transposes larger than the L3: strips of a few rows of x, read as
  // runs, whose y lines are each written whole by streaming stores.
  std::int64_t block_rows, block_cols;
  std::int64_t blocks_per_task;
  bool stream_output;  // as ElementwiseTiling's
};

struct ReorderFamily {
  using Problem = ReorderProblem;
  using Tiling = ReorderTiling;
  using Run = void (*)(const ReorderArgs&);
};

std::span<const KernelRow<ReorderFamily>> rows(ReorderFamily);

namespace ref { void reorder(const ReorderArgs& a); }
namespace avx2 { void reorder(const ReorderArgs& a); }
namespace avx512 { void reorder(const ReorderArgs& a); }

}  // namespace tessera::kernels
