#include <cmath>
#include <limits>

#include "core/element.hpp"
#include "kernels/reduce.hpp"

namespace tessera::kernels::ref {

using namespace tessera::detail;  // load / store

namespace {
// The index of the first largest (argmax) or smallest value, or of the first NaN.
std::int64_t arg_extreme(const ReduceArgs& a, std::int64_t j) {
  std::int64_t best = 0;
  float best_v = 0.0f;
  for (std::int64_t r = 0; r < a.length; ++r) {
    const float v = load(a.x, a.x_dtype, j * a.x_stride + r * a.x_step);
    if (std::isnan(v)) return r;
    if (r == 0 || (a.kind == ReduceKind::argmax ? v > best_v : v < best_v)) best = r, best_v = v;
  }
  return best;
}

// max + log(sum of exp(v - max)) over the output's elements, in f64: NaN
// if one is NaN, the infinite max itself if it is infinite (no sum of
// exp(inf - inf)), -inf for none.
double log_sum_exp(const ReduceArgs& a, std::int64_t j) {
  double m = -std::numeric_limits<double>::infinity(), s = 0.0;
  for (std::int64_t r = 0; r < a.length; ++r) {
    const double v = load(a.x, a.x_dtype, j * a.x_stride + r * a.x_step);
    if (std::isnan(v)) return v;
    m = std::max(m, v);
  }
  if (std::isinf(m)) return m;
  for (std::int64_t r = 0; r < a.length; ++r) s += std::exp(double(load(a.x, a.x_dtype, j * a.x_stride + r * a.x_step)) - m);
  return m + std::log(s);
}

double term(ReduceTerm t, double v) { return t == ReduceTerm::abs ? std::fabs(v) : t == ReduceTerm::square ? v * v : v; }
}  // namespace

void reduce(const ReduceArgs& a) {
  if (a.kind == ReduceKind::argmax || a.kind == ReduceKind::argmin) {
    for (std::int64_t j = 0; j < a.n; ++j) store_int(a.y, a.y_dtype, j * a.y_stride, arg_extreme(a, j));
    return;
  }
  if (a.kind == ReduceKind::log_sum_exp) {
    for (std::int64_t j = 0; j < a.n; ++j) store(a.y, a.y_dtype, j * a.y_stride, float(log_sum_exp(a, j)));
    return;
  }
  const bool max = a.kind == ReduceKind::max, min = a.kind == ReduceKind::min, prod = a.kind == ReduceKind::prod;
  for (std::int64_t j = 0; j < a.n; ++j) {
    double acc = max ? -std::numeric_limits<double>::infinity() : min ? std::numeric_limits<double>::infinity() : prod ? 1.0 : 0.0;
    for (std::int64_t r = 0; r < a.length; ++r) {
      const double v = load(a.x, a.x_dtype, j * a.x_stride + r * a.x_step);
      if (prod)
        acc *= v;
      else if (!max && !min)
        acc += term(a.term, v);
      else if (std::isnan(v) || (max ? v > acc : v < acc))  // once NaN, nothing compares past it: NaN stays
        acc = v;
    }
    if (a.kind == ReduceKind::mean) acc /= double(a.length);
    store(a.y, a.y_dtype, j * a.y_stride, float(finish_sum(a.finish, acc)));
  }
}

}  // namespace tessera::kernels::ref
