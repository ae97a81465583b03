#pragma once
// Prefetch of the lines a matmul epilogue will touch, for every x86 ISA
// level's GEMM kernels (SSE intrinsics only; static: see avx2/vec.hpp).
#include "kernels/matmul.hpp"
#include "kernels/x86/load1.hpp"
#include "kernels/x86/prefetch.hpp"

namespace tessera::kernels {

// Asks for the lines the epilogue of rows [m, m + rows) x columns [n, n + 32)
// will touch: rows of C and of the residual are a matrix row apart, too far
// for the hardware prefetcher, so issued while the tile is still computing.
__attribute__((always_inline)) static inline void prefetch_epilogue(const MatmulArgs& a, std::int64_t rows, std::int64_t m, std::int64_t n) {
  const std::int64_t c_bytes = 32 * bytes_of(a.c_dtype), r_bytes = 32 * bytes_of(a.ep.residual_dtype);
  for (std::int64_t i = 0; i < rows; ++i) {
    prefetch_lines<_MM_HINT_T1>(static_cast<const char*>(advance(static_cast<const void*>(a.c), a.c_dtype, c_row_offset(a, m + i) + n)), c_bytes);
    if (a.ep.residual)
      prefetch_lines<_MM_HINT_T1>(static_cast<const char*>(advance(a.ep.residual, a.ep.residual_dtype, residual_row_offset(a, m + i) + n)), r_bytes);
  }
}

}  // namespace tessera::kernels
