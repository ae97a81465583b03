#include "kernels/reduce.hpp"

#include <algorithm>

namespace tessera::kernels {

namespace {
bool floats(const ReduceProblem& p) { return is_floating(p.x) && is_floating(p.y) && p.length > 0; }
bool rows_layout(const ReduceProblem& p) { return floats(p) && p.x_step == 1; }
bool columns_layout(const ReduceProblem& p) { return floats(p) && p.x_stride == 1 && p.y_stride == 1; }
// The AVX-512 rows have plain sums, means and max only: the other
// reductions take the AVX2 rows there.
bool avx512_kind(const ReduceProblem& p) {
  return (p.kind == ReduceKind::sum || p.kind == ReduceKind::mean || p.kind == ReduceKind::max) && p.term == ReduceTerm::value &&
         p.finish == ReduceFinish::none;
}
bool avx512_rows_layout(const ReduceProblem& p) { return rows_layout(p) && avx512_kind(p); }
bool avx512_columns_layout(const ReduceProblem& p) { return columns_layout(p) && avx512_kind(p); }
// argmax / argmin (an integer y) over contiguous rows.
bool arg_rows_layout(const ReduceProblem& p) {
  return is_floating(p.x) && (p.y == DType::i32 || p.y == DType::i64) && p.x_step == 1 && p.length > 0;
}

// Each output is a row of `length` elements.
ElementwiseTiling rows_tiling(const ReduceProblem& p, const hw::Info& hw) {
  return {row_tiling({p.x, p.y, p.y, p.outputs, p.length, true}, hw).rows_per_task};
}
// Each output moves `length` elements of x and one of y. Lengths past 2^30
// give one output per task anyway; the cap keeps the product from overflowing.
ElementwiseTiling columns_tiling(const ReduceProblem& p, const hw::Info& hw) {
  return elementwise_tiling(p.outputs, std::min<std::int64_t>(p.length, 1 << 30) * bytes_of(p.x) + bytes_of(p.y), hw);
}
ElementwiseTiling any_tiling(const ReduceProblem& p, const hw::Info& hw) {
  return p.x_step == 1 ? rows_tiling(p, hw) : columns_tiling(p, hw);
}
}  // namespace

std::span<const KernelRow<ReduceFamily>> rows(ReduceFamily) {
  static const KernelRow<ReduceFamily> kRows[] = {
      {"reduce_rows_avx512", hw::Isa::avx512, avx512_rows_layout, rows_tiling, avx512::reduce_rows},
      {"reduce_columns_avx512", hw::Isa::avx512, avx512_columns_layout, columns_tiling, avx512::reduce_columns},
      {"reduce_rows_avx2", hw::Isa::avx2, rows_layout, rows_tiling, avx2::reduce_rows},
      {"reduce_columns_avx2", hw::Isa::avx2, columns_layout, columns_tiling, avx2::reduce_columns},
      {"reduce_arg_rows_avx2", hw::Isa::avx2, arg_rows_layout, rows_tiling, avx2::reduce_arg_rows},
      {"reduce_ref", hw::Isa::scalar, supports_all, any_tiling, ref::reduce},
  };
  return kRows;
}

}  // namespace tessera::kernels
