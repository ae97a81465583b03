#pragma once
// Tiling shared by the memory-bound families: elementwise ops split a flat
// run of elements, row ops (norms, softmax, reductions) split rows. Tasks
// move at least ~64 KiB so the pool's per-task cost is noise, and large
// problems get one share per core.
#include <cstdint>

#include "kernels/registry.hpp"
#include "tessera/core/dtype.hpp"

namespace tessera::kernels {

// Whether a kernel doing `work` vector instructions per 16 elements (a rough
// count of its loop) while moving bytes_per_element is bound by its
// arithmetic rather than by memory: more than two instructions per byte.
// Such kernels keep plain stores past the L3. Streaming stores leave the
// core only as fast as memory takes them, so a core with arithmetic to do
// stalls on them where plain stores let it overlap the two, despite the
// read of each line they cost. Measured with one binary, the two kinds of
// store alternating (bench membound large, AMD EPYC Turin, 1 / 2 threads),
// plain over streaming: silu bf16 0.77-0.87x the time, gelu 0.78-0.88,
// tanh 0.83-0.86, softmax bf16 0.74-0.91, resize bilinear 0.69-0.84,
// dequantize to bf16 0.77-0.89; where memory bounds the kernel streaming
// stays ahead: add 1.26-1.87x, relu 1.26 (1 thread), exp over f32 (16 per
// 16 elements of 8 bytes) 1.05-1.17, layer_norm bf16 1.26-1.47, transpose
// 1.7-1.9.
constexpr bool arithmetic_bound(int work, std::int64_t bytes_per_element) { return work > 2 * bytes_per_element; }

struct ElementwiseTiling {
  std::int64_t grain;  // elements per task
  // The op moves more bytes than the last-level cache holds: its output cannot
  // stay cached, so the kernels write it with streaming stores, which skip
  // reading each line before overwriting it (a third of a unary op's traffic),
  // unless its kernel's `work` makes it arithmetic_bound.
  bool stream_output;
};
// Elements per task for an op over n elements moving bytes_per_element each,
// its kernel doing `work` vector instructions per 16 of them.
ElementwiseTiling elementwise_tiling(std::int64_t n, std::int64_t bytes_per_element, const hw::Info& hw, int work = 0);

struct RowProblem {
  DType x, y, param;  // param: gamma's dtype
  std::int64_t rows, cols;
  bool unit_stride;   // x, y and gamma all have stride 1 along cols
};

// Whether kernels that fetch their next rows or key block ahead of use put
// them in L1: where it holds 48 KiB (AMD EPYC Turin, Sapphire Rapids), not
// where it holds 32 (Zen 4: the fetched lines evicted the ones in use).
inline bool prefetch_next_into_l1(const hw::Info& hw) { return hw.l1d_bytes >= (48 << 10); }

struct RowTiling {
  std::int64_t rows_per_task;
  bool stream_output;  // as ElementwiseTiling's
  bool prefetch_l1 = false;  // the norm kernels' next rows (prefetch_next_into_l1; avx512/norm_rows.hpp)
};
// Rows per task so that a task moves at least ~64 KiB and each core gets a
// share; `work` as elementwise_tiling's.
RowTiling row_tiling(const RowProblem& p, const hw::Info& hw, int work);
inline RowTiling row_tiling(const RowProblem& p, const hw::Info& hw) { return row_tiling(p, hw, 0); }
// Float storage everywhere and unit column strides: what the SIMD row kernels take.
bool row_vectorizable(const RowProblem& p);

}  // namespace tessera::kernels
