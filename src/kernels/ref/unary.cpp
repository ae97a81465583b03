#include <cmath>

#include "core/element.hpp"
#include "kernels/unary.hpp"

namespace tessera::kernels::ref {

using namespace tessera::detail;  // load / store / load_index

void unary(const UnaryArgs& a) {
  for (std::int64_t i = 0; i < a.n; ++i) {
    const double x = load(a.x, a.x_dtype, i * a.x_stride);
    double y = x;
    switch (a.kind) {
      case UnaryKind::identity: break;
      case UnaryKind::silu: y = x / (1.0 + std::exp(-x)); break;
    }
    store(a.y, a.y_dtype, i * a.y_stride, float(y));
  }
}

}  // namespace tessera::kernels::ref
