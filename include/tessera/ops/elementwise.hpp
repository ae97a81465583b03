#pragma once
// Elementwise ops over strided views with numpy broadcasting: unary
// activations and casts, binary arithmetic, and the gated (GLU) form
// act(a) * b (+ c). Storage f32, f16 or bf16; compute in f32. The output may
// be the very same view as an input (in-place); any other overlap is an error.
// Elements are visited in the order of y's strides, so views permuted alike
// (y included) run as fast as contiguous ones; an input laid out across y
// (transposed, permuted otherwise, strided along y's unit-stride dim) is first
// copied into y's layout by a tiled reorder, in the plan's workspace.
#include <optional>

#include "tessera/ops/activation.hpp"
#include "tessera/ops/plan.hpp"
#include "tessera/runtime/context.hpp"

namespace tessera::ops {

// max / min propagate NaN (torch.maximum / minimum), unlike std::max.
enum class BinaryOp { add, sub, mul, div, max, min };
std::string_view to_string(BinaryOp op);

// The numpy broadcast of two shapes, or an error naming the dims that clash.
Result<Shape> broadcast_shapes(const Shape& a, const Shape& b);

struct Unary {
  // Inputs {x}, outputs {y}: y = act(x), y has x's shape. Activation::none is a cast (see cast()).
  static Result<PlanPtr> plan(Context& ctx, Activation act, const TensorDesc& x, const TensorDesc& y);
};

struct Binary {
  // Inputs {a, b}, outputs {y}; y's shape is broadcast_shapes(a, b).
  static Result<PlanPtr> plan(Context& ctx, BinaryOp op, const TensorDesc& a, const TensorDesc& b, const TensorDesc& y);
};

struct Gated {
  // Inputs {a, b, [c]}, outputs {y}: y = act(a) * b (+ c), each input
  // broadcasting to y's shape, in one pass (act(a) is never stored).
  static Result<PlanPtr> plan(Context& ctx, Activation act, const TensorDesc& a, const TensorDesc& b,
                              const std::optional<TensorDesc>& c, const TensorDesc& y);
};

Status activation(Stream& stream, Activation act, const Tensor& x, const Tensor& y);
Status relu(Stream& stream, const Tensor& x, const Tensor& y);
Status gelu(Stream& stream, const Tensor& x, const Tensor& y);       // erf form
Status gelu_tanh(Stream& stream, const Tensor& x, const Tensor& y);  // tanh approximation
Status silu(Stream& stream, const Tensor& x, const Tensor& y);
Status sigmoid(Stream& stream, const Tensor& x, const Tensor& y);
Status tanh(Stream& stream, const Tensor& x, const Tensor& y);
Status exp(Stream& stream, const Tensor& x, const Tensor& y);
Status quick_gelu(Stream& stream, const Tensor& x, const Tensor& y);  // x * sigmoid(1.702 x)
// Converts x's values to y's dtype. Between f32, f16 and bf16: round to
// nearest even, NaN kept, overflow to Inf. With an integer side (i8, u8,
// i32, i64; not i4): integer to integer wraps modulo 2^bits (two's
// complement, as numpy, PyTorch and ONNX Runtime convert); float to integer
// truncates toward zero and saturates at the type's range, NaN giving 0
// (C++ and ONNX leave both undefined); integer to float rounds to nearest
// even, through f32 for f16 and bf16. Integer casts run on the reference
// row at every ISA level.
Status cast(Stream& stream, const Tensor& x, const Tensor& y);

Status binary(Stream& stream, BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& y);
Status add(Stream& stream, const Tensor& a, const Tensor& b, const Tensor& y);
Status sub(Stream& stream, const Tensor& a, const Tensor& b, const Tensor& y);
Status mul(Stream& stream, const Tensor& a, const Tensor& b, const Tensor& y);
Status div(Stream& stream, const Tensor& a, const Tensor& b, const Tensor& y);
Status maximum(Stream& stream, const Tensor& a, const Tensor& b, const Tensor& y);
Status minimum(Stream& stream, const Tensor& a, const Tensor& b, const Tensor& y);

// y = act(a) * b, or act(a) * b + c: the seeds' silu(a)·w + bias is
// gated(stream, Activation::silu, a, w, bias, y).
Status gated(Stream& stream, Activation act, const Tensor& a, const Tensor& b, const Tensor& y);
Status gated(Stream& stream, Activation act, const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& y);
// SwiGLU = silu(gate) * up; GeGLU = gelu(gate) * up (erf form).
Status swiglu(Stream& stream, const Tensor& gate, const Tensor& up, const Tensor& y);
Status geglu(Stream& stream, const Tensor& gate, const Tensor& up, const Tensor& y);
// From one projection output x [..., 2H] -> y [..., H], split by views (no
// copy), in each ecosystem's order: swiglu as vLLM's SiluAndMul,
// silu(x[..., :H]) * x[..., H:]; geglu as diffusers' GEGLU,
// x[..., :H] * gelu(x[..., H:]).
Status swiglu(Stream& stream, const Tensor& x, const Tensor& y);
Status geglu(Stream& stream, const Tensor& x, const Tensor& y);

}  // namespace tessera::ops
