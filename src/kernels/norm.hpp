#pragma once
// Row normalization family, for rows [r0, r1) of a block of rows with uniform
// row strides. The row normalized, v, is x, or (when residual is given)
// x + residual rounded to sum's dtype and written to sum. Then
//   rms:   y = v / sqrt(mean(v^2) + eps) * gamma
//   layer: y = (v - mean(v)) / sqrt(mean((v - mean(v))^2) + eps) * gamma + beta
// with gamma = 1 and beta = 0 where they are absent.
#include <cmath>
#include <cstdint>
#include <span>

#include "kernels/dispatch.hpp"
#include "kernels/tiling.hpp"

namespace tessera::kernels {

enum class NormKind { rms, layer };

// How the SIMD rows write their outputs: `rows` rows together, `cols`
// columns at a time across them, so that those columns of gamma and beta
// serve every row of the block from L1. One row (all its columns) where a
// row of v with gamma and beta (read as f32) fits in L1d.
struct NormOutputBlock {
  std::int64_t rows, cols;  // rows: 1 or kNormOutputRows
};
constexpr std::int64_t kNormOutputRows = 4;
NormOutputBlock norm_output_block(std::int64_t cols, DType v, bool beta, const hw::Info& hw);

struct NormArgs {
  NormKind kind;
  DType x_dtype, residual_dtype, sum_dtype, gamma_dtype, beta_dtype, y_dtype;
  std::int64_t cols;
  const void* x;
  std::int64_t x_row_stride, x_col_stride;
  const void* residual;  // nullptr: no residual (and no sum)
  std::int64_t residual_row_stride, residual_col_stride;
  void* sum;
  std::int64_t sum_row_stride, sum_col_stride;
  const void* gamma;  // nullptr: no scale
  std::int64_t gamma_stride;
  const void* beta;  // nullptr: no shift
  std::int64_t beta_stride;
  void* y;
  std::int64_t y_row_stride, y_col_stride;
  float eps;
  bool stream_y;  // streaming stores for y (RowTiling::stream_output)
  bool prefetch_l1 = false;  // the next rows into L1, else L2 (RowTiling::prefetch_l1)
  NormOutputBlock output;
};

// 1 / sqrt(var + eps). var >= 0 as every row computes it (a sum of squares,
// never the one-pass E[v^2] - E[v]^2 that can go negative). A row with no
// spread and eps = 0 has nothing to scale: 0 rather than Inf, which would make
// y = 0 * Inf = NaN; y is then beta (or 0).
static inline double inv_std(double var, float eps) {
  const double d = var + double(eps);
  return d > 0.0 ? 1.0 / std::sqrt(d) : 0.0;
}

// Calls f(x type, v type, y type), v being the row normalized (the sum as
// stored when there is a residual, else x): compile-time constants
// (std::integral_constant) when the three and the residual's share one float
// type, so that the kernels' loops are compiled per type; else the run-time
// DTypes.
template <class F>
inline void with_norm_types(const NormArgs& a, F&& f) {
  const DType vt = a.residual ? a.sum_dtype : a.x_dtype;
  if (vt == a.x_dtype && vt == a.y_dtype && (!a.residual || a.residual_dtype == vt))
    dispatch_float(vt, [&](auto t) { f(t, t, t); });
  else
    f(a.x_dtype, vt, a.y_dtype);
}

struct NormFamily {
  using Problem = RowProblem;  // param: gamma's dtype (x's when absent); unit_stride: every operand
  using Tiling = RowTiling;
  using Run = void (*)(const NormArgs&, std::int64_t r0, std::int64_t r1);
};

std::span<const KernelRow<NormFamily>> rows(NormFamily);

namespace ref { void norm(const NormArgs& a, std::int64_t r0, std::int64_t r1); }
namespace avx2 { void norm(const NormArgs& a, std::int64_t r0, std::int64_t r1); }
namespace avx512 { void norm(const NormArgs& a, std::int64_t r0, std::int64_t r1); }
namespace avx512_bf16 { void norm(const NormArgs& a, std::int64_t r0, std::int64_t r1); }

}  // namespace tessera::kernels
