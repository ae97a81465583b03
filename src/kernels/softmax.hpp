#pragma once
// Softmax family over the last dim of a block of query rows:
//   y[r, :] = softmax(scale * x[r, :] + mask[r, :]) (log: log_softmax) with,
//   when causal, column c of row r visible only if c <= r + causal_offset.
//   Columns a row does not see are 0 (log: -inf); a row with no visible (or
//   no finite) logit is all 0 (log: all -inf).
#include <cstdint>
#include <span>

#include "kernels/tiling.hpp"

namespace tessera::kernels {

struct SoftmaxArgs {
  DType x_dtype, y_dtype, mask_dtype;
  std::int64_t cols;
  const void* x;
  std::int64_t x_row_stride, x_col_stride;
  const void* mask;  // nullptr: no mask
  std::int64_t mask_row_stride, mask_col_stride;
  void* y;
  std::int64_t y_row_stride, y_col_stride;
  float scale;
  bool causal;
  std::int64_t causal_offset;  // Skv - Sq: the key position of query row 0
  bool log;                    // log-softmax
  bool stream_y;               // streaming stores for y (RowTiling::stream_output)
};

struct SoftmaxFamily {
  using Problem = RowProblem;  // param: the mask's dtype (f32 when there is none)
  using Tiling = RowTiling;
  using Run = void (*)(const SoftmaxArgs&, std::int64_t r0, std::int64_t r1);
};

std::span<const KernelRow<SoftmaxFamily>> rows(SoftmaxFamily);

namespace ref { void softmax(const SoftmaxArgs& a, std::int64_t r0, std::int64_t r1); }
namespace avx2 { void softmax(const SoftmaxArgs& a, std::int64_t r0, std::int64_t r1); }
namespace avx512 { void softmax(const SoftmaxArgs& a, std::int64_t r0, std::int64_t r1); }
namespace avx512_bf16 { void softmax(const SoftmaxArgs& a, std::int64_t r0, std::int64_t r1); }

}  // namespace tessera::kernels
