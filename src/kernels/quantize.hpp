#pragma once
// Quantize / dequantize families (ONNX QuantizeLinear / DequantizeLinear, see
// tessera/ops/quantize.hpp for the numerics): one run of a strided view, with
// one scale (and zero point) per `group` consecutive run elements.
//
// The helpers below are `static`: the ISA translation units include this
// header, and a static function cannot leak an ISA-specific copy.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>

#include "kernels/dispatch.hpp"
#include "kernels/tiling.hpp"

namespace tessera::kernels {

// Run element i in [i0, i1) of a call:
//   x[x_offset + i * x_stride], y[y_offset + i * y_stride],
//   scale[scale_offset + (i / group) * scale_stride], the same for zp.
// Offsets and strides count elements from the tensors' first element (i4:
// nibbles). Quantize: x float, y integer; dequantize: x integer, y float.
struct QuantArgs {
  DType x_dtype, y_dtype, scale_dtype, zp_dtype;
  const void* x;
  std::int64_t x_offset, x_stride;
  void* y;
  std::int64_t y_offset, y_stride;
  const void* scale;
  std::int64_t scale_offset, scale_stride;
  const void* zp;  // null: zero point 0
  std::int64_t zp_offset, zp_stride;
  std::int64_t group;
  bool stream_y;  // streaming stores for y (ElementwiseTiling::stream_output)
};

struct QuantProblem {
  DType x, y, scale, zp;
  bool unit_stride;   // x and y have stride 1 along the run
  bool byte_aligned;  // every call's first i4 element (x or y) starts a byte
  std::int64_t n;     // elements in the whole op
};

using QuantRun = void (*)(const QuantArgs&, std::int64_t i0, std::int64_t i1);

struct QuantizeFamily {
  using Problem = QuantProblem;
  using Tiling = ElementwiseTiling;
  using Run = QuantRun;
};
struct DequantizeFamily {
  using Problem = QuantProblem;
  using Tiling = ElementwiseTiling;
  using Run = QuantRun;
};

std::span<const KernelRow<QuantizeFamily>> rows(QuantizeFamily);
std::span<const KernelRow<DequantizeFamily>> rows(DequantizeFamily);

// The saturation range of a quantized type (i8, u8, i4).
struct QuantRange {
  int lo, hi;
};
static inline QuantRange quant_range(DType t) {
  switch (t) {
    case DType::u8: return {0, 255};
    case DType::i4: return {-8, 7};
    default: return {-128, 127};
  }
}

// One quantized value: f32 division, round half to even (nearbyint in the
// default rounding mode), zero point added, saturated to [lo, hi]; NaN gives
// the zero point. Computed as: clamped to [lo - zero, hi - zero] first
// (integer bounds, so the order does not change the result), then rounded
// by adding and subtracting 1.5 * 2^23 (exact below 2^22): nearbyint is a
// call into libm that cost more than the rest (quantize_weights, billions
// of values).
static inline int quantize_value(float x, float scale, int zero, int lo, int hi) {
  const float q = x / scale;
  if (std::isnan(q)) return zero;
  const float c = std::clamp(q, float(lo - zero), float(hi - zero));
  return int((c + 0x1.8p23f) - 0x1.8p23f) + zero;
}

// Element i of an integer tensor (i8, u8, i4, i32), exactly.
static inline std::int32_t quantized_at(const void* base, DType t, std::int64_t i) {
  switch (t) {
    case DType::u8: return static_cast<const std::uint8_t*>(base)[i];
    case DType::i32: return static_cast<const std::int32_t*>(base)[i];
    case DType::i4: {
      const std::uint8_t byte = static_cast<const std::uint8_t*>(base)[i >> 1];
      return std::int32_t(std::int8_t(std::uint8_t((i & 1) ? byte & 0xf0 : byte << 4))) >> 4;  // sign-extend the nibble
    }
    default: return static_cast<const std::int8_t*>(base)[i];
  }
}

// The common layout: int8 or uint8 values, f32 scales per element of the run
// or one for it, no zero point. It is compiled per storage type with the
// arguments in locals (each ISA's quantize_scaled, dequantize_scaled): the generic
// loops test every layout and type per vector.
static inline bool common_quant_layout(const QuantArgs& a, DType q) {
  return (q == DType::i8 || q == DType::u8) && a.scale_dtype == DType::f32 && !a.zp &&
         (a.scale_stride == 0 || (a.group == 1 && a.scale_stride == 1));
}

// Calls f(float storage type, int8 storage type) as compile-time constants.
template <class F>
static inline void dispatch_quant_types(DType f, DType q, F&& fn) {
  dispatch_float(f, [&](auto ft) {
    if (q == DType::u8) fn(ft, std::integral_constant<DType, DType::u8>{});
    else fn(ft, std::integral_constant<DType, DType::i8>{});
  });
}

namespace ref {
void quantize(const QuantArgs& a, std::int64_t i0, std::int64_t i1);
void dequantize(const QuantArgs& a, std::int64_t i0, std::int64_t i1);
}  // namespace ref
namespace avx2 {
void quantize(const QuantArgs& a, std::int64_t i0, std::int64_t i1);
void dequantize(const QuantArgs& a, std::int64_t i0, std::int64_t i1);
}  // namespace avx2
namespace avx512 {
void quantize(const QuantArgs& a, std::int64_t i0, std::int64_t i1);
void dequantize(const QuantArgs& a, std::int64_t i0, std::int64_t i1);
}  // namespace avx512

}  // namespace tessera::kernels
