// The reference MoE combine: each element's weighted sum over the slots, in f32.
#include "core/element.hpp"
#include "kernels/moe.hpp"

namespace tessera::kernels::ref {

using namespace tessera::detail;  // load / store / load_index

void moe_combine(const MoeCombineArgs& a, std::int64_t t0, std::int64_t t1) {
  for (std::int64_t t = t0; t < t1; ++t)
    for (std::int64_t h = 0; h < a.hidden; ++h) {
      float acc = 0.0f;
      for (std::int64_t j = 0; j < a.k; ++j) {
        const float w = load(a.weights, a.weights_dtype, t * a.w_token_stride + j * a.w_slot_stride);
        const std::int64_t row = load_index(a.positions, a.positions_dtype, t * a.p_token_stride + j * a.p_slot_stride);
        acc += w * load(a.y, a.y_dtype, row * a.y_row_stride + h * a.y_col_stride);
      }
      store(a.out, a.out_dtype, t * a.out_row_stride + h * a.out_col_stride, acc);
    }
}

}  // namespace tessera::kernels::ref
