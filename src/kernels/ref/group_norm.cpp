#include "core/element.hpp"
#include "kernels/activation.hpp"
#include "kernels/group_norm.hpp"

namespace tessera::kernels::ref {

using namespace tessera::detail;  // load / store

namespace {

std::int64_t offset(const GroupNormOperand& o, std::int64_t line, std::int64_t i) {
  return line * o.line_stride + i * o.stride;
}

// The residual add in f32, as add() does it, so that sum matches add() bit for bit.
double input(const GroupNormLines& a, std::int64_t line, std::int64_t i) {
  float v = load(a.x.data, a.x.dtype, offset(a.x, line, i));
  if (a.residual.data) v += load(a.residual.data, a.residual.dtype, offset(a.residual, line, i));
  return v;
}

// v as the statistics see it: written to sum when there is one, and read back rounded.
double stats_value(const GroupNormLines& a, std::int64_t line, std::int64_t i) {
  const double v = input(a, line, i);
  if (!a.sum.data) return v;
  const std::int64_t o = offset(a.sum, line, i);
  store(a.sum.data, a.sum.dtype, o, float(v));
  return load(a.sum.data, a.sum.dtype, o);
}

}  // namespace

void group_norm_run_stats(const GroupNormLines& a, float shift, double* sums) {
  for (std::int64_t l = 0; l < a.lines; ++l)
    for (std::int64_t i = 0; i < a.len; ++i) {
      const double d = stats_value(a, l, i) - double(shift);
      sums[0] += d;
      sums[1] += d * d;
    }
}

void group_norm_column_stats(const GroupNormLines& a, const float* shift, double* sums, float*) {
  for (std::int64_t l = 0; l < a.lines; ++l)
    for (std::int64_t i = 0; i < a.len; ++i) {
      const double d = stats_value(a, l, i) - double(shift[i]);
      sums[i] += d;
      sums[a.len + i] += d * d;
    }
}

void group_norm_apply(const GroupNormLines& a, const GroupNormCoefs& c) {
  for (std::int64_t l = 0; l < a.lines; ++l)
    for (std::int64_t i = 0; i < a.len; ++i) {
      const double v = a.sum.data ? double(load(a.sum.data, a.sum.dtype, offset(a.sum, l, i))) : input(a, l, i);
      const std::int64_t k = i * c.stride;
      double t = (v - double(c.mean[k])) * double(c.scale[k]) + double(c.bias[k]);
      if (c.silu) t = activate(t, Act::silu);
      if (a.mul.data) t *= load(a.mul.data, a.mul.dtype, offset(a.mul, l, i));
      store(a.y.data, a.y.dtype, offset(a.y, l, i), float(t));
    }
}

}  // namespace tessera::kernels::ref
