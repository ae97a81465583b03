#include <cmath>
#include <limits>

#include "core/element.hpp"
#include "kernels/unary.hpp"

namespace tessera::kernels::ref {

using namespace tessera::detail;  // load / store / load_index

namespace {

// f truncated toward zero and clamped to integer type t's range; NaN gives 0.
template <class I>
std::int64_t truncated_as(float f) {
  using L = std::numeric_limits<I>;
  if (std::isnan(f)) return 0;
  if (f <= float(L::min())) return L::min();  // float(min) is exact: 0 or -2^(bits-1)
  if (f >= float(L::max())) return L::max();  // float(max) is max, or 2^(bits-1) (i32, i64)
  return static_cast<std::int64_t>(f);
}
std::int64_t truncated(float f, DType t) {
  switch (t) {
    case DType::i8: return truncated_as<std::int8_t>(f);
    case DType::u8: return truncated_as<std::uint8_t>(f);
    case DType::i32: return truncated_as<std::int32_t>(f);
    default: return truncated_as<std::int64_t>(f);
  }
}

// Casts with an integer side (ops::cast documents the rules).
void cast_integers(const UnaryArgs& a) {
  for (std::int64_t i = 0; i < a.n; ++i) {
    const std::int64_t xi = i * a.x_stride, yi = i * a.y_stride;
    if (is_floating(a.y_dtype))
      store(a.y, a.y_dtype, yi, static_cast<float>(load_index(a.x, a.x_dtype, xi)));
    else if (is_floating(a.x_dtype))
      store_int(a.y, a.y_dtype, yi, truncated(load(a.x, a.x_dtype, xi), a.y_dtype));
    else
      store_int(a.y, a.y_dtype, yi, load_index(a.x, a.x_dtype, xi));
  }
}

}  // namespace

void unary(const UnaryArgs& a) {
  if (!is_floating(a.x_dtype) || !is_floating(a.y_dtype)) return cast_integers(a);
  for (std::int64_t i = 0; i < a.n; ++i) {
    // The cast stays in f32: through f64 a signaling NaN would come out quieted, unlike the SIMD rows' bit moves.
    const float x = load(a.x, a.x_dtype, i * a.x_stride);
    store(a.y, a.y_dtype, i * a.y_stride, a.act == Act::none ? x : float(activate(x, a.act)));
  }
}

}  // namespace tessera::kernels::ref
