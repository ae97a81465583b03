#pragma once
// Rotary position embedding, ONNX RotaryEmbedding style: x [B, S, H, D]
// (any strides, so a [B, H, S, D] tensor is passed as a permuted view),
// position_ids [B, S] or [S] (i32 or i64), cos/sin caches [max_pos, R/2] f32
// where R = rotary dim <= D; features past R pass through unchanged.
#include <utility>

#include "tessera/ops/plan.hpp"
#include "tessera/runtime/context.hpp"

namespace tessera::ops {

struct RopeAttrs {
  // false: pairs (i, i + R/2) — GPT-NeoX / HF Llama; true: pairs (2i, 2i+1) — GPT-J / Meta Llama.
  bool interleaved = false;
};

struct Rope {
  // Inputs {x, position_ids, cos_cache, sin_cache}, outputs {y} with x's shape.
  // A position outside [0, max_pos) is reported by run() (nothing is written).
  static Result<PlanPtr> plan(Context& ctx, const TensorDesc& x, const TensorDesc& position_ids,
                              const TensorDesc& cos_cache, const TensorDesc& sin_cache, const TensorDesc& y,
                              const RopeAttrs& attrs = {});
};

Status rope(Stream& stream, const Tensor& x, const Tensor& position_ids, const Tensor& cos_cache,
            const Tensor& sin_cache, const Tensor& y, const RopeAttrs& attrs = {});

// cos/sin caches for positions [0, max_pos) and rotary dim R: angle(p, i) = p * theta^(-2i/R).
Result<std::pair<Tensor, Tensor>> rope_cache(std::int64_t max_pos, std::int64_t rotary_dim, double theta = 10000.0);

}  // namespace tessera::ops
