#pragma once
// Layout and data movement: reorder (a strided copy, the contiguous copy of
// a permuted or sliced view, with float conversion on the way), permute,
// concat, split, pad and gather. Views (permute, slice, reshape, expand on
// Tensor) copy nothing; these ops are the copies. Float dtypes (f32, f16,
// bf16) may differ between input and output and convert (round to nearest
// even, as cast); other dtypes must match and move their bytes unchanged.
// Outputs must not overlap inputs.
#include <cstdint>
#include <span>
#include <vector>

#include "tessera/ops/plan.hpp"
#include "tessera/runtime/context.hpp"

namespace tessera::ops {

struct Reorder {
  // Inputs {x}, outputs {y} with x's shape; any strides on both sides. i4
  // tensors are copied only when both are contiguous (with an even count).
  static Result<PlanPtr> plan(Context& ctx, const TensorDesc& x, const TensorDesc& y);
};

Status reorder(Stream& stream, const Tensor& x, const Tensor& y);
// y = x.permute(order), materialized into y (any strides).
Status permute(Stream& stream, const Tensor& x, std::span<const int> order, const Tensor& y);

struct Concat {
  // Inputs {inputs...}, outputs {y}: inputs joined along `axis` (negative
  // counts from the end); all other dims equal y's.
  static Result<PlanPtr> plan(Context& ctx, std::span<const TensorDesc> inputs, int axis, const TensorDesc& y);
};

Status concat(Stream& stream, std::span<const Tensor> inputs, int axis, const Tensor& y);

struct Split {
  // Inputs {x}, outputs {outputs...}: consecutive pieces of x along `axis`,
  // whose sizes along axis sum to x's.
  static Result<PlanPtr> plan(Context& ctx, const TensorDesc& x, int axis, std::span<const TensorDesc> outputs);
};

Status split(Stream& stream, const Tensor& x, int axis, std::span<const Tensor> outputs);

// ONNX Pad modes: constant fills with `value`; reflect mirrors without
// repeating the edge (pad < dim); edge repeats the edge element.
enum class PadMode { constant, reflect, edge };

struct PadAttrs {
  std::vector<std::int64_t> before, after;  // one entry per dim of x, each >= 0
  PadMode mode = PadMode::constant;
  float value = 0;  // integer dtypes: must be an integer the dtype holds
};

struct Pad {
  // Inputs {x}, outputs {y}: y.shape[d] = before[d] + x.shape[d] + after[d].
  static Result<PlanPtr> plan(Context& ctx, const TensorDesc& x, const TensorDesc& y, const PadAttrs& attrs);
};

Status pad(Stream& stream, const Tensor& x, const Tensor& y, const PadAttrs& attrs);

struct Gather {
  // ONNX Gather. Inputs {x, indices (i32 or i64)}, outputs {y} in x's dtype
  // with shape x.shape[:axis] + indices.shape + x.shape[axis+1:]. An index
  // in [-n, 0) counts from the end; one outside [-n, n) (n = x.shape[axis])
  // is reported by run(), naming its value, and nothing is written then.
  static Result<PlanPtr> plan(Context& ctx, const TensorDesc& x, const TensorDesc& indices, int axis, const TensorDesc& y);
};

Status gather(Stream& stream, const Tensor& x, const Tensor& indices, int axis, const Tensor& y);

}  // namespace tessera::ops
