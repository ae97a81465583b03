#pragma once
// Software prefetch of streams ahead of the hardware prefetcher, for every
// x86 ISA level's kernels (SSE intrinsics only). `static`: see avx2/vec.hpp.
#include <immintrin.h>

#include <cstdint>

namespace tessera::kernels {

// Streams read by kernels with much arithmetic per byte are fetched this far
// ahead: the hardware prefetcher restarts at every page, and the arithmetic
// leaves the core waiting on each restart's misses (quantize, activations:
// 1.2-1.4x at 1 thread on tensors past the L3). 4 KiB rather than 2: AMD
// EPYC Turin, tensors of 80 MiB, the distances alternating in one process
// (three runs of 9-11 rounds in different orders), time at 4 KiB over 2
// KiB at 1 / 2 threads: quantize to int8 0.82-0.93 / 0.81-0.94, relu
// 0.86-0.96 / 0.91-0.97, exp 0.90-0.98 / 0.96-1.01; gated, group norm,
// resize and dequantize within 3 % either way; 8 KiB about as 4.
constexpr std::int64_t kPrefetchAheadBytes = 4096;

// Fetches the lines of [p, p + bytes) kPrefetchAheadBytes ahead into L1.
// Helpers made of prefetches alone are always inlined: GCC takes such a
// function for one without effects and drops every call it has not inlined
// first (prefetch_epilogue and prefetch_a_row were missing from the GEMM
// kernels' objects that way, the int4 decode's scale prefetch from its).
template <_mm_hint Hint>
__attribute__((always_inline)) static inline void prefetch_lines(const char* p, std::int64_t bytes) {
  for (std::int64_t b = 0; b < bytes; b += 64) _mm_prefetch(p + b, Hint);
}
__attribute__((always_inline)) static inline void prefetch_ahead(const char* p, std::int64_t bytes) {
  prefetch_lines<_MM_HINT_T0>(p + kPrefetchAheadBytes, bytes);
}

}  // namespace tessera::kernels
