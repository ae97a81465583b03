#pragma once
// OpenBLAS as a peer, f32 only (built only with TESSERA_HAVE_OPENBLAS).
#include <cstdint>
#include <memory>
#include <string>

#include "bench/harness.hpp"

namespace tessera::app::bench {

// cblas_sgemv for M = 1, cblas_sgemm otherwise. w_kn: the case's f32
// weights [K, N], row-major; OpenBLAS gets its own copy, stored [N, K].
Result<std::unique_ptr<GemmImpl>> make_openblas_gemm(std::int64_t k, std::int64_t n, const float* w_kn);

// OpenBLAS reads its environment when the library is loaded, before
// main(): when OPENBLAS_CORETYPE should be set (0.3.21 does not know a
// Sapphire Rapids CPU and falls back to its Prescott SSE3 kernels: SkylakeX)
// or OPENBLAS_THREAD_TIMEOUT is unset, this re-executes the same command
// line with them set; it returns only when nothing needed doing or the
// re-exec failed (with a warning).
void ensure_openblas_environment();

// "OpenBLAS 0.3.21 ... SkylakeX ...": its build configuration and core.
std::string openblas_version();

}  // namespace tessera::app::bench
