#pragma once
// Resize of the two spatial dims of an image batch, with ONNX Resize
// semantics: x [N, C, H, W] -> y [N, C, Ho, Wo] (or [N, H, W, C] ->
// [N, Ho, Wo, C] when channels_last). The scales are the shapes' ratios,
// Ho / H and Wo / W. Storage f32, f16 or bf16 (x and y alike); bilinear
// and cubic blend in f32.
//
// Each output coordinate o along an axis of `in` -> `out` elements maps to a
// source coordinate (ONNX coordinate_transformation_mode), computed exactly
// from the integer sizes:
//   half_pixel          (o + 0.5) * in / out - 0.5
//   pytorch_half_pixel  as half_pixel, but 0 when out == 1
//   align_corners       o * (in - 1) / (out - 1), 0 when out == 1
//   asymmetric          o * in / out
// nearest then rounds it (NearestRounding) and clamps to [0, in - 1];
// bilinear clamps it to [0, in - 1] and blends the two pixels around it
// (ONNX "linear": the edge pixel repeats beyond the border); cubic blends
// the four around it, unclamped, floor(s) - 1 .. floor(s) + 2, with Keys'
// cubic kernel (ONNX "cubic"): taps past the border repeat the edge pixel,
// or with exclude_outside weigh 0 while the others are scaled to sum to 1.
//
// The defaults are PyTorch's F.interpolate(mode="nearest"): asymmetric +
// floor, the x2 upsample of diffusion UNets (pixel duplication). ONNX's
// defaults differ: half_pixel + round_prefer_floor. PyTorch's bilinear with
// align_corners=False is {bilinear, pytorch_half_pixel}; with
// align_corners=True it is {bilinear, align_corners}. PyTorch's bicubic is
// {cubic, half_pixel} (align_corners=False) or {cubic, align_corners}, with
// cubic_coeff_a -0.75; TensorFlow's takes -0.5 (and often exclude_outside).
#include "tessera/ops/plan.hpp"
#include "tessera/runtime/context.hpp"

namespace tessera::ops {

enum class ResizeMode { nearest, bilinear, cubic };
enum class CoordinateMode { half_pixel, align_corners, asymmetric, pytorch_half_pixel };
// How nearest rounds a source coordinate (bilinear and cubic ignore it):
// round_prefer_floor rounds to the nearest index, halves down (ONNX's default);
// floor takes the index at or below (PyTorch's nearest).
enum class NearestRounding { round_prefer_floor, floor };

struct ResizeAttrs {
  ResizeMode mode = ResizeMode::nearest;
  CoordinateMode coord = CoordinateMode::asymmetric;
  NearestRounding rounding = NearestRounding::floor;
  bool channels_last = false;  // NHWC instead of NCHW
  // Cubic only: Keys' coefficient (finite), and whether taps past the border drop out.
  float cubic_coeff_a = -0.75f;
  bool exclude_outside = false;
};

struct Resize {
  // Inputs {x}, outputs {y}. N and C must match, Ho and Wo be > 0 (and with
  // them H and W), spatial sizes below 2^31. N or C of 0 is an empty result.
  // y may not overlap x.
  static Result<PlanPtr> plan(Context& ctx, const TensorDesc& x, const TensorDesc& y, const ResizeAttrs& attrs = {});
};

Status resize(Stream& stream, const Tensor& x, const Tensor& y, const ResizeAttrs& attrs = {});

}  // namespace tessera::ops
