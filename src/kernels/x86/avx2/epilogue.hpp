#pragma once
// The matmul epilogue on 8 outputs while they are in a register: scale, bias,
// activation, residual, rounding to C's dtype (static: see vec.hpp).
#include <algorithm>

#include "kernels/matmul.hpp"
#include "kernels/x86/avx2/vec.hpp"

namespace tessera::kernels::avx2 {

static inline __m256 activate8(__m256 v, Act act) {
  switch (act) {
    case Act::none: return v;
    case Act::relu: return _mm256_max_ps(_mm256_setzero_ps(), v);  // max returns its second operand on NaN: NaN stays
    case Act::gelu_erf: {
      const __m256 e = erf8(_mm256_mul_ps(v, _mm256_set1_ps(0.70710678118654752f)));
      return _mm256_mul_ps(_mm256_mul_ps(v, _mm256_set1_ps(0.5f)), _mm256_add_ps(e, _mm256_set1_ps(1.0f)));
    }
    case Act::gelu_tanh: {
      const __m256 v3 = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
      const __m256 u =
          _mm256_mul_ps(_mm256_fmadd_ps(v3, _mm256_set1_ps(0.044715f), v), _mm256_set1_ps(0.7978845608028654f));
      return _mm256_mul_ps(_mm256_mul_ps(v, _mm256_set1_ps(0.5f)), _mm256_add_ps(tanh8(u), _mm256_set1_ps(1.0f)));
    }
    case Act::silu: return silu8(v);
  }
  return v;
}

// C[m, n : n + count] (count <= 8) = epilogue(acc).
static inline void epilogue8(const MatmulArgs& a, __m256 acc, std::int64_t m, std::int64_t n, std::int64_t count) {
  const EpilogueArgs& e = a.ep;
  __m256 v = _mm256_mul_ps(acc, _mm256_set1_ps(e.scale));
  if (e.bias) v = _mm256_add_ps(v, load8_n(advance(e.bias, e.bias_dtype, n), e.bias_dtype, count));
  v = activate8(v, e.act);
  if (e.residual) {
    const void* r = advance(e.residual, e.residual_dtype, m * e.residual_row_stride + n);
    v = _mm256_add_ps(v, load8_n(r, e.residual_dtype, count));
  }
  store8_n(advance(a.c, a.c_dtype, m * a.c_row_stride + n), a.c_dtype, v, count);
}

// Rows [m, m + rows) x columns [n, min(n + 32, n_end)) of C from an f32 tile with row stride `ld`.
static inline void epilogue_tile32(const MatmulArgs& a, const float* tile, std::int64_t ld, std::int64_t rows,
                                   std::int64_t m, std::int64_t n, std::int64_t n_end) {
  const std::int64_t cols = std::min(kPanelCols, n_end - n);
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; j += 8)
      epilogue8(a, _mm256_load_ps(tile + i * ld + j), m + i, n + j, std::min<std::int64_t>(8, cols - j));
}

}  // namespace tessera::kernels::avx2
