#include "core/element.hpp"
#include "kernels/depthwise_conv.hpp"

namespace tessera::kernels::ref {

using namespace tessera::detail;  // load / store

namespace {

// The source index along an axis of input coordinate i, or -1 when i falls
// in the zero padding; the upsample repeats each source index twice.
std::int64_t source_index(std::int64_t i, std::int64_t extent, bool upsample) {
  const std::int64_t upsampled = upsample ? 2 * extent : extent;
  if (i < 0 || i >= upsampled) return -1;
  return upsample ? i / 2 : i;
}

}  // namespace

// The definition the SIMD rows are tested against: every tap bounds-checked
// on its own, f64 accumulation and epilogue.
void depthwise_conv(const DepthwiseArgs& a, std::int64_t r0, std::int64_t r1) {
  const EpilogueArgs& ep = a.ep;
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::int64_t n = r / a.out_height, oh = r % a.out_height;
    for (std::int64_t ow = 0; ow < a.out_width; ++ow) {
      for (std::int64_t c = 0; c < a.channels; ++c) {
        double acc = 0.0;
        for (std::int64_t kh = 0; kh < a.kernel_h; ++kh) {
          const std::int64_t ih =
              source_index(oh * a.stride_h - a.pad_h + kh * a.dilation_h, a.in_height, a.upsample_nearest2x);
          if (ih < 0) continue;
          for (std::int64_t kw = 0; kw < a.kernel_w; ++kw) {
            const std::int64_t iw =
                source_index(ow * a.stride_w - a.pad_w + kw * a.dilation_w, a.in_width, a.upsample_nearest2x);
            if (iw < 0) continue;
            const double x = load(a.x, a.x_dtype, n * a.x_n_stride + ih * a.x_h_stride + iw * a.x_w_stride + c);
            acc += x * double(a.w[(kh * a.kernel_w + kw) * a.channels + c]);
          }
        }
        double v = double(ep.scale) * acc;
        if (ep.bias) v += load(ep.bias, ep.bias_dtype, c);
        v = activate(v, ep.act);
        if (ep.residual)
          v += load(ep.residual, ep.residual_dtype,
                    n * a.residual_n_stride + oh * a.residual_h_stride + ow * ep.residual_row_stride + c);
        store(a.y, a.y_dtype, n * a.y_n_stride + oh * a.y_h_stride + ow * a.y_w_stride + c, float(v));
      }
    }
  }
}

}  // namespace tessera::kernels::ref
