#pragma once
// Every activation on 8 f32 lanes, for the unary, gated and matmul
// epilogue kernels (static: see vec.hpp).
#include "kernels/activation.hpp"
#include "kernels/x86/avx2/vec.hpp"

namespace tessera::kernels::avx2 {

static inline __m256 activate8(__m256 v, Act act) {
  switch (act) {
    case Act::none: return v;
    case Act::relu: return _mm256_max_ps(_mm256_setzero_ps(), v);  // max returns its second operand on NaN: NaN stays
    case Act::gelu_erf: return gelu_erf8(v);
    case Act::gelu_tanh: {
      const __m256 v3 = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
      const __m256 u =
          _mm256_mul_ps(_mm256_fmadd_ps(v3, _mm256_set1_ps(0.044715f), v), _mm256_set1_ps(0.7978845608028654f));
      return _mm256_mul_ps(_mm256_mul_ps(v, _mm256_set1_ps(0.5f)), _mm256_add_ps(tanh8(u), _mm256_set1_ps(1.0f)));
    }
    case Act::silu: return silu8(v);
    case Act::sigmoid: return sigmoid8(v);
    case Act::tanh: return tanh8(v);
    case Act::exp: return exp8(v);
  }
  return v;
}

}  // namespace tessera::kernels::avx2
