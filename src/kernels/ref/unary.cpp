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
      case UnaryKind::silu: {
        // x * sigmoid(x) from exp(-|x|), exact in the tails; the limit -0 at -inf.
        const double e = std::exp(-std::abs(x));
        y = std::isinf(x) && x < 0 ? -0.0 : x * (x >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e));
        break;
      }
    }
    store(a.y, a.y_dtype, i * a.y_stride, float(y));
  }
}

}  // namespace tessera::kernels::ref
