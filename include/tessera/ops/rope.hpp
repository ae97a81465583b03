#pragma once
// Rotary position embedding, ONNX RotaryEmbedding style: x [B, S, H, D]
// (any strides, so a [B, H, S, D] tensor is passed as a permuted view),
// position_ids [B, S] or [S] (i32 or i64), cos/sin caches [max_pos, R/2] f32
// where R = rotary dim <= D; features past R pass through unchanged.
#include <cstdint>
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

// How a model trained at one context length reaches a longer one: Hugging
// Face's rope_scaling, which changes each pair's frequency (and, for YaRN,
// the caches' magnitude). The dynamic NTK form, which depends on the
// current length, is a cache per length: rope_cache with a larger theta.
enum class RopeScalingType {
  none,
  linear,  // position interpolation: every frequency divided by factor
  llama3,  // Llama 3.1+: low frequencies divided by factor, high ones kept, a smooth ramp between
  yarn,    // YaRN (Qwen2.5, gpt-oss, DeepSeek): a ramp from kept to divided by factor, cos and sin scaled
};

struct RopeScaling {
  RopeScalingType type = RopeScalingType::none;
  double factor = 1.0;                      // the extension of the context, >= 1
  std::int64_t original_max_positions = 0;  // llama3, yarn: the trained context (original_max_position_embeddings)
  double low_freq_factor = 1.0;             // llama3: wavelengths past original / low_freq_factor are divided
  double high_freq_factor = 4.0;            // llama3: wavelengths under original / high_freq_factor are kept
  double beta_fast = 32.0;                  // yarn: pairs turning more than beta_fast times over the trained context are kept,
  double beta_slow = 1.0;                   //   fewer than beta_slow divided, a linear ramp between
  bool truncate = true;                     // yarn: the ramp's ends rounded out to whole pairs (gpt-oss: false)
  // yarn: cos and sin times it; 0: 0.1 ln(factor) + 1. DeepSeek's configs
  // (mscale = mscale_all_dim, which transformers divides out) take 1.
  double attention_factor = 0.0;
};

// cos/sin caches for positions [0, max_pos) and rotary dim R: angle(p, i) =
// p * inv_freq(i), inv_freq(i) = theta^(-2i/R) as `scaling` changes it.
Result<std::pair<Tensor, Tensor>> rope_cache(std::int64_t max_pos, std::int64_t rotary_dim, double theta = 10000.0,
                                             const RopeScaling& scaling = {});

}  // namespace tessera::ops
