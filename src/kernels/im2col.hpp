#pragma once
// Input patches of a convolution as GEMM rows (im2col), one tile of output
// pixels at a time into a per-thread buffer, so the whole im2col matrix
// (KH * KW times the input) never exists. Row r of a tile (output pixel p0 + r of one sample) holds, for
// each kernel tap (kh, kw), the group's Cig channels of the input pixel the
// tap reads — zeros where it falls in the padding: K = KH * KW * Cig
// elements, in the order the conv weights are packed in.
//
// NHWC keeps a tap's channels contiguous, so each tap is one copy of Cig
// elements. A nearest x2 upsample of the input is read through the same
// mapping (input pixel (ih / 2, iw / 2)), so the upsampled tensor is never
// written.
#include <cstddef>
#include <cstdint>

namespace tessera::kernels {

struct Im2colGeometry {
  std::int64_t in_h, in_w;  // the input as the conv reads it (2H x 2W when upsampled)
  std::int64_t out_w;
  std::int64_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  std::int64_t channels;      // Cig: elements per tap
  bool upsample2x;            // the stored input is (in_h / 2) x (in_w / 2)
  std::int64_t x_row_stride;  // elements between stored input rows
  std::int64_t x_col_stride;  // elements between stored input pixels
  std::size_t element_bytes;
};

// Rows [p0, p0 + rows) of one sample whose group's first channel is at `x`,
// into `out` with `ld` elements per row.
void im2col_rows(const Im2colGeometry& g, const void* x, std::int64_t p0, std::int64_t rows, void* out, std::int64_t ld);

}  // namespace tessera::kernels
