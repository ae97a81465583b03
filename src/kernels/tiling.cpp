#include <algorithm>

#include "kernels/tiling.hpp"

namespace tessera::kernels {

namespace {
constexpr std::int64_t kMinTaskBytes = 64 << 10;
}

ElementwiseTiling elementwise_tiling(std::int64_t n, std::int64_t bytes_per_element, const hw::Info& hw, int work) {
  const std::int64_t min_grain = std::max<std::int64_t>(1, kMinTaskBytes / std::max<std::int64_t>(bytes_per_element, 1));
  const std::int64_t share = (n + hw.cores - 1) / hw.cores;
  // Round to 64 elements so task boundaries fall on cache lines.
  return {std::max(min_grain, (share + 63) / 64 * 64),
          n * bytes_per_element > hw.l3_bytes && !arithmetic_bound(work, bytes_per_element)};
}

RowTiling row_tiling(const RowProblem& p, const hw::Info& hw, int work) {
  const std::int64_t min_rows = std::max<std::int64_t>(1, kMinTaskBytes / 8 / std::max<std::int64_t>(p.cols, 1));
  const std::int64_t share = (p.rows + hw.cores - 1) / hw.cores;
  const std::int64_t bytes_per_element = bytes_of(p.x) + bytes_of(p.y), bytes = p.rows * p.cols * bytes_per_element;
  const bool bound = arithmetic_bound(work, bytes_per_element);
  // A problem under one task's bytes, not arithmetic_bound, is one task: the
  // share caps the rows below, and a 5 KiB resize ran as two tasks of one
  // row at twice its time on one thread (AMD EPYC Zen 3). Arithmetic-bound
  // rows still split: softmax [2, 4096] f32 as one task took 1.6x as long.
  const std::int64_t rows_per_task =
      bytes < kMinTaskBytes && !bound ? p.rows : std::min(share, std::max(min_rows, (share + 3) / 4));
  return {std::max<std::int64_t>(1, rows_per_task), bytes > hw.l3_bytes && !bound, prefetch_next_into_l1(hw)};
}

bool row_vectorizable(const RowProblem& p) {
  return is_floating(p.x) && is_floating(p.y) && is_floating(p.param) && p.unit_stride;
}

}  // namespace tessera::kernels
