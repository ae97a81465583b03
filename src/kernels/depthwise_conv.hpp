#pragma once
// Depthwise 2-D convolution family (tessera/ops/conv.hpp, groups == C == Cout),
// NHWC, every operand with unit channel stride:
//
//   y[n, oh, ow, c] = act(scale * sum_{kh, kw} x[n, ih, iw, c] * w[kh, kw, c] + bias[c]) + residual[n, oh, ow, c]
//   ih = oh * stride_h - pad_h + kh * dilation_h   (likewise iw)
//
// with zeros outside x. With upsample_nearest2x the kernel reads x as its
// nearest x2 upsample: ih ranges over [0, 2 H) and reads source row ih / 2.
//
// A task computes output rows [r0, r1) of the N * OH rows (n, oh), row
// r = n * OH + oh, all OW pixels and C channels of each. The SIMD rows
// accumulate in f32, the reference in f64.
#include <algorithm>
#include <cstdint>
#include <span>

#include "kernels/matmul.hpp"
#include "kernels/tiling.hpp"

namespace tessera::kernels {

struct DepthwiseArgs {
  DType x_dtype, y_dtype;  // float storage types
  std::int64_t channels;
  std::int64_t in_height, in_width;  // x's H and W, before the upsample
  std::int64_t out_height, out_width;
  std::int64_t kernel_h, kernel_w;
  std::int64_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  bool upsample_nearest2x;
  // Strides in elements; the channel stride is 1.
  const void* x;  // element [0, 0, 0, 0]
  std::int64_t x_n_stride, x_h_stride, x_w_stride;
  const float* w;  // [KH, KW, C], contiguous
  void* y;
  std::int64_t y_n_stride, y_h_stride, y_w_stride;
  // The epilogue of one output row, an [OW, C] matrix: ep.bias is [C] (unit
  // stride, any float dtype); ep.residual is the residual's element
  // [0, 0, 0, 0], ep.residual_row_stride its W stride and ep.residual_col_stride
  // 1. Any stride may be 0 (a broadcast residual), and the residual may be y.
  EpilogueArgs ep;
  std::int64_t residual_n_stride, residual_h_stride;
  bool stream_y;  // streaming stores for y (RowTiling::stream_output)
};

// The taps k in [lo, hi) of one output position o whose input coordinate
// o * stride - pad + k * dilation lies in [0, extent). Empty when lo == hi.
struct TapRange {
  std::int64_t lo, hi;
};
static inline TapRange depthwise_taps(std::int64_t o, std::int64_t stride, std::int64_t pad, std::int64_t dilation,
                                      std::int64_t taps, std::int64_t extent) {
  const std::int64_t first = o * stride - pad;  // tap 0's input coordinate
  const std::int64_t lo = first >= 0 ? 0 : std::min(taps, (-first + dilation - 1) / dilation);
  const std::int64_t hi = first >= extent ? 0 : std::min(taps, (extent - 1 - first) / dilation + 1);
  return {lo, std::max(lo, hi)};
}

// The output positions [lo, hi) (within [0, out)) all of whose taps lie
// inside [0, extent): where the kernels need no bounds checks.
static inline TapRange depthwise_interior(std::int64_t out, std::int64_t stride, std::int64_t pad,
                                          std::int64_t dilation, std::int64_t taps, std::int64_t extent) {
  const std::int64_t lo = std::min(out, (pad + stride - 1) / stride);
  const std::int64_t last = extent - 1 + pad - (taps - 1) * dilation;  // the largest o * stride that fits
  const std::int64_t hi = last < 0 ? 0 : std::min(out, last / stride + 1);
  return {lo, std::max(lo, hi)};
}

// Output row r = (n, oh) of a task: what its pixels read and write. The
// SIMD rows build one per row and walk its pixels.
struct DepthwiseOutputRow {
  const char* x;         // image n of x
  std::int64_t ih0;      // tap 0's input row, in the (upsampled) image
  TapRange kh;           // the taps whose input row lies inside the image
  void* y;               // the row's pixel 0
  const void* residual;  // the residual row's pixel 0; null when absent
};

// `height`: x's rows as the conv reads them (doubled when upsampled).
static inline DepthwiseOutputRow depthwise_output_row(const DepthwiseArgs& a, std::int64_t r, std::int64_t height) {
  const std::int64_t n = r / a.out_height, oh = r % a.out_height;
  const auto at = [](const void* p, DType t, std::int64_t i) { return static_cast<const char*>(p) + i * bytes_of(t); };
  return {at(a.x, a.x_dtype, n * a.x_n_stride), oh * a.stride_h - a.pad_h,
          depthwise_taps(oh, a.stride_h, a.pad_h, a.dilation_h, a.kernel_h, height),
          const_cast<char*>(at(a.y, a.y_dtype, n * a.y_n_stride + oh * a.y_h_stride)),
          a.ep.residual ? at(a.ep.residual, a.ep.residual_dtype, n * a.residual_n_stride + oh * a.residual_h_stride) : nullptr};
}

struct DepthwiseProblem {
  DType x, y, bias, residual;  // bias, residual: f32 when absent
  std::int64_t rows;           // N * OH
  std::int64_t out_width, channels;
};

struct DepthwiseFamily {
  using Problem = DepthwiseProblem;
  using Tiling = RowTiling;
  using Run = void (*)(const DepthwiseArgs&, std::int64_t r0, std::int64_t r1);
};

std::span<const KernelRow<DepthwiseFamily>> rows(DepthwiseFamily);

namespace ref { void depthwise_conv(const DepthwiseArgs& a, std::int64_t r0, std::int64_t r1); }
namespace avx2 { void depthwise_conv(const DepthwiseArgs& a, std::int64_t r0, std::int64_t r1); }
namespace avx512 { void depthwise_conv(const DepthwiseArgs& a, std::int64_t r0, std::int64_t r1); }

}  // namespace tessera::kernels
