#include "core/element.hpp"
#include "kernels/gated.hpp"

namespace tessera::kernels::ref {

using namespace tessera::detail;  // load / store / load_index

void gated(const GatedArgs& a) {
  for (std::int64_t i = 0; i < a.n; ++i) {
    double v = activate(load(a.a, a.a_dtype, i * a.a_stride), a.act) * double(load(a.b, a.b_dtype, i * a.b_stride));
    if (a.c) v += load(a.c, a.c_dtype, i * a.c_stride);
    store(a.y, a.y_dtype, i * a.y_stride, float(v));
  }
}

}  // namespace tessera::kernels::ref
