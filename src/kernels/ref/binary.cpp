#include <cmath>

#include "core/element.hpp"
#include "kernels/binary.hpp"

namespace tessera::kernels::ref {

using namespace tessera::detail;  // load / store / load_index

namespace {
float apply(BinaryKind kind, float x, float y) {
  switch (kind) {
    case BinaryKind::add: return x + y;
    case BinaryKind::sub: return x - y;
    case BinaryKind::mul: return x * y;
    case BinaryKind::div: return x / y;
    case BinaryKind::max: return std::isnan(x) || std::isnan(y) ? x + y : std::max(x, y);
    case BinaryKind::min: return std::isnan(x) || std::isnan(y) ? x + y : std::min(x, y);
  }
  return x;
}
}  // namespace

void binary(const BinaryArgs& a) {
  for (std::int64_t i = 0; i < a.n; ++i)
    store(a.y, a.y_dtype, i * a.y_stride, apply(a.kind, load(a.a, a.a_dtype, i * a.a_stride), load(a.b, a.b_dtype, i * a.b_stride)));
}

}  // namespace tessera::kernels::ref
