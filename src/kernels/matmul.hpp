#pragma once
// Matmul family: C[m, n] = sum_k A[m, k] * B[k, n] for one matrix of a batch,
// computing the tile [m0, m1) x [n0, n1). Any strides: a transposed operand
// is just a stride pair. Accumulation is f32 or wider.
#include <cstdint>
#include <span>

#include "kernels/registry.hpp"
#include "tessera/core/dtype.hpp"

namespace tessera::kernels {

struct MatmulProblem {
  DType a, b, c;
  std::int64_t m, n, k;
  std::int64_t a_col_stride, b_col_stride, c_col_stride;  // stride along K for A, along N for B and C
};

struct MatmulArgs {
  DType a_dtype, b_dtype, c_dtype;
  std::int64_t k;
  const void* a;
  std::int64_t a_row_stride, a_col_stride;
  const void* b;
  std::int64_t b_row_stride, b_col_stride;
  void* c;
  std::int64_t c_row_stride, c_col_stride;
};

struct MatmulTiling {
  std::int64_t m_block, n_block;  // tile of C per task
};

struct MatmulFamily {
  using Problem = MatmulProblem;
  using Tiling = MatmulTiling;
  using Run = void (*)(const MatmulArgs&, std::int64_t m0, std::int64_t m1, std::int64_t n0, std::int64_t n1);
};

std::span<const KernelRow<MatmulFamily>> rows(MatmulFamily);

namespace ref { void matmul(const MatmulArgs& a, std::int64_t m0, std::int64_t m1, std::int64_t n0, std::int64_t n1); }
namespace avx512 { void matmul_f32(const MatmulArgs& a, std::int64_t m0, std::int64_t m1, std::int64_t n0, std::int64_t n1); }

}  // namespace tessera::kernels
