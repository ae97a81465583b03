#include "core/element.hpp"
#include "kernels/norm.hpp"

namespace tessera::kernels::ref {

using namespace tessera::detail;  // load / store

// The definition the SIMD rows are tested against: statistics in f64, two
// passes (mean, then centered squares), the output from the same f64 values.
void norm(const NormArgs& a, std::int64_t r0, std::int64_t r1) {
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::int64_t xo = r * a.x_row_stride, yo = r * a.y_row_stride;
    const void* v = a.x;
    DType v_dtype = a.x_dtype;
    std::int64_t vo = xo, v_stride = a.x_col_stride;
    if (a.residual) {
      // The sum is computed as add() computes it (f32) and normalized as stored,
      // so that the fused op equals add() followed by the norm.
      const std::int64_t ro = r * a.residual_row_stride, so = r * a.sum_row_stride;
      for (std::int64_t c = 0; c < a.cols; ++c)
        store(a.sum, a.sum_dtype, so + c * a.sum_col_stride,
              load(a.x, a.x_dtype, xo + c * a.x_col_stride) + load(a.residual, a.residual_dtype, ro + c * a.residual_col_stride));
      v = a.sum, v_dtype = a.sum_dtype, vo = so, v_stride = a.sum_col_stride;
    }
    const auto at = [&](std::int64_t c) -> double { return load(v, v_dtype, vo + c * v_stride); };
    double mean = 0.0;
    if (a.kind == NormKind::layer) {
      for (std::int64_t c = 0; c < a.cols; ++c) mean += at(c);
      mean /= double(a.cols);
    }
    double var = 0.0;
    for (std::int64_t c = 0; c < a.cols; ++c) {
      const double d = at(c) - mean;
      var += d * d;
    }
    const double inv = inv_std(var / double(a.cols), a.eps);
    for (std::int64_t c = 0; c < a.cols; ++c) {
      const double g = a.gamma ? load(a.gamma, a.gamma_dtype, c * a.gamma_stride) : 1.0;
      const double b = a.beta ? load(a.beta, a.beta_dtype, c * a.beta_stride) : 0.0;
      store(a.y, a.y_dtype, yo + c * a.y_col_stride, float((at(c) - mean) * inv * g + b));
    }
  }
}

}  // namespace tessera::kernels::ref
