#pragma once
// Normalizations over the last dim (C) of x [..., C], each row on its own:
//   RmsNorm:   y = x / sqrt(mean(x^2) + eps) * gamma
//   LayerNorm: y = (x - mean(x)) / sqrt(var(x) + eps) * gamma + beta   (biased variance)
// gamma and beta [C] are optional: absent, they are 1 and 0. With axis,
// over x's dims from axis on instead (ONNX LayerNormalization's axis,
// PyTorch's normalized_shape of several dims), gamma and beta shaped as
// those dims; in x, residual, y and sum those dims must form one run (as in
// any view of a contiguous tensor that keeps them whole): other views of
// them, transposed ones included, are an error naming the operand (the
// contiguous copies below cover one normalized dim).
//
// AddRmsNorm and AddLayerNorm fuse the residual add of a transformer block:
// sum = x + residual is written (the next block's residual) and y is the norm
// of sum, read once from memory instead of three times. The sum is rounded to
// sum's dtype first and that rounded value is normalized, so the fused op
// gives what add() then the norm give.
//
// Run-time tensors, in this order (absent ones are left out):
//   inputs {x, [residual], [gamma], [beta]}, outputs {y, [sum]}
// residual, y and sum have x's shape. x, residual, y and sum may be strided
// views; those strided along the last dim (transposed views) go through
// contiguous copies in the plan's workspace. y may be the very same view as x
// (in-place); sum may be the very same view as x or as residual; any other
// overlap is an error. A row of zero spread gives beta (or 0) even with eps =
// 0. x with no elements to normalize is an error; x with no rows is an
// empty result.
//
// The one-shot functions take std::nullopt for an absent gamma or beta.
#include <optional>

#include "tessera/ops/plan.hpp"
#include "tessera/runtime/context.hpp"

namespace tessera::ops {

struct NormAttrs {
  float eps = 1e-6f;  // finite, >= 0
  int axis = -1;      // the first normalized dim (negative: from the end)
};

struct RmsNorm {
  static Result<PlanPtr> plan(Context& ctx, const TensorDesc& x, const std::optional<TensorDesc>& gamma,
                              const TensorDesc& y, const NormAttrs& attrs = {});
};

struct LayerNorm {
  static Result<PlanPtr> plan(Context& ctx, const TensorDesc& x, const std::optional<TensorDesc>& gamma,
                              const std::optional<TensorDesc>& beta, const TensorDesc& y, const NormAttrs& attrs = {});
};

struct AddRmsNorm {
  static Result<PlanPtr> plan(Context& ctx, const TensorDesc& x, const TensorDesc& residual,
                              const std::optional<TensorDesc>& gamma, const TensorDesc& y, const TensorDesc& sum,
                              const NormAttrs& attrs = {});
};

struct AddLayerNorm {
  static Result<PlanPtr> plan(Context& ctx, const TensorDesc& x, const TensorDesc& residual,
                              const std::optional<TensorDesc>& gamma, const std::optional<TensorDesc>& beta,
                              const TensorDesc& y, const TensorDesc& sum, const NormAttrs& attrs = {});
};

Status rms_norm(Stream& stream, const Tensor& x, const std::optional<Tensor>& gamma, const Tensor& y,
                const NormAttrs& attrs = {});
Status layer_norm(Stream& stream, const Tensor& x, const std::optional<Tensor>& gamma,
                  const std::optional<Tensor>& beta, const Tensor& y, const NormAttrs& attrs = {});
Status add_rms_norm(Stream& stream, const Tensor& x, const Tensor& residual, const std::optional<Tensor>& gamma,
                    const Tensor& y, const Tensor& sum, const NormAttrs& attrs = {});
Status add_layer_norm(Stream& stream, const Tensor& x, const Tensor& residual, const std::optional<Tensor>& gamma,
                      const std::optional<Tensor>& beta, const Tensor& y, const Tensor& sum, const NormAttrs& attrs = {});

}  // namespace tessera::ops
