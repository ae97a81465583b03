#pragma once
// RMSNorm family: y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * gamma, for
// rows [r0, r1) of a block of rows with uniform row strides.
#include <cstdint>
#include <span>

#include "kernels/registry.hpp"
#include "tessera/core/dtype.hpp"

namespace tessera::kernels {

struct RowProblem {
  DType x, y, param;  // param: gamma's dtype
  std::int64_t rows, cols;
  bool unit_stride;   // x, y and gamma all have stride 1 along cols
};

struct RmsNormArgs {
  DType x_dtype, y_dtype, gamma_dtype;
  std::int64_t cols;
  const void* x;
  std::int64_t x_row_stride, x_col_stride;
  const void* gamma;
  std::int64_t gamma_stride;
  void* y;
  std::int64_t y_row_stride, y_col_stride;
  float eps;
};

struct RowTiling {
  std::int64_t rows_per_task;
};
// Rows per task so that a task moves at least ~64 KiB and each core gets a share.
RowTiling row_tiling(const RowProblem& p, const hw::Info& hw);
// Float storage everywhere and unit column strides: what the SIMD row kernels take.
bool row_vectorizable(const RowProblem& p);

struct RmsNormFamily {
  using Problem = RowProblem;
  using Tiling = RowTiling;
  using Run = void (*)(const RmsNormArgs&, std::int64_t r0, std::int64_t r1);
};

std::span<const KernelRow<RmsNormFamily>> rows(RmsNormFamily);

namespace ref { void rms_norm(const RmsNormArgs& a, std::int64_t r0, std::int64_t r1); }
namespace avx2 { void rms_norm(const RmsNormArgs& a, std::int64_t r0, std::int64_t r1); }
namespace avx512 { void rms_norm(const RmsNormArgs& a, std::int64_t r0, std::int64_t r1); }

}  // namespace tessera::kernels
