#include <algorithm>
#include <cmath>
#include <limits>

#include "core/element.hpp"
#include "kernels/softmax.hpp"

namespace tessera::kernels::ref {

using namespace tessera::detail;  // load / store / load_index

void softmax(const SoftmaxArgs& a, std::int64_t r0, std::int64_t r1) {
  const double inf = std::numeric_limits<double>::infinity();
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::int64_t xo = r * a.x_row_stride, yo = r * a.y_row_stride, mo = r * a.mask_row_stride;
    const std::int64_t visible = a.causal ? std::clamp<std::int64_t>(r + a.causal_offset + 1, 0, a.cols) : a.cols;
    auto logit = [&](std::int64_t c) {
      double v = double(a.scale) * load(a.x, a.x_dtype, xo + c * a.x_col_stride);
      if (a.mask) v += load(a.mask, a.mask_dtype, mo + c * a.mask_col_stride);
      return v;
    };
    // A NaN logit makes the row's visible outputs NaN; +Inf propagates as
    // NaN through the arithmetic; a row with no visible finite logit is zeros
    // (log: -inf).
    double max = -inf;
    bool has_nan = false;
    for (std::int64_t c = 0; c < visible; ++c) {
      const double l = logit(c);
      has_nan |= std::isnan(l);
      max = std::max(max, l);
    }
    const bool empty = max == -inf && !has_nan;
    double sum = 0.0;
    for (std::int64_t c = 0; c < visible && !empty; ++c) sum += std::exp(logit(c) - max);
    if (has_nan) sum = std::numeric_limits<double>::quiet_NaN();
    const double log_sum = std::log(sum);
    for (std::int64_t c = 0; c < a.cols; ++c) {
      double p = a.log ? -inf : 0.0;  // columns the row does not see
      if (c < visible && !empty) p = a.log ? logit(c) - max - log_sum : std::exp(logit(c) - max) / sum;
      store(a.y, a.y_dtype, yo + c * a.y_col_stride, float(p));
    }
  }
}

}  // namespace tessera::kernels::ref
