#pragma once
// 2-D convolution over NHWC activations, with the GEMM's fused epilogue:
//
//   y[n, oh, ow, g*Cog + co] = act(scale * sum_{kh, kw, ci} x[n, ih, iw, g*Cig + ci] * w[g*Cog + co, ci, kh, kw]
//                                  + bias[co]) + residual[n, oh, ow, co]
//   ih = oh * stride_h - pad_top + kh * dilation_h   (likewise iw)
//
// with zeros outside x. Cig = C / groups input and Cog = Cout / groups
// output channels per group; groups == C == Cout is a depthwise conv.
//
// Kernels: a 1x1 stride-1 conv is a GEMM over the pixels; the others are an
// implicit GEMM: each task gathers a tile of output pixels' input patches
// (im2col rows, KH * KW runs of Cig contiguous channels) into a per-thread
// buffer and multiplies it by the weights, packed once for the GEMM rows
// (f32 AVX-512 / AVX2, bf16 AMX), applying the epilogue to the tile in
// registers. Depthwise convs have their own direct kernel over channels.
//
// Resize + conv fusion: with upsample_nearest2x the conv reads x as if it
// were nearest-upsampled by 2 in H and W ([N, 2H, 2W, C], the UNet's
// upsample block) without that tensor ever being written. At stride 1
// without dilation it runs as four convs of x itself, one per output pixel
// parity, with the taps that read the same pixel of x added up (3x3: 2x2
// taps each, 4/9 of the multiply-adds); their weights are derived on the
// first such plan and kept with the ConvWeights (16/9 of its bytes at 3x3).
//
// 3x3 convs at stride 1, no dilation, with at least 16 input and output
// channels per group run as Winograd, in f32, where vector transforms are
// (AVX2 and up). On f32 x and weights F(2x2, 3x3): 16 multiplies per 2x2
// output tile and channel pair instead of 36, its rounding within the f32
// tolerance; upsampling (pad 0 or 1), each 2x2 sub-pixel phase as F(3x3,
// 2x2), 16 per 3x3 tile instead of 36; stride 2 at pad 1 (with 28 or more
// 3x3 output tiles), as four 2x2 convs over x's row and column parity
// phases, each F(3x3, 2x2), 49 per 3x3 tile instead of 81. With x or the
// weights bf16 (held to the bf16 tolerance) F(4x4, 3x3): 36 per 4x4 tile
// instead of 144, about 10x the f32 error of the direct sum (far inside
// bf16's), in f32 FMAs rather than bf16 dot products (2x the multiply-adds
// a cycle but operands rounded to bf16). The transformed weights (f32, 16/9
// of the f32 bytes; 4x for F(4x4, 3x3), 49/9 at stride 2) are derived and
// kept as the phases are, except F(4x4, 3x3)'s on 16 output tiles or fewer
// (16 x 16 outputs or less) when they would outgrow half of L3: those are
// made per slice as the GEMMs use them, and never kept.
//
// Layout: x, y and the residual are [N, H, W, C] with unit channel stride
// (any other strides). NCHW data is passed as its NHWC view
// (x_nchw.permute({0, 2, 3, 1})): the one-shot conv2d converts an x whose
// channel stride is not 1 once, by a reorder into an NHWC copy (its own op
// in the profiler); Conv2d::plan takes unit channel strides only.
//
// Run-time tensors: inputs {x, [bias], [residual]}, outputs {y}. The
// residual may broadcast (stride 0), e.g. a time embedding [N, 1, 1, Cout]
// expanded to y's shape; y may be the very same view as the residual.
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "tessera/ops/matmul.hpp"

namespace tessera::ops {

struct ConvAttrs {
  std::array<std::int64_t, 2> stride{1, 1};    // h, w: >= 1
  std::array<std::int64_t, 2> padding{0, 0};   // h, w: >= 0, the same before and after
  std::array<std::int64_t, 2> dilation{1, 1};  // h, w: >= 1
  std::int64_t groups = 1;                     // divides C and Cout
  bool upsample_nearest2x = false;             // x is read as [N, 2H, 2W, C]
};

// Weights packed once: w [Cout, Cin / groups, KH, KW] (OIHW, as PyTorch and
// ONNX store them), any float dtype, packed for GEMM rows of `dtype`
// (f32 or bf16; depthwise weights stay f32 in [KH, KW, C]).
class ConvWeights {
 public:
  static Result<std::shared_ptr<const ConvWeights>> pack(const Tensor& w, std::int64_t groups, DType dtype = DType::f32);

  std::int64_t out_channels() const { return cout_; }
  std::int64_t in_channels_per_group() const { return cin_group_; }
  std::int64_t kernel_h() const { return kh_; }
  std::int64_t kernel_w() const { return kw_; }
  std::int64_t groups() const { return groups_; }
  DType dtype() const { return dtype_; }
  bool depthwise() const { return depthwise_; }
  // Per group: [KH * KW * Cig, Cog] packed (not depthwise).
  const std::vector<WeightsPtr>& gemm_weights() const { return gemm_; }
  // Depthwise: f32 [KH, KW, C].
  const Tensor& depthwise_weights() const { return depthwise_w_; }
  std::int64_t bytes() const;

 private:
  friend struct Conv2d;
  // Forms derived from these weights on the first plan that asks for them
  // and kept for the next (conv.cpp): an upsampling conv's sub-pixel
  // phases, and Winograd planes ([part][group][plane], f32; `tile` names
  // kernels/winograd.hpp's variant) of the 3x3 kernel, of an upsampling
  // conv's four sub-pixel phases, or of the 2x2 kernels a stride-2 3x3 conv
  // applies to the four parity phases of x (conv.cpp).
  struct Phases;
  struct Derived;
  Result<std::shared_ptr<const Phases>> upsample_phases(std::int64_t pad_h, std::int64_t pad_w) const;
  enum class WinogradOf { kernel, upsample_phases, stride2_phases };
  Result<std::shared_ptr<const std::vector<WeightsPtr>>> winograd(WinogradOf of, std::int64_t tile, std::int64_t pad_h,
                                                                  std::int64_t pad_w) const;

  ConvWeights() = default;
  std::int64_t cout_ = 0, cin_group_ = 0, kh_ = 0, kw_ = 0, groups_ = 1;
  DType dtype_ = DType::f32;
  bool depthwise_ = false;
  std::vector<WeightsPtr> gemm_;
  Tensor depthwise_w_;
  std::shared_ptr<Derived> derived_;
};
using ConvWeightsPtr = std::shared_ptr<const ConvWeights>;

// y's shape for x [N, H, W, C]: [N, OH, OW, Cout], OH = (H' + 2 pad - dil (KH - 1) - 1) / stride + 1,
// H' = 2H with upsample_nearest2x, else H.
Result<Shape> conv2d_output_shape(const Shape& x, const ConvWeights& w, const ConvAttrs& attrs = {});

struct Conv2d {
  // Epilogue: bias [Cout], activation, residual (y's shape), scale — as the GEMM's.
  static Result<PlanPtr> plan(Context& ctx, const TensorDesc& x, ConvWeightsPtr w, const TensorDesc& y,
                              const ConvAttrs& attrs = {}, const Epilogue& epilogue = {});
};

// x [N, H, W, C]; with a channel stride other than 1 (an NCHW tensor's NHWC
// view) it is first copied to NHWC, as the reorder op.
Status conv2d(Stream& stream, const Tensor& x, const ConvWeightsPtr& w, const Tensor& y, const ConvAttrs& attrs = {},
              const EpilogueTensors& epilogue = {});

}  // namespace tessera::ops
