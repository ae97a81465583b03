#include "kernels/packed_weights.hpp"

#include "core/element.hpp"

namespace tessera::kernels {

float packed_value(const PackedB& p, std::int64_t k, std::int64_t n) {
  switch (p.dtype) {
    case DType::f32: return static_cast<const float*>(p.values)[(n / kPanelCols * p.k + k) * kPanelCols + n % kPanelCols];
    case DType::bf16: return bf16_to_f32(static_cast<const bf16_t*>(p.values)[tile_packed_index(p.dtype, padded_k(p.dtype, p.k), k, n)]);
    default: {
      const std::int64_t g = k / p.group_size;
      return float(quantized_at(p, k, n) - zero_point_at(p, g, n)) * detail::load(p.scales, p.scale_dtype, group_param_index(p, g, n));
    }
  }
}

}  // namespace tessera::kernels
