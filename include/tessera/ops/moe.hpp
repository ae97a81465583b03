#pragma once
// Mixture-of-experts routing (Mixtral, Qwen-MoE, DeepSeek, gpt-oss), around
// the experts' own GEMMs. After top_k has picked each of T tokens' k experts
// (and softmax, or the model's own rule, their weights):
//   moe_permute groups the T x k (token, slot) pairs by expert: permuted row
//     p holds token rows[p], expert e's rows are [offsets[e], offsets[e + 1])
//     in token order, and positions[t, j] is the row of token t's slot j;
//   embedding(x, rows, x_perm) lays the experts' inputs out, one row a pair;
//   each expert's FFN (linear, swiglu, ...) runs on its slice of x_perm;
//   moe_combine sums each token's k expert outputs, weighted:
//     out[t, :] = Σ_j weights[t, j] · y[positions[t, j], :].
// Index tensors are i32 or i64, each its own choice.
#include <cstdint>

#include "tessera/ops/plan.hpp"
#include "tessera/runtime/context.hpp"

namespace tessera::ops {

struct MoePermute {
  // Inputs {experts [T, k]}, outputs {rows [T k], offsets [num_experts + 1],
  // positions [T, k]}. An expert id outside [0, num_experts) is reported by
  // run(), naming its value, and nothing is written then.
  static Result<PlanPtr> plan(Context& ctx, const TensorDesc& experts, std::int64_t num_experts, const TensorDesc& rows,
                              const TensorDesc& offsets, const TensorDesc& positions);
};

Status moe_permute(Stream& stream, const Tensor& experts, std::int64_t num_experts, const Tensor& rows, const Tensor& offsets,
                   const Tensor& positions);

struct MoeCombine {
  // Inputs {y [R, H], weights [T, k], positions [T, k]}, outputs {out [T, H]}.
  // y and out float (f32, bf16, f16), weights any float dtype; the sum is f32.
  // A position outside [0, R) is reported by run(), naming its value, and
  // nothing is written then. out may not overlap an input.
  static Result<PlanPtr> plan(Context& ctx, const TensorDesc& y, const TensorDesc& weights, const TensorDesc& positions,
                              const TensorDesc& out);
};

Status moe_combine(Stream& stream, const Tensor& y, const Tensor& weights, const Tensor& positions, const Tensor& out);

}  // namespace tessera::ops
