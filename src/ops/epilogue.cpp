#include "ops/epilogue.hpp"

#include <fmt/format.h>

#include <cmath>

#include "ops/common.hpp"

namespace tessera::ops::detail {

Status check_epilogue(const Epilogue& e, std::int64_t n, const TensorDesc& out, std::string_view out_name) {
  if (!std::isfinite(e.scale)) return Status::invalid_argument(fmt::format("epilogue.scale: {} must be finite", e.scale));
  if (e.activation > kLastActivation)
    return Status::invalid_argument(fmt::format("epilogue.activation: unknown value {}", int(e.activation)));
  if (e.bias) {
    const TensorDesc& b = *e.bias;
    TESSERA_RETURN_IF_ERROR(b.validate("bias"));
    TESSERA_RETURN_IF_ERROR(check_float(b, "bias"));
    TESSERA_RETURN_IF_ERROR(check_same_shape(b, "bias", Shape{n}, "[N] ="));
    if (n > 1 && b.strides[0] != 1)
      return Status::invalid_argument(fmt::format("bias: stride {} must be 1 (a contiguous [N] vector)", b.strides[0]));
  }
  if (e.residual) {
    TESSERA_RETURN_IF_ERROR(e.residual->validate("residual"));
    TESSERA_RETURN_IF_ERROR(check_float(*e.residual, "residual"));
    TESSERA_RETURN_IF_ERROR(check_same_shape(*e.residual, "residual", out.shape, fmt::format("{}'s shape", out_name)));
  }
  return {};
}

Epilogue add_epilogue(const EpilogueTensors& e, std::vector<Tensor>& in, PlanKey& key, std::int64_t planned_rows) {
  Epilogue ep{e.scale, e.activation, {}, {}};
  key.add(e.scale).add(std::int64_t(e.activation));
  if (e.bias.defined()) ep.bias = e.bias.desc(), in.push_back(e.bias), key.add(*ep.bias);
  key.add(std::int64_t(-1));  // separates the optional descs
  if (e.residual.defined()) {
    ep.residual = e.residual.desc();
    if (planned_rows >= 0) ep.residual->shape[0] = planned_rows;
    in.push_back(e.residual), key.add(*ep.residual);
  }
  return ep;
}

}  // namespace tessera::ops::detail
