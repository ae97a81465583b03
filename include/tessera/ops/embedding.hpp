#pragma once
// Embedding lookup (gather of rows): out[..., :] = table[ids[...], :].
#include "tessera/ops/plan.hpp"
#include "tessera/runtime/context.hpp"

namespace tessera::ops {

struct Embedding {
  // Inputs {table [V, H], ids [...] (i32 or i64)}, outputs {out [..., H]} in table's dtype.
  // An id outside [0, V) is reported by run(), naming its position; nothing is written then.
  static Result<PlanPtr> plan(Context& ctx, const TensorDesc& table, const TensorDesc& ids, const TensorDesc& out);
};

Status embedding(Stream& stream, const Tensor& table, const Tensor& ids, const Tensor& out);

}  // namespace tessera::ops
