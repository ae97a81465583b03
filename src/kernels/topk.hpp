#pragma once
// Top-k family: for each of n rows of `length` elements (x_step apart,
// rows x_stride apart), the k best elements in order, best first, and
// their indices along the row. Best: largest (or smallest) value; a NaN is
// larger than every number (PyTorch's rule: first when largest, last when
// smallest); equal values, -0 and +0 included, and NaNs among themselves go
// by index, lower first (ONNX TopK's rule). values take x's dtype (each the
// element's own bytes); indices are i32 or i64.
#include <cstdint>
#include <span>

#include "kernels/tiling.hpp"

namespace tessera::kernels {

struct TopKProblem {
  DType x, index;
  std::int64_t rows, length, k;
  std::int64_t x_step;
};

struct TopKArgs {
  DType x_dtype, index_dtype;
  std::int64_t n, length, k;
  bool largest;
  const void* x;
  std::int64_t x_step, x_stride;  // elements
  void* values;
  std::int64_t v_step, v_stride;
  void* indices;
  std::int64_t i_step, i_stride;
};

struct TopKFamily {
  using Problem = TopKProblem;
  using Tiling = ElementwiseTiling;  // grain: rows per task
  using Run = void (*)(const TopKArgs&);
};

std::span<const KernelRow<TopKFamily>> rows(TopKFamily);

namespace ref { void top_k(const TopKArgs& a); }
namespace avx2 { void top_k_rows(const TopKArgs& a); }

}  // namespace tessera::kernels
