#include "tessera/core/compare.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/element.hpp"
#include "core/strided.hpp"

namespace tessera {

Tolerance tolerance_for(DType dtype, std::int64_t reduction) {
  const double grow = std::sqrt(double(std::max<std::int64_t>(reduction, 1)));
  switch (dtype) {
    case DType::bf16: return {1e-2 * grow, 1e-2, 0.999};
    case DType::f16: return {2e-3 * grow, 2e-3, 0.9999};
    case DType::f32: return {1e-5 * grow, 1e-5, 0.99999};
    default: return {0.0, 0.0, 1.0};  // integers: exact
  }
}

Tolerance tolerance_for_int8_kv_cache() { return {2e-2, 2e-2, 0.999}; }

std::string Comparison::to_string() const {
  return fmt::format("n={} mismatches={} max_abs={:.3g} max_rel={:.3g} cosine={:.8f} nan(got/ref)={}/{} inf(got/ref)={}/{}{}",
                     count, mismatches, max_abs_error, max_rel_error, cosine, nan_got, nan_ref, inf_got, inf_ref,
                     first_mismatch >= 0 ? fmt::format(" first_mismatch@{}", first_mismatch) : "");
}

Result<Comparison> compare(const Tensor& got, const Tensor& ref, const Tolerance& tol) {
  if (!(got.shape() == ref.shape()))
    return Status::invalid_argument(fmt::format("ref: shape {} differs from got's shape {}", ref.shape().to_string(), got.shape().to_string()));
  if (got.dtype() == DType::i4 || ref.dtype() == DType::i4) return Status::unsupported("compare: i4 tensors are not compared element-wise");
  Comparison c;
  const auto dims = detail::collapse<2>(got.shape(), {got.strides(), ref.strides()});
  const std::int64_t n = got.numel();
  double dot = 0, norm_g = 0, norm_r = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto off = dims.offsets(i);
    const double g = detail::load(got.data(), got.dtype(), off[0]);
    const double r = detail::load(ref.data(), ref.dtype(), off[1]);
    ++c.count;
    c.nan_got += std::isnan(g), c.nan_ref += std::isnan(r);
    c.inf_got += std::isinf(g), c.inf_ref += std::isinf(r);
    bool ok;
    if (std::isnan(r) || std::isnan(g)) {
      ok = std::isnan(r) && std::isnan(g);
    } else if (std::isinf(r) || std::isinf(g)) {
      ok = g == r;
    } else {
      const double err = std::abs(g - r);
      c.max_abs_error = std::max(c.max_abs_error, err);
      c.max_rel_error = std::max(c.max_rel_error, err / std::max(std::abs(r), 1e-6));
      ok = err <= tol.atol + tol.rtol * std::abs(r);
      dot += g * r, norm_g += g * g, norm_r += r * r;
    }
    if (!ok && c.mismatches++ == 0) c.first_mismatch = i;
  }
  if (norm_g > 0 && norm_r > 0) {
    c.cosine = dot / std::sqrt(norm_g * norm_r);
  } else if (norm_g != norm_r) {
    c.cosine = 0.0;  // one side all zeros, the other not
  }
  return c;
}

}  // namespace tessera
