#pragma once
// Softmax over the last dim of x [..., Sq, Skv]: y = softmax(scale * x + mask),
// or with `log` y = log_softmax(scale * x + mask).
// causal: query row i (of Sq) sees key columns j <= i + (Skv - Sq), as in
// attention over a KV cache whose last Sq entries are the queries. Columns a
// row does not see give 0 (log: -inf, the log of that 0); a row with no
// visible finite logit (fully masked) is all zeros (log: all -inf), not NaN.
// A NaN logit makes its row's visible outputs NaN; so does +Inf (Inf - Inf).
// Any strides: x, mask or y strided along the last dim (softmax over another
// axis through a transposed view) go through contiguous copies in the plan's
// workspace.
#include <optional>

#include "tessera/ops/plan.hpp"
#include "tessera/runtime/context.hpp"

namespace tessera::ops {

struct SoftmaxAttrs {
  float scale = 1.0f;
  bool causal = false;
  bool log = false;  // log-softmax
};

struct Softmax {
  // Inputs {x} or {x, mask}; mask is additive and broadcasts (numpy rules) to x's shape.
  static Result<PlanPtr> plan(Context& ctx, const TensorDesc& x, const std::optional<TensorDesc>& mask,
                              const TensorDesc& y, const SoftmaxAttrs& attrs = {});
};

Status softmax(Stream& stream, const Tensor& x, const Tensor& y, const SoftmaxAttrs& attrs = {});
Status softmax(Stream& stream, const Tensor& x, const Tensor& mask, const Tensor& y, const SoftmaxAttrs& attrs = {});

}  // namespace tessera::ops
