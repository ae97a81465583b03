#include "kernels/reorder.hpp"

#include <algorithm>
#include <cmath>

namespace tessera::kernels {

namespace {

// The SIMD rows move elements through 32-bit lanes: float dtypes convert,
// one dtype of 2 or 4 bytes moves as raw bits (any dtype, for runs).
bool simd_supports(const ReorderProblem& p) {
  if (p.mode == ReorderMode::strided) return false;
  if (is_floating(p.x) && is_floating(p.y)) return true;
  return p.x == p.y && (p.mode == ReorderMode::copy || bytes_of(p.x) == 2 || bytes_of(p.x) == 4);
}

std::int64_t round_up(std::int64_t v, std::int64_t m) { return (v + m - 1) / m * m; }

ReorderTiling tiling(const ReorderProblem& p, const hw::Info& hw) {
  const std::int64_t bytes = bytes_of(p.x) + bytes_of(p.y);
  const ElementwiseTiling et = elementwise_tiling(p.n, bytes, hw);
  const std::int64_t rows = std::max<std::int64_t>(p.rows, 1), cols = std::max<std::int64_t>(p.cols, 1);
  std::int64_t br, bc;
  if (p.mode == ReorderMode::transpose && et.stream_output) {
    // Past the L3: strips of few rows of x, read as runs the hardware
    // prefetcher follows, whose y lines are each written whole by streaming
    // stores. By default one row of micro-tiles (16 rows of x, 32 for 16-bit
    // y, whose lines take two micro-tiles), long: f32 [5120, 4096] at 32 x
    // 1024 moved 11 GB/s, at 16 x 4096 17-19 (AMD EPYC, Zen 4, 1 thread);
    // nchw_to_nhwc (y rows 1280 bytes apart) the same on Zen 5 against the
    // short strips below. Where L1 holds 48 KiB and y's rows are a page or
    // more apart, short strips of x giving 512-byte runs of y: streaming
    // stores alone, no reads, y rows 20 KiB apart, took 5.1 ms for 80 MiB as
    // runs of two lines and 2.6 as four. bench membound --size large,
    // alternating, 7-9 rounds (AMD EPYC Turin, Zen 5), ms at 1 / 2 threads,
    // from two rows of micro-tiles, 512 f32 or 128 bf16 wide: transpose_2d
    // f32 11.9 / 7.8 -> 10.3 / 5.4, bf16 8.5 / 4.7 -> 7.9 / 4.0 (512-byte
    // runs); nchw_to_nhwc f32 8.7 / 4.2 -> 6.8 / 3.8, bf16 6.4 / 3.1 ->
    // 5.5 / 2.2 (one row, long). Which property of the two cores decides is
    // not known: L1 is what hw::Info tells them apart by (Sapphire Rapids,
    // 48 KiB: not measured).
    const std::int64_t ys = bytes_of(p.y);
    const bool wide = ys == 4, l1_48k = hw.l1d_bytes >= (48 << 10);
    const bool y_rows_paged = rows * ys >= 4096;  // a row of y holds `rows` elements
    if (l1_48k && y_rows_paged) {
      br = std::min<std::int64_t>(rows, 512 / ys);
      bc = std::min<std::int64_t>(cols, wide ? 512 : 128);
    } else {
      br = std::min<std::int64_t>(rows, wide ? 16 : 32);
      bc = std::min<std::int64_t>(cols, wide ? 4096 : 1024);
    }
  } else if (p.mode == ReorderMode::transpose) {
    // A square of whole 16x16 micro-tiles, or as much area in a thin plane.
    const auto side = std::max<std::int64_t>(16, std::int64_t(std::sqrt(double(hw.l1d_bytes / 2 / bytes))) / 16 * 16);
    bc = std::min(cols, side);
    br = std::min(rows, round_up(side * side / bc, 16));
    bc = std::min(cols, round_up(side * side / br, 16));
  } else {
    // Runs: pieces of a long row, or whole rows gathered up to one task's worth.
    bc = std::min(cols, et.grain);
    br = std::clamp<std::int64_t>(et.grain / bc, 1, rows);
  }
  return {br, bc, std::max<std::int64_t>(1, et.grain / (br * bc)), et.stream_output};
}

}  // namespace

std::span<const KernelRow<ReorderFamily>> rows(ReorderFamily) {
  static const KernelRow<ReorderFamily> kRows[] = {
      {"reorder_avx512", hw::Isa::avx512, simd_supports, tiling, avx512::reorder},
      {"reorder_avx2", hw::Isa::avx2, simd_supports, tiling, avx2::reorder},
      {"reorder_ref", hw::Isa::scalar, supports_all, tiling, ref::reorder},
  };
  return kRows;
}

}  // namespace tessera::kernels
