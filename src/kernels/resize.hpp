#pragma once
// Resize family (tessera/ops/resize.hpp), and the coordinate mapping behind
// it: output index -> source index (nearest), or two (bilinear) or four
// (cubic) source taps and their weights, per ONNX coordinate mode. The mapping is plain scalar
// code, also for kernels that resize on the fly (a conv reading a nearest x2
// upsample of its input).
//
// A kernel writes output rows [r0, r1) of one image plane — (n, c) in NCHW,
// n in NHWC — reading the source rows and columns its two tables name. A
// pixel holds `channels` elements: C in NHWC, 1 in NCHW (or NHWC with C = 1).
#include <algorithm>
#include <cstdint>
#include <span>

#include "kernels/scratch.hpp"
#include "kernels/tiling.hpp"

namespace tessera::ops {
// Defined in tessera/ops/resize.hpp; declared here so kernels need not see the op API.
enum class CoordinateMode;
enum class NearestRounding;
}  // namespace tessera::ops

namespace tessera::kernels {

// Along an axis of `in` -> `out` elements (both >= 1, below 2^31), output
// index o reads this source index. Exact: the source coordinate is a ratio
// of integers, so floor and rounding ties are decided without float error.
std::int64_t resize_nearest_index(std::int64_t o, std::int64_t in, std::int64_t out, ops::CoordinateMode coord,
                                  ops::NearestRounding rounding);

// y[o] = w0 * x[i0] + w1 * x[i1] with w0 + w1 = 1 and i1 = i0 + 1, except at
// the edges, where the clamped coordinate gives i1 = i0 and w1 = 0.
struct LinearTaps {
  std::int64_t i0, i1;
  float w0, w1;
};
LinearTaps resize_linear_taps(std::int64_t o, std::int64_t in, std::int64_t out, ops::CoordinateMode coord);

// y[o] = sum of w[k] x[i[k]] over the four pixels around the source
// coordinate s (unclamped): floor(s) - 1 .. floor(s) + 2, clamped to the
// axis (the edge pixel repeats), weighted by Keys' cubic kernel with
// coefficient `a` (-0.75: PyTorch's bicubic; -0.5: TensorFlow's). With
// exclude_outside, taps past the axis weigh 0 and the rest are scaled to sum
// to 1 (ONNX Resize's exclude_outside).
struct CubicTaps {
  std::int64_t i[4];
  float w[4];
};
CubicTaps resize_cubic_taps(std::int64_t o, std::int64_t in, std::int64_t out, ops::CoordinateMode coord, float a,
                            bool exclude_outside);

// One axis, one entry per output index. Tables hold a multiple of
// kResizeTableAlign entries, the padding repeating the last entry, so a
// block of vector lanes reads whole blocks and its source indices span
// [i0 of its first lane, its last tap (i0, i1 or i3) of its last].
inline constexpr std::int64_t kResizeTableAlign = 16;
struct ResizeTable {
  const std::int32_t* i0;  // nearest: the source index; bilinear and cubic: the first tap
  const std::int32_t* i1;  // bilinear and cubic: the next tap
  const float* w0;         // bilinear and cubic: the taps' weights
  const float* w1;
  const std::int32_t* i2;  // cubic only: the last two taps and their weights
  const std::int32_t* i3;
  const float* w2;
  const float* w3;
  // Bilinear, out = 2 x in, half-pixel coordinates: output 2j reads
  // 0.25 x[j - 1] + 0.75 x[j] and 2j + 1 0.75 x[j] + 0.25 x[j + 1], the taps
  // clamped to the axis (the table says the same; kernels may use either).
  bool half_pixel_x2 = false;
};

struct ResizeArgs {
  DType dtype;  // of x and y
  int taps;     // per axis: 1 nearest, 2 bilinear, 4 cubic
  std::int64_t in_width, out_width, channels;
  const void* x;  // the plane's element [0, 0, 0]
  std::int64_t x_row_stride, x_pixel_stride, x_channel_stride;
  void* y;
  std::int64_t y_row_stride, y_pixel_stride, y_channel_stride;
  ResizeTable rows, cols;
  bool stream_y;  // streaming stores for y (RowTiling::stream_output)
};

// rows: RowProblem's rows = output rows of all planes, cols = elements per
// output row (Wo * channels), param = the dtype, unit_stride = stride 1
// along the vector dim — channels, or columns when channels == 1 — in x and
// y; taps as ResizeArgs'.
struct ResizeProblem {
  RowProblem rows;
  int taps;
};

struct ResizeFamily {
  using Problem = ResizeProblem;
  using Tiling = RowTiling;
  using Run = void (*)(const ResizeArgs&, std::int64_t r0, std::int64_t r1);
};

std::span<const KernelRow<ResizeFamily>> rows(ResizeFamily);

namespace {  // internal to each ISA's translation unit (see vec.hpp)

// Bilinear and cubic, channels == 1: the N (the taps) f32 rows of source
// rows interpolated along the columns, so that each source row is
// interpolated once for all the output rows that read it (a bilinear
// upsample x2 reads each for four).
template <int N>
class InterpolatedRows {
 public:
  // Rows of `width` f32 each, in the thread's ScratchSlot::partial.
  explicit InterpolatedRows(std::int64_t width)
      : buffer_(static_cast<float*>(thread_scratch(ScratchSlot::partial, std::size_t(N * width) * sizeof(float)))), width_(width) {
    std::fill_n(held_, N, -1);
  }

  // Source row i, interpolated by fill(i, out) unless a buffer holds it
  // already; a buffer holding none of the rows `keep` (those the output row
  // still needs) is the one reused.
  template <class Fill>
  const float* get(std::int64_t i, std::span<const std::int64_t> keep, Fill&& fill) {
    for (int b = 0; b < N; ++b)
      if (held_[b] == i) return buffer_ + b * width_;
    int b = 0;
    while (b + 1 < N && std::find(keep.begin(), keep.end(), held_[b]) != keep.end()) ++b;
    held_[b] = i;
    fill(i, buffer_ + b * width_);
    return buffer_ + b * width_;
  }

 private:
  float* buffer_;
  std::int64_t width_;
  std::int64_t held_[N];  // the source row in each buffer, -1 for none
  static_assert(N >= 2);
};

}  // namespace

namespace ref { void resize(const ResizeArgs& a, std::int64_t r0, std::int64_t r1); }
namespace avx2 { void resize(const ResizeArgs& a, std::int64_t r0, std::int64_t r1); }
namespace avx512 { void resize(const ResizeArgs& a, std::int64_t r0, std::int64_t r1); }
namespace avx512_bf16 { void resize(const ResizeArgs& a, std::int64_t r0, std::int64_t r1); }

}  // namespace tessera::kernels
