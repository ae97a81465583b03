#pragma once
// Reductions along one axis: y = sum, mean, max or min of x over `axis` (negative
// counts from the end, as in Python), or the index of its largest / smallest
// element. y's shape is x's without that dim, or with it as 1 when
// keep_dims. Float storage in and out (indices: integers); sums add up in f64
// (in short f32 blocks first: within f32 tolerance of the exact sum), max and min compare in f32 and propagate NaN (a NaN along the axis gives NaN).
// An empty axis: sum gives 0; mean, max and min have no value and are an error.
// argmax / argmin (ONNX ArgMax / ArgMin, greedy sampling over logits): y
// (i64 or i32) holds the index along the axis of the first largest /
// smallest value, a NaN counting as both (numpy's and PyTorch's rule).
#include <string_view>

#include "tessera/ops/plan.hpp"
#include "tessera/runtime/context.hpp"

namespace tessera::ops {

enum class ReduceOp { sum, mean, max, min, argmax, argmin };
std::string_view to_string(ReduceOp op);

struct ReduceAttrs {
  ReduceOp op;
  int axis;
  bool keep_dims = false;
};

struct Reduce {
  // Inputs {x}, outputs {y}; y may not overlap x.
  static Result<PlanPtr> plan(Context& ctx, const TensorDesc& x, const TensorDesc& y, const ReduceAttrs& attrs);
};

Status reduce(Stream& stream, const Tensor& x, const Tensor& y, const ReduceAttrs& attrs);

}  // namespace tessera::ops
