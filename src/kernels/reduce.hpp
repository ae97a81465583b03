#pragma once
// Reduction family: n outputs, each reducing `length` elements,
//   y[j * y_stride] = reduce over r < length of x[j * x_stride + r * x_step].
// Two layouts have SIMD rows. Rows (x_step == 1): each output reduces a
// contiguous run into vector accumulators, reduced horizontally once at the
// end. Columns (x_stride == y_stride == 1): outputs lie side by side, and
// vectors of them accumulate down the reduced axis with no horizontal work.
// Sums add up in f64 (the SIMD kernels first add a few terms per lane in f32:
// blocks of 32 along rows, groups of 4 rows down columns at AVX2; far below
// where f32 rounding shows, but f32 range: terms near f32's largest may
// overflow there; squares, in f32 too, past |x| ~ 1.8e19, where the reference
// squares in f64, as PyTorch's and ONNX Runtime's f32 norms overflow). A
// sum's terms may be the elements' absolute values or squares (ReduceTerm),
// and its result finished by a square root or a log (ReduceFinish): L1, L2,
// sums of squares, log of the sum. Products multiply in f64. log_sum_exp is max + log(sum of exp(x - max)) with the max found
// on the way, a block of elements at a time (an online softmax's sum: one
// pass over x, one exp per element).
// max and min keep a NaN; length 0 gives sums of 0, products of 1 and a
// log_sum_exp of -inf (the op layer rejects mean, max and min of nothing). argmax /
// argmin write the index of the first extreme (a NaN the first extreme
// found) to an integer y (i32 or i64).
#include <cmath>
#include <cstdint>
#include <span>

#include "kernels/tiling.hpp"

namespace tessera::kernels {

enum class ReduceKind { sum, mean, max, min, prod, log_sum_exp, argmax, argmin };
// What a sum (or mean) adds up: the elements, their absolute values, their squares.
enum class ReduceTerm { value, abs, square };
// What becomes of a sum (or mean) before it is stored.
enum class ReduceFinish { none, sqrt, log };

// A sum's result finished (every row's: `static`, see registry.hpp).
static inline double finish_sum(ReduceFinish f, double v) {
  return f == ReduceFinish::sqrt ? std::sqrt(v) : f == ReduceFinish::log ? std::log(v) : v;
}

struct ReduceProblem {
  ReduceKind kind;
  ReduceTerm term;
  ReduceFinish finish;
  DType x, y;
  std::int64_t outputs;  // in the whole op
  std::int64_t length;
  std::int64_t x_step, x_stride, y_stride;  // as in ReduceArgs
};

struct ReduceArgs {
  ReduceKind kind;
  ReduceTerm term;
  ReduceFinish finish;
  DType x_dtype, y_dtype;
  std::int64_t n, length;
  const void* x;                    // null when length is 0
  std::int64_t x_step, x_stride;    // elements
  void* y;
  std::int64_t y_stride;
};

struct ReduceFamily {
  using Problem = ReduceProblem;
  using Tiling = ElementwiseTiling;  // grain: outputs per task
  using Run = void (*)(const ReduceArgs&);
};

std::span<const KernelRow<ReduceFamily>> rows(ReduceFamily);

namespace ref { void reduce(const ReduceArgs& a); }
namespace avx2 {
void reduce_rows(const ReduceArgs& a);
void reduce_columns(const ReduceArgs& a);
void reduce_arg_rows(const ReduceArgs& a);
}  // namespace avx2
namespace avx512 {
void reduce_rows(const ReduceArgs& a);
void reduce_columns(const ReduceArgs& a);
}  // namespace avx512

}  // namespace tessera::kernels
