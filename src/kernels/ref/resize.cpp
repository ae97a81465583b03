#include "core/element.hpp"
#include "kernels/resize.hpp"

namespace tessera::kernels::ref {

using namespace tessera::detail;  // load / store

void resize(const ResizeArgs& a, std::int64_t r0, std::int64_t r1) {
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::int64_t top = a.rows.i0[r] * a.x_row_stride, yr = r * a.y_row_stride;
    for (std::int64_t w = 0; w < a.out_width; ++w) {
      const std::int64_t left = a.cols.i0[w] * a.x_pixel_stride, yo = yr + w * a.y_pixel_stride;
      for (std::int64_t c = 0; c < a.channels; ++c) {
        const std::int64_t xc = c * a.x_channel_stride, yc = yo + c * a.y_channel_stride;
        if (!a.bilinear) {
          store(a.y, a.dtype, yc, load(a.x, a.dtype, top + left + xc));
          continue;
        }
        const std::int64_t bottom = a.rows.i1[r] * a.x_row_stride, right = a.cols.i1[w] * a.x_pixel_stride;
        const double wx0 = a.cols.w0[w], wx1 = a.cols.w1[w];
        const double upper = wx0 * load(a.x, a.dtype, top + left + xc) + wx1 * load(a.x, a.dtype, top + right + xc);
        const double lower = wx0 * load(a.x, a.dtype, bottom + left + xc) + wx1 * load(a.x, a.dtype, bottom + right + xc);
        store(a.y, a.dtype, yc, float(a.rows.w0[r] * upper + a.rows.w1[r] * lower));
      }
    }
  }
}

}  // namespace tessera::kernels::ref
