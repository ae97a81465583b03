#include <cmath>

#include "core/element.hpp"
#include "kernels/rms_norm.hpp"

namespace tessera::kernels::ref {

using namespace tessera::detail;  // load / store / load_index

void rms_norm(const RmsNormArgs& a, std::int64_t r0, std::int64_t r1) {
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::int64_t xo = r * a.x_row_stride, yo = r * a.y_row_stride;
    double sum_sq = 0.0;
    for (std::int64_t c = 0; c < a.cols; ++c) {
      const double v = load(a.x, a.x_dtype, xo + c * a.x_col_stride);
      sum_sq += v * v;
    }
    const double inv_rms = 1.0 / std::sqrt(sum_sq / double(a.cols) + double(a.eps));
    for (std::int64_t c = 0; c < a.cols; ++c) {
      const double v = load(a.x, a.x_dtype, xo + c * a.x_col_stride);
      const double g = load(a.gamma, a.gamma_dtype, c * a.gamma_stride);
      store(a.y, a.y_dtype, yo + c * a.y_col_stride, float(v * inv_rms * g));
    }
  }
}

}  // namespace tessera::kernels::ref
