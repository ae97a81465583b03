#pragma once
// RMSNorm over the last dim: y = x / sqrt(mean(x^2) + eps) * gamma.
#include "tessera/ops/plan.hpp"
#include "tessera/runtime/context.hpp"

namespace tessera::ops {

struct RmsNormAttrs {
  float eps = 1e-6f;
};

struct RmsNorm {
  // Inputs {x [..., C], gamma [C]}, outputs {y} with x's shape. In-place (y the same view as x) is allowed.
  static Result<PlanPtr> plan(Context& ctx, const TensorDesc& x, const TensorDesc& gamma, const TensorDesc& y,
                              const RmsNormAttrs& attrs = {});
};

Status rms_norm(Stream& stream, const Tensor& x, const Tensor& gamma, const Tensor& y, const RmsNormAttrs& attrs = {});

}  // namespace tessera::ops
