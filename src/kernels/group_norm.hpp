#pragma once
// GroupNorm family: the two passes of the op over x-shaped operands, each
// pass over a block of `lines` lines of `len` elements (the vectorized dim).
//   stats: sums of d = v - shift and of d^2, v = x [+ residual]; when `sum`
//          is given, v is written there and the rounded value is what counts;
//   apply: y = act((v - mean) * scale + bias) [* mul], v read back from `sum`
//          when given, else x [+ residual] again.
// Channels first (NCHW), a group is lines along its spatial dims and
// run_stats reduces the block to one pair of sums. Channels last (NHWC), a
// line is one pixel's C channels and column_stats accumulates per channel
// across lines. The op layer folds channels into groups and splits the work
// over the pool.
#include <cstdint>
#include <span>

#include "kernels/tiling.hpp"

namespace tessera::kernels {

struct GroupNormOperand {
  void* data;  // null when absent; read (x, residual, mul) or written (y, sum)
  DType dtype;
  std::int64_t line_stride, stride;  // elements between lines, and along a line
};

struct GroupNormLines {
  GroupNormOperand x, residual, mul, y, sum;
  std::int64_t lines, len;
  // column_stats reads x (and the residual) from memory: the op moves more
  // than the L3 holds. Else from cache.
  bool from_memory = false;
};

// apply's per-element coefficients: stride 0 gives every element of a line
// the same one (channels first: a line lies in one channel), stride 1 one per
// position along the line (channels last: the position is the channel).
struct GroupNormCoefs {
  const float* mean;
  const float* scale;  // gamma * inv_std
  const float* bias;   // beta
  std::int64_t stride;
  bool silu;
  bool stream_y;  // streaming stores for y: the op moves more than the L3 holds (ElementwiseTiling::stream_output)
  // Bytes from x and from the residual to the values the next statistics
  // pass reads; 0: none. The apply fetches those into cache as it goes.
  std::int64_t next_x = 0, next_residual = 0;
};

struct GroupNormProblem {
  std::int64_t numel;              // elements of x
  std::int64_t bytes_per_element;  // all x-shaped operands together
  bool unit_stride;                // every x-shaped operand has stride 1 along the lines
  DType y;
  bool silu;                       // the apply's SiLU: arithmetic for the tiling
};

struct GroupNormKernels {
  // sums[0] += sum of d, sums[1] += sum of d^2 over the block, d = v - shift.
  void (*run_stats)(const GroupNormLines& a, float shift, double* sums);
  // For each position i < len: sums[i] += sum over lines of d, sums[len + i]
  // += sum of d^2, d = v[line, i] - shift[i]. scratch: 2 * len floats.
  void (*column_stats)(const GroupNormLines& a, const float* shift, double* sums, float* scratch);
  void (*apply)(const GroupNormLines& a, const GroupNormCoefs& c);
};

struct GroupNormFamily {
  using Problem = GroupNormProblem;
  using Tiling = ElementwiseTiling;
  using Run = GroupNormKernels;
};

std::span<const KernelRow<GroupNormFamily>> rows(GroupNormFamily);

namespace ref {
void group_norm_run_stats(const GroupNormLines& a, float shift, double* sums);
void group_norm_column_stats(const GroupNormLines& a, const float* shift, double* sums, float* scratch);
void group_norm_apply(const GroupNormLines& a, const GroupNormCoefs& c);
}  // namespace ref
namespace avx2 {
void group_norm_run_stats(const GroupNormLines& a, float shift, double* sums);
void group_norm_column_stats(const GroupNormLines& a, const float* shift, double* sums, float* scratch);
void group_norm_apply(const GroupNormLines& a, const GroupNormCoefs& c);
}  // namespace avx2
namespace avx512 {
void group_norm_run_stats(const GroupNormLines& a, float shift, double* sums);
void group_norm_column_stats(const GroupNormLines& a, const float* shift, double* sums, float* scratch);
void group_norm_apply(const GroupNormLines& a, const GroupNormCoefs& c);
}  // namespace avx512
namespace avx512_bf16 {
void group_norm_run_stats(const GroupNormLines& a, float shift, double* sums);
void group_norm_column_stats(const GroupNormLines& a, const float* shift, double* sums, float* scratch);
void group_norm_apply(const GroupNormLines& a, const GroupNormCoefs& c);
}  // namespace avx512_bf16

}  // namespace tessera::kernels
