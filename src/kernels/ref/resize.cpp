#include "core/element.hpp"
#include "kernels/resize.hpp"

namespace tessera::kernels::ref {

using namespace tessera::detail;  // load / store

namespace {

// Tap k of a table along its axis at output index o: the source index and its weight.
std::int64_t tap_index(const ResizeTable& t, int k, std::int64_t o) {
  const std::int32_t* i[] = {t.i0, t.i1, t.i2, t.i3};
  return i[k][o];
}
double tap_weight(const ResizeTable& t, int k, std::int64_t o) {
  const float* w[] = {t.w0, t.w1, t.w2, t.w3};
  return w[k][o];
}

}  // namespace

void resize(const ResizeArgs& a, std::int64_t r0, std::int64_t r1) {
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::int64_t yr = r * a.y_row_stride;
    for (std::int64_t w = 0; w < a.out_width; ++w) {
      const std::int64_t yo = yr + w * a.y_pixel_stride;
      for (std::int64_t c = 0; c < a.channels; ++c) {
        const std::int64_t xc = c * a.x_channel_stride, yc = yo + c * a.y_channel_stride;
        if (a.taps == 1) {  // nearest moves the value as it is
          store(a.y, a.dtype, yc, load(a.x, a.dtype, a.rows.i0[r] * a.x_row_stride + a.cols.i0[w] * a.x_pixel_stride + xc));
          continue;
        }
        // Along the row first, then down the taps' rows.
        double sum = 0;
        for (int kr = 0; kr < a.taps; ++kr) {
          const std::int64_t row = tap_index(a.rows, kr, r) * a.x_row_stride + xc;
          double along = 0;
          for (int kc = 0; kc < a.taps; ++kc)
            along += tap_weight(a.cols, kc, w) * load(a.x, a.dtype, row + tap_index(a.cols, kc, w) * a.x_pixel_stride);
          sum += tap_weight(a.rows, kr, r) * along;
        }
        store(a.y, a.dtype, yc, float(sum));
      }
    }
  }
}

}  // namespace tessera::kernels::ref
