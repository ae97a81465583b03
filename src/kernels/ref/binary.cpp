#include "kernels/binary.hpp"
#include "core/element.hpp"

namespace tessera::kernels::ref {

using namespace tessera::detail;  // load / store / load_index

void binary(const BinaryArgs& a) {
  for (std::int64_t i = 0; i < a.n; ++i) {
    const float x = load(a.a, a.a_dtype, i * a.a_stride);
    const float y = load(a.b, a.b_dtype, i * a.b_stride);
    store(a.y, a.y_dtype, i * a.y_stride, a.kind == BinaryKind::add ? x + y : x * y);
  }
}

}  // namespace tessera::kernels::ref
