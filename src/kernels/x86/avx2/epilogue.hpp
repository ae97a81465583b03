#pragma once
// The matmul epilogue on 8 outputs while they are in a register: scale, bias,
// activation, residual, rounding to C's dtype (static: see vec.hpp).
#include <algorithm>

#include "kernels/matmul.hpp"
#include "kernels/x86/avx2/activation.hpp"

namespace tessera::kernels::avx2 {

// The epilogue's value for outputs of columns [n, n + count) (count <= 8):
// scale, bias, activation, then the residual at `residual` (null: none).
// Shared by the GEMM kernel and the depthwise conv.
static inline __m256 epilogue_value8(const EpilogueArgs& e, __m256 acc, std::int64_t n, const void* residual,
                                     std::int64_t count) {
  __m256 v = _mm256_mul_ps(acc, _mm256_set1_ps(e.scale));
  if (e.bias) v = _mm256_add_ps(v, load8_n(advance(e.bias, e.bias_dtype, n), e.bias_dtype, count));
  v = activate8(v, e.act);
  if (residual) v = _mm256_add_ps(v, load8_n(residual, e.residual_dtype, count));
  return v;
}

// C[m, n : n + count] (count <= 8) = epilogue(acc).
static inline void epilogue8(const MatmulArgs& a, __m256 acc, std::int64_t m, std::int64_t n, std::int64_t count) {
  const EpilogueArgs& e = a.ep;
  const void* residual = e.residual ? advance(e.residual, e.residual_dtype, residual_row_offset(a, m) + n) : nullptr;
  store8_n(advance(a.c, a.c_dtype, c_row_offset(a, m) + n), a.c_dtype, epilogue_value8(e, acc, n, residual, count), count);
}

// Rows [m, m + rows) x columns [n, min(n + 32, n_end)) of C from an f32 tile with row stride `ld`.
static inline void epilogue_tile32(const MatmulArgs& a, const float* tile, std::int64_t ld, std::int64_t rows,
                                   std::int64_t m, std::int64_t n, std::int64_t n_end) {
  const std::int64_t cols = std::min(kPanelCols, n_end - n);
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; j += 8)
      epilogue8(a, _mm256_load_ps(tile + i * ld + j), m + i, n + j, std::min<std::int64_t>(8, cols - j));
}

// The same from exact W8A8 sums (int32): each times its row's scale and its
// column's weight scale first.
static inline void epilogue_i32_tile32(const MatmulArgs& a, const std::int32_t* tile, std::int64_t ld, std::int64_t rows,
                                       std::int64_t m, std::int64_t n, std::int64_t n_end) {
  const PackedB& b = *a.packed;
  const std::int64_t cols = std::min(kPanelCols, n_end - n);
  for (std::int64_t j = 0; j < cols; j += 8) {
    const std::int64_t count = std::min<std::int64_t>(8, cols - j);
    const __m256 w = load8_n(advance(b.scales, b.scale_dtype, n + j), b.scale_dtype, count);
    for (std::int64_t i = 0; i < rows; ++i) {
      const __m256 exact = _mm256_cvtepi32_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(tile + i * ld + j)));
      epilogue8(a, _mm256_mul_ps(exact, _mm256_mul_ps(_mm256_set1_ps(a.a_scales[m + i]), w)), m + i, n + j, count);
    }
  }
}

}  // namespace tessera::kernels::avx2
