#pragma once
// QuantizeLinear / DequantizeLinear with ONNX semantics (opset 21, blocked
// quantization included):
//
//   quantize:   y = saturate(round_half_even(x / scale) + zero_point)
//   dequantize: y = (x - zero_point) * scale
//
// The shape of `scale` picks the granularity, as in ONNX:
//   - [] or [1]                                 per tensor (axis is ignored);
//   - [x.shape[axis]], group_size 0             per channel along axis;
//   - x's shape with dim axis = ceil(x.shape[axis] / group_size), group_size > 0:
//     group-wise, each block of group_size consecutive elements along axis
//     shares one scale. The last block may be shorter (ONNX allows it).
// zero_point is optional (absent: 0), with scale's shape and the integer
// dtype (y's for quantize, x's for dequantize). scale is f32, f16 or bf16.
// axis may be negative (counted from the end).
//
// Numerics, identical on every ISA level:
//   - x / scale is an f32 division (x and scale widened to f32 exactly), then
//     rounded to the nearest integer, ties to even (0.5 -> 0, 1.5 -> 2,
//     2.5 -> 2, -0.5 -> 0, -1.5 -> -2), as ONNX's reference computes for f32. Division,
//     not a multiply by 1/scale: that differs from ONNX by one at near-ties.
//   - saturation to the output type: i8 [-128, 127], u8 [0, 255], i4 [-8, 7];
//     +-inf (and any quotient beyond the range) saturate.
//   - NaN (ONNX leaves it undefined; also x = 0 with scale 0, or inf / inf)
//     quantizes to the zero point: the integer that stands for 0.
//   - dequantize computes (x - zero_point) exactly and multiplies by scale in
//     f32 (exact before the one rounding for i8, u8, i4), then rounds to y's dtype.
#include <cstdint>
#include <optional>

#include "tessera/ops/plan.hpp"
#include "tessera/runtime/context.hpp"

namespace tessera::ops {

struct QuantAttrs {
  int axis = 1;                 // the channel / block axis (ONNX's default)
  std::int64_t group_size = 0;  // > 0: group-wise (block) quantization along axis
};

struct Quantize {
  // Inputs {x, scale} or {x, scale, zero_point}, outputs {y}: x f32/f16/bf16,
  // y i8, u8 or i4 with x's shape.
  static Result<PlanPtr> plan(Context& ctx, const TensorDesc& x, const TensorDesc& scale,
                              const std::optional<TensorDesc>& zero_point, const TensorDesc& y, const QuantAttrs& attrs = {});
};

struct Dequantize {
  // Inputs {x, scale} or {x, scale, zero_point}, outputs {y}: x i8, u8, i4 or
  // i32, y f32/f16/bf16 with x's shape.
  static Result<PlanPtr> plan(Context& ctx, const TensorDesc& x, const TensorDesc& scale,
                              const std::optional<TensorDesc>& zero_point, const TensorDesc& y, const QuantAttrs& attrs = {});
};

Status quantize(Stream& stream, const Tensor& x, const Tensor& scale, const std::optional<Tensor>& zero_point,
                const Tensor& y, const QuantAttrs& attrs = {});
Status dequantize(Stream& stream, const Tensor& x, const Tensor& scale, const std::optional<Tensor>& zero_point,
                  const Tensor& y, const QuantAttrs& attrs = {});

// Dynamic per-token quantization, the rule of LinearOptions::quantize_activations
// (bit for bit: the same kernels): each row of x [..., K] (f32, f16, bf16)
// to y i8 (x's shape) = clamp(rne(x * (1 / scale)), -127, 127) (a multiply
// by the reciprocal, unlike quantize's division) with scale = max|x| / 127
// in scales (f32, x's shape with K as 1); 1 for an all-zero row, NaN for a
// row holding NaN or Inf (its y is then meaningless). For QuantizedLinear:
// activations quantized once for the several linears that read them (q, k
// and v; gate and up).
struct QuantizeRows {
  // Inputs {x}, outputs {y, scales}.
  static Result<PlanPtr> plan(Context& ctx, const TensorDesc& x, const TensorDesc& y, const TensorDesc& scales);
};
Status quantize_rows(Stream& stream, const Tensor& x, const Tensor& y, const Tensor& scales);

}  // namespace tessera::ops
