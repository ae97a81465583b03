#pragma once
// Elementwise ops over strided views with numpy broadcasting: unary (silu,
// cast) and binary (add, mul). Storage f32, f16 or bf16; compute in f32.
// The output may be the very same view as an input (in-place); any other
// overlap is an error.
#include "tessera/ops/plan.hpp"
#include "tessera/runtime/context.hpp"

namespace tessera::ops {

enum class UnaryOp { identity, silu };  // identity between two dtypes is a cast
enum class BinaryOp { add, mul };

std::string_view to_string(UnaryOp op);
std::string_view to_string(BinaryOp op);

// The numpy broadcast of two shapes, or an error naming the dims that clash.
Result<Shape> broadcast_shapes(const Shape& a, const Shape& b);

struct Unary {
  // Inputs {x}, outputs {y}; y has x's shape.
  static Result<PlanPtr> plan(Context& ctx, UnaryOp op, const TensorDesc& x, const TensorDesc& y);
};

struct Binary {
  // Inputs {a, b}, outputs {y}; y's shape is broadcast_shapes(a, b).
  static Result<PlanPtr> plan(Context& ctx, BinaryOp op, const TensorDesc& a, const TensorDesc& b, const TensorDesc& y);
};

Status silu(Stream& stream, const Tensor& x, const Tensor& y);
// Converts x's values to y's dtype (round to nearest even, NaN kept, overflow to Inf).
Status cast(Stream& stream, const Tensor& x, const Tensor& y);
Status add(Stream& stream, const Tensor& a, const Tensor& b, const Tensor& y);
Status mul(Stream& stream, const Tensor& a, const Tensor& b, const Tensor& y);

}  // namespace tessera::ops
