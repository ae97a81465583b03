#pragma once
// The matmul epilogue on 16 outputs while they are in a register: scale,
// bias, activation, residual, rounding to C's dtype. Shared by the AVX-512
// and AMX matmul kernels and the AVX-512 depthwise conv (static: see vec.hpp).
#include "kernels/matmul.hpp"
#include "kernels/x86/avx512/activation.hpp"

namespace tessera::kernels::avx512 {

// The epilogue's value for 16 outputs of columns [n, n + 16) (masked):
// scale, bias, activation, then the residual at `residual` (null: none).
// Shared by the GEMM kernels and the depthwise conv.
static inline __m512 epilogue_value16(const EpilogueArgs& e, __m512 acc, std::int64_t n, const void* residual,
                                      __mmask16 mask) {
  __m512 v = _mm512_mul_ps(acc, _mm512_set1_ps(e.scale));
  if (e.bias) v = _mm512_add_ps(v, load16(advance(e.bias, e.bias_dtype, n), e.bias_dtype, mask));
  v = activate16(v, e.act);
  if (residual) v = _mm512_add_ps(v, load16(residual, e.residual_dtype, mask));
  return v;
}

// C[m, n : n+16] (masked) = epilogue(acc).
static inline void epilogue16(const MatmulArgs& a, __m512 acc, std::int64_t m, std::int64_t n, __mmask16 mask) {
  const EpilogueArgs& e = a.ep;
  const void* residual = e.residual ? advance(e.residual, e.residual_dtype, m * e.residual_row_stride + n) : nullptr;
  store16(advance(a.c, a.c_dtype, m * a.c_row_stride + n), a.c_dtype, epilogue_value16(e, acc, n, residual, mask), mask);
}

// Asks for the lines the epilogue of rows [m, m + rows) x columns [n, n + 32)
// will touch: rows of C and of the residual are a matrix row apart, too far
// for the hardware prefetcher, so issued while the tile is still computing.
static inline void prefetch_epilogue(const MatmulArgs& a, std::int64_t rows, std::int64_t m, std::int64_t n) {
  const std::int64_t c_bytes = 32 * bytes_of(a.c_dtype), r_bytes = 32 * bytes_of(a.ep.residual_dtype);
  for (std::int64_t i = 0; i < rows; ++i) {
    const char* c = static_cast<const char*>(advance(static_cast<const void*>(a.c), a.c_dtype, (m + i) * a.c_row_stride + n));
    for (std::int64_t b = 0; b < c_bytes; b += 64) _mm_prefetch(c + b, _MM_HINT_T1);
    if (!a.ep.residual) continue;
    const char* r = static_cast<const char*>(advance(a.ep.residual, a.ep.residual_dtype, (m + i) * a.ep.residual_row_stride + n));
    for (std::int64_t b = 0; b < r_bytes; b += 64) _mm_prefetch(r + b, _MM_HINT_T1);
  }
}

// Rows [m, m + rows) x columns [n, n + 32) of C from an f32 tile with row stride `ld`.
static inline void epilogue_tile32(const MatmulArgs& a, const float* tile, std::int64_t ld, std::int64_t rows,
                                   std::int64_t m, std::int64_t n, std::int64_t n_end) {
  const __mmask16 mask0 = tail_mask(n_end - n), mask1 = tail_mask(std::max<std::int64_t>(0, n_end - n - 16));
  for (std::int64_t i = 0; i < rows; ++i) {
    epilogue16(a, _mm512_loadu_ps(tile + i * ld), m + i, n, mask0);
    if (mask1) epilogue16(a, _mm512_loadu_ps(tile + i * ld + 16), m + i, n + 16, mask1);
  }
}

}  // namespace tessera::kernels::avx512
