#include <cmath>
#include <limits>

#include "core/element.hpp"
#include "kernels/reduce.hpp"

namespace tessera::kernels::ref {

using namespace tessera::detail;  // load / store

void reduce(const ReduceArgs& a) {
  for (std::int64_t j = 0; j < a.n; ++j) {
    double acc = a.kind == ReduceKind::max ? -std::numeric_limits<double>::infinity() : 0.0;
    for (std::int64_t r = 0; r < a.length; ++r) {
      const double v = load(a.x, a.x_dtype, j * a.x_stride + r * a.x_step);
      if (a.kind != ReduceKind::max)
        acc += v;
      else if (std::isnan(v) || v > acc)  // once NaN, nothing compares greater: NaN stays
        acc = v;
    }
    if (a.kind == ReduceKind::mean) acc /= double(a.length);
    store(a.y, a.y_dtype, j * a.y_stride, float(acc));
  }
}

}  // namespace tessera::kernels::ref
