#pragma once
// Reductions (ONNX's Reduce* family): y = sum, mean, max, min, product,
// L1 norm (sum of |x|), L2 norm (sqrt of the sum of squares), sum of
// squares, log of the sum, or log-sum-exp (max + log(sum of exp(x - max)):
// no overflow) of x over `axes` (negative count from the end, as in Python;
// none named: all of x, as ONNX's ReduceSum without axes), or the index of
// x's largest / smallest element along one axis. y's shape is x's without the reduced dims, or with them as 1 when
// keep_dims. Float storage in and out (indices: integers); sums add up in
// f64 (in short f32 blocks first: within f32 tolerance of the exact sum),
// squares for L2 and sums of squares are f32 (past |x| ~ 1.8e19 they
// overflow, as in PyTorch), products multiply in f64 (over axes that take
// several passes, each pass's partial products are f32), max and min
// compare in f32 and propagate NaN
// (a NaN among the reduced elements gives NaN; log-sum-exp too, and an
// infinite largest element gives itself). Axes that x's strides merge (every axis of a
// contiguous x, NCHW's H and W) reduce in one pass; others in a pass per
// merged group, the partial results (f32) in the plan's workspace.
// No elements to reduce: the sums give 0 (log_sum: -inf), prod 1,
// log_sum_exp -inf; mean, max and min have no value and are an error.
// argmax / argmin (ONNX ArgMax / ArgMin, greedy sampling over logits): y
// (i64 or i32) holds the index along the axis of the first largest /
// smallest value, a NaN counting as both (numpy's and PyTorch's rule).
#include <string_view>
#include <vector>

#include "tessera/ops/plan.hpp"
#include "tessera/runtime/context.hpp"

namespace tessera::ops {

enum class ReduceOp { sum, mean, max, min, prod, l1, l2, sum_square, log_sum, log_sum_exp, argmax, argmin };
std::string_view to_string(ReduceOp op);

struct ReduceAttrs {
  ReduceOp op;
  std::vector<int> axes;  // each at most once; argmax / argmin: exactly one
  bool keep_dims = false;
};

struct Reduce {
  // Inputs {x}, outputs {y}; y may not overlap x. Several passes take a
  // workspace (workspace_bytes()).
  static Result<PlanPtr> plan(Context& ctx, const TensorDesc& x, const TensorDesc& y, const ReduceAttrs& attrs);
};

Status reduce(Stream& stream, const Tensor& x, const Tensor& y, const ReduceAttrs& attrs);

}  // namespace tessera::ops
