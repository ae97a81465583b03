#pragma once
// Top-k (ONNX TopK, torch.topk): the k largest (or smallest) elements of x
// along one axis and their indices, in order, best first — MoE routing's
// experts per token, top-k sampling over logits. values and indices have
// x's shape with the axis's length k; values x's dtype (f32, f16 or bf16;
// each the element itself, bits and all), indices i64 or i32 along the
// axis. A NaN is larger than every number (PyTorch's rule); equal elements
// (-0 and +0 among them) and NaNs go by index, the lower first (ONNX's).
// Always sorted: ONNX's sorted = 0 allows any order, this one among them.
#include <cstdint>

#include "tessera/ops/plan.hpp"
#include "tessera/runtime/context.hpp"

namespace tessera::ops {

struct TopKAttrs {
  std::int64_t k = 1;    // 0 .. the axis's length
  int axis = -1;         // negative: from the end
  bool largest = true;   // false: the k smallest
};

struct TopK {
  // Inputs {x}, outputs {values, indices}; neither output may overlap x or the other.
  static Result<PlanPtr> plan(Context& ctx, const TensorDesc& x, const TensorDesc& values, const TensorDesc& indices,
                              const TopKAttrs& attrs);
};

Status top_k(Stream& stream, const Tensor& x, const Tensor& values, const Tensor& indices, const TopKAttrs& attrs);

}  // namespace tessera::ops
