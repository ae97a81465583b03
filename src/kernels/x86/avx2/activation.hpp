#pragma once
// Every activation on 8 f32 lanes, for the unary, gated and matmul
// epilogue kernels (static: see vec.hpp).
#include "kernels/activation.hpp"
#include "kernels/x86/avx2/math.hpp"

namespace tessera::kernels::avx2 {

// Out: the storage type of the result; a bf16 one is computed to bf16's
// precision (math.hpp).
template <DType Out = DType::f32>
__attribute__((always_inline)) static inline __m256 activate8(__m256 v, Act act) {
  switch (act) {
    case Act::none: return v;
    case Act::relu: return _mm256_max_ps(_mm256_setzero_ps(), v);  // max returns its second operand on NaN: NaN stays
    case Act::gelu_erf: return gelu_erf8<Out>(v);
    case Act::gelu_tanh: {
      // 0.5 v (1 + tanh(u)) = v / (1 + exp(-2u)), u = 0.79788 (v + 0.044715
      // v^3), as avx512's activate16: fewer instructions than through tanh8,
      // and no cancellation in 1 + tanh(u) for u < 0. The polynomial's
      // constants carry exp_arg_scale.
      constexpr float k = exp_arg_scale<Out>();
      const __m256 w = _mm256_mul_ps(
          v, _mm256_fmadd_ps(_mm256_mul_ps(v, v), _mm256_set1_ps(-0.0713548162726f * k), _mm256_set1_ps(-1.5957691216057308f * k)));
      return _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0f), exp_scaled_for<Out, ExpArg::any, ExpTiny::normal>(w)));
    }
    case Act::silu: return silu8<Out>(v);
    case Act::sigmoid: return sigmoid8<Out>(v);
    case Act::tanh: return tanh8<Out>(v);
    case Act::exp: return exp8_for<Out>(v);
    case Act::quick_gelu: return silu8<Out>(v, kQuickGeluBeta);
  }
  return v;
}

}  // namespace tessera::kernels::avx2
