#pragma once
// Every activation on V = __m512 (16 f32 lanes) or Vecs<N> (math.hpp), for
// the unary, gated, group norm and matmul epilogue kernels (static: see
// vec.hpp).
#include "kernels/activation.hpp"
#include "kernels/x86/avx512/math.hpp"

namespace tessera::kernels::avx512 {

// Out: the storage type of the result; a bf16 one is computed to bf16's
// precision (exp16_bf16).
template <DType Out = DType::f32, class V>
__attribute__((always_inline)) static inline V activate16(V v, Act act) {
  switch (act) {
    case Act::none: return v;
    case Act::relu: return mask_mov_ps(v, cmp_ps_mask<_CMP_LT_OQ>(v, set1_ps<V>(0.0f)), set1_ps<V>(0.0f));
    case Act::gelu_erf: return gelu_erf16<Out>(v);
    case Act::gelu_tanh: {
      // 0.5 v (1 + tanh(u)) = v / (1 + exp(-2u)), u = 0.79788 (v + 0.044715 v^3):
      // a third fewer instructions than through tanh16, and no cancellation in
      // 1 + tanh(u) for u < 0. +-inf and NaN give what the formula gives.
      // The polynomial's constants carry exp_arg_scale.
      constexpr float k = exp_arg_scale<Out>();
      const V w = mul_ps(v, fmadd_ps(mul_ps(v, v), set1_ps<V>(-0.0713548162726f * k), set1_ps<V>(-1.5957691216057308f * k)));
      const V e = exp_scaled_for<Out, ExpArg::any, ExpTiny::normal>(w);
      return divide_for<Out>(v, add_ps(set1_ps<V>(1.0f), e));
    }
    case Act::silu: return silu16<Out>(v);
    case Act::sigmoid: return sigmoid16<Out>(v);
    case Act::tanh: return tanh16<Out>(v);
    case Act::exp: return exp16_for<Out>(v);
    case Act::quick_gelu: return silu16<Out>(v, kQuickGeluBeta);
  }
  return v;
}

}  // namespace tessera::kernels::avx512
