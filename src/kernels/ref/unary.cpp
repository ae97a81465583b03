#include "core/element.hpp"
#include "kernels/unary.hpp"

namespace tessera::kernels::ref {

using namespace tessera::detail;  // load / store / load_index

void unary(const UnaryArgs& a) {
  for (std::int64_t i = 0; i < a.n; ++i) {
    // The cast stays in f32: through f64 a signaling NaN would come out quieted, unlike the SIMD rows' bit moves.
    const float x = load(a.x, a.x_dtype, i * a.x_stride);
    store(a.y, a.y_dtype, i * a.y_stride, a.act == Act::none ? x : float(activate(x, a.act)));
  }
}

}  // namespace tessera::kernels::ref
