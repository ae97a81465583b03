#pragma once
// MoE combine family: out[t, :] = Σ_j weights[t, j] · y[positions[t, j], :]
// for tokens [t0, t1), summed in f32 in slot order. Positions are checked by
// the op layer before any row is read.
#include <cstdint>
#include <span>

#include "kernels/registry.hpp"
#include "kernels/tiling.hpp"
#include "tessera/core/dtype.hpp"

namespace tessera::kernels {

struct MoeCombineProblem {
  DType y, out;
  std::int64_t tokens, k, hidden;
  bool unit_stride;  // y's and out's rows with unit column strides
};

struct MoeCombineArgs {
  std::int64_t k, hidden;
  DType y_dtype;
  const void* y;
  std::int64_t y_row_stride, y_col_stride;
  DType weights_dtype;
  const void* weights;
  std::int64_t w_token_stride, w_slot_stride;
  DType positions_dtype;
  const void* positions;
  std::int64_t p_token_stride, p_slot_stride;
  DType out_dtype;
  void* out;
  std::int64_t out_row_stride, out_col_stride;
};

struct MoeCombineFamily {
  using Problem = MoeCombineProblem;
  using Tiling = ElementwiseTiling;  // grain: tokens per task
  using Run = void (*)(const MoeCombineArgs&, std::int64_t t0, std::int64_t t1);
};

std::span<const KernelRow<MoeCombineFamily>> rows(MoeCombineFamily);

namespace ref { void moe_combine(const MoeCombineArgs& a, std::int64_t t0, std::int64_t t1); }
namespace avx2 { void moe_combine(const MoeCombineArgs& a, std::int64_t t0, std::int64_t t1); }

}  // namespace tessera::kernels
