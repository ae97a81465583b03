#pragma once
// Batched matrix multiplication C = A x B with numpy batch broadcasting:
// A [..., M, K], B [..., K, N], C [..., M, N]. Transposed operands are views
// (strides); no copy is made. A and B share a float dtype; C is f32 or that
// dtype; accumulation is in f32 or wider. C must not overlap A or B.
#include "tessera/ops/plan.hpp"
#include "tessera/runtime/context.hpp"

namespace tessera::ops {

struct Matmul {
  // Inputs {a, b}, outputs {c}.
  static Result<PlanPtr> plan(Context& ctx, const TensorDesc& a, const TensorDesc& b, const TensorDesc& c);
};

Status matmul(Stream& stream, const Tensor& a, const Tensor& b, const Tensor& c);

}  // namespace tessera::ops
