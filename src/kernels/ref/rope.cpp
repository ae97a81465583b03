#include "core/element.hpp"
#include "kernels/rope.hpp"

namespace tessera::kernels::ref {

using namespace tessera::detail;  // load / store / load_index

void rope(const RopeArgs& a) {
  const std::int64_t half = a.rot_dim / 2;
  for (std::int64_t h = 0; h < a.heads; ++h) {
    const std::int64_t xo = h * a.x_head_stride, yo = h * a.y_head_stride;
    for (std::int64_t i = 0; i < half; ++i) {
      const std::int64_t p0 = a.interleaved ? 2 * i : i;
      const std::int64_t p1 = a.interleaved ? 2 * i + 1 : i + half;
      const double x0 = load(a.x, a.x_dtype, xo + p0 * a.x_stride);
      const double x1 = load(a.x, a.x_dtype, xo + p1 * a.x_stride);
      const double c = a.cos[i], s = a.sin[i];
      store(a.y, a.y_dtype, yo + p0 * a.y_stride, float(x0 * c - x1 * s));
      store(a.y, a.y_dtype, yo + p1 * a.y_stride, float(x1 * c + x0 * s));
    }
    for (std::int64_t d = a.rot_dim; d < a.head_dim; ++d)
      store(a.y, a.y_dtype, yo + d * a.y_stride, load(a.x, a.x_dtype, xo + d * a.x_stride));
  }
}

}  // namespace tessera::kernels::ref
