#include "core/element.hpp"
#include "kernels/quantize.hpp"

namespace tessera::kernels::ref {

using tessera::detail::load;
using tessera::detail::store;

namespace {
// i4: read-modify-write of the element's nibble (the op layer keeps tasks
// from sharing a byte).
void store_quantized(void* base, DType t, std::int64_t i, int v) {
  auto* bytes = static_cast<std::uint8_t*>(base);
  if (t == DType::i4) {
    std::uint8_t& byte = bytes[i >> 1];
    byte = std::uint8_t((i & 1) ? (byte & 0x0f) | (v << 4) : (byte & 0xf0) | (v & 0x0f));
  } else {
    bytes[i] = std::uint8_t(v);  // i8 and u8: the low byte is the value
  }
}
}  // namespace

void quantize(const QuantArgs& a, std::int64_t i0, std::int64_t i1) {
  const QuantRange range = quant_range(a.y_dtype);
  for (std::int64_t i = i0; i < i1; ++i) {
    const std::int64_t g = i / a.group;
    const float s = load(a.scale, a.scale_dtype, a.scale_offset + g * a.scale_stride);
    const int z = a.zp ? quantized_at(a.zp, a.zp_dtype, a.zp_offset + g * a.zp_stride) : 0;
    const float x = load(a.x, a.x_dtype, a.x_offset + i * a.x_stride);
    store_quantized(a.y, a.y_dtype, a.y_offset + i * a.y_stride, quantize_value(x, s, z, range.lo, range.hi));
  }
}

void dequantize(const QuantArgs& a, std::int64_t i0, std::int64_t i1) {
  for (std::int64_t i = i0; i < i1; ++i) {
    const std::int64_t g = i / a.group;
    const double s = load(a.scale, a.scale_dtype, a.scale_offset + g * a.scale_stride);
    const std::int64_t z = a.zp ? quantized_at(a.zp, a.zp_dtype, a.zp_offset + g * a.zp_stride) : 0;
    const std::int64_t q = quantized_at(a.x, a.x_dtype, a.x_offset + i * a.x_stride);
    // Exact difference; for 8- and 4-bit inputs the f64 product is exact too,
    // so the result is rounded once, as the f32 SIMD rows round it.
    store(a.y, a.y_dtype, a.y_offset + i * a.y_stride, float(double(q - z) * s));
  }
}

}  // namespace tessera::kernels::ref
