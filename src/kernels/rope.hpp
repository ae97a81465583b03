#pragma once
// Rotary embedding family: rotates the first rot_dim features of each head of
// one token by the angles of its position. Half style pairs feature i with
// i + rot_dim/2 (GPT-NeoX, Llama in HF); interleaved pairs 2i with 2i+1 (GPT-J,
// Meta's Llama). Features past rot_dim are copied.
#include <cstdint>
#include <span>

#include "kernels/registry.hpp"
#include "tessera/core/dtype.hpp"

namespace tessera::kernels {

struct RopeProblem {
  DType x, y;
  bool interleaved;
  bool unit_stride;  // x and y have stride 1 along the head dim
};

struct RopeArgs {
  DType x_dtype, y_dtype;
  bool interleaved;
  std::int64_t heads, head_dim, rot_dim;
  const void* x;
  std::int64_t x_head_stride, x_stride;
  void* y;
  std::int64_t y_head_stride, y_stride;
  const float* cos;  // rot_dim / 2 values for this token's position
  const float* sin;
};

struct RopeTiling {
  std::int64_t tokens_per_task;
};

struct RopeFamily {
  using Problem = RopeProblem;
  using Tiling = RopeTiling;
  using Run = void (*)(const RopeArgs&);
};

std::span<const KernelRow<RopeFamily>> rows(RopeFamily);

namespace ref { void rope(const RopeArgs& a); }
namespace avx2 { void rope(const RopeArgs& a); }
namespace avx512 { void rope(const RopeArgs& a); }

}  // namespace tessera::kernels
