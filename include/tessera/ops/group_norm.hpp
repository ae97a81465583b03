#pragma once
// GroupNorm over x [N, C, spatial...] (channels first, NCHW) or
// [N, spatial..., C] (channels_last, NHWC), rank >= 2 (no spatial dims: one
// value per channel). The C channels form `groups` groups of C / groups
// consecutive channels; each (n, group) is normalized by its own mean and
// (biased) variance, then scaled and shifted per channel:
//   y = act((v - mean) / sqrt(var + eps) * gamma[c] + beta[c]) [* mul]
// with v = x, act = silu when attrs.silu (else the identity). gamma and beta
// [C] are optional: absent, they are 1 and 0.
//
// The fused form, the seeds' fused_residual_groupnorm_silu_mul of a diffusion
// ResNet block, adds to that (GroupNormFusion), each shaped like x:
//   residual: v = x + residual;
//   sum:      an output, v rounded to sum's dtype (the next block's residual);
//             the statistics and y use that rounded value, so the fused op
//             gives what add() then the group norm of the sum give;
//   mul:      y is multiplied by it last.
//
// Run-time tensors, in this order (absent ones are left out):
//   inputs {x, [residual], [gamma], [beta], [mul]}, outputs {y, [sum]}
// Storage f32, f16 or bf16, each operand its own; compute in f32, the
// statistics in f64. Operands may be strided views. y may be the very same
// view as x (in place); sum may be the very same view as x or as residual;
// any other overlap is an error. A group of zero spread normalizes to 0
// (y = act(beta) [* mul]), even with eps = 0. Any dim of size 0 gives an
// empty result.
#include <cstdint>
#include <optional>

#include "tessera/ops/plan.hpp"
#include "tessera/runtime/context.hpp"

namespace tessera::ops {

struct GroupNormAttrs {
  std::int64_t groups = 32;    // > 0, divides C
  float eps = 1e-5f;           // finite, >= 0
  bool channels_last = false;  // NHWC: C is the last dim
  bool silu = false;
};

struct GroupNormFusion {
  std::optional<TensorDesc> residual = std::nullopt;
  std::optional<TensorDesc> mul = std::nullopt;
  std::optional<TensorDesc> sum = std::nullopt;
};

struct GroupNorm {
  static Result<PlanPtr> plan(Context& ctx, const TensorDesc& x, const std::optional<TensorDesc>& gamma,
                              const std::optional<TensorDesc>& beta, const TensorDesc& y,
                              const GroupNormAttrs& attrs = {}, const GroupNormFusion& fusion = {});
};

// The one-shot functions take std::nullopt for an absent gamma, beta, mul or sum.
Status group_norm(Stream& stream, const Tensor& x, const std::optional<Tensor>& gamma,
                  const std::optional<Tensor>& beta, const Tensor& y, const GroupNormAttrs& attrs = {});
Status residual_group_norm(Stream& stream, const Tensor& x, const Tensor& residual, const std::optional<Tensor>& gamma,
                           const std::optional<Tensor>& beta, const Tensor& y, const GroupNormAttrs& attrs = {},
                           const std::optional<Tensor>& mul = std::nullopt,
                           const std::optional<Tensor>& sum = std::nullopt);

}  // namespace tessera::ops
