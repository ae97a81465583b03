#include "bench/peers_openblas.hpp"

#include <cblas.h>
#include <fmt/format.h>
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#include "tessera/core/aligned.hpp"
#include "tessera/core/hw.hpp"

namespace tessera::app::bench {

namespace {

// The weights are stored [N, K] (nn.Linear's layout): sgemv then runs in its
// dot-product form and sgemm as NT, OpenBLAS's faster layout for both in the
// measured peer baselines.
class OpenblasGemm final : public GemmImpl {
 public:
  OpenblasGemm(std::int64_t k, std::int64_t n, AlignedBuffer w_nk) : k_(k), n_(n) { copies_.push_back(std::move(w_nk)); }

  Status prepare(int threads, std::int64_t m, std::int64_t cold_bytes) override {
    openblas_set_num_threads(threads);
    m_ = m;
    a_.resize(std::size_t(m * k_));
    fill_uniform(a_, 2);
    c_.assign(std::size_t(m * n_), 0.0f);
    const std::size_t bytes = std::size_t(k_ * n_) * sizeof(float);
    const std::size_t copies = std::size_t(cold_bytes) / bytes + 1;
    while (copies_.size() < copies) {
      AlignedBuffer w(aligned_alloc_bytes(bytes));
      if (!w) return Status::out_of_memory(fmt::format("OpenBLAS: cannot allocate weight copy {}", copies_.size()));
      std::memcpy(w.get(), copies_.front().get(), bytes);
      copies_.push_back(std::move(w));
    }
    copies_.erase(copies_.begin() + std::ptrdiff_t(copies), copies_.end());
    next_ = 0;
    return {};
  }

  Status run() override {
    const float* w = static_cast<const float*>(copies_[next_].get());
    const auto m = blasint(m_), n = blasint(n_), k = blasint(k_);
    if (m == 1)
      cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0f, w, k, a_.data(), 1, 0.0f, c_.data(), 1);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, a_.data(), k, w, k, 0.0f, c_.data(), n);
    next_ = (next_ + 1) % copies_.size();
    return {};
  }

  std::int64_t copies() const override { return std::int64_t(copies_.size()); }
  std::string kernel() const override { return fmt::format("{} {}", openblas_get_corename(), m_ == 1 ? "sgemv" : "sgemm"); }

 private:
  std::int64_t k_, n_, m_ = 0;
  std::vector<float> a_, c_;
  std::vector<AlignedBuffer> copies_;
  std::size_t next_ = 0;
};

}  // namespace

Result<std::unique_ptr<GemmImpl>> make_openblas_gemm(std::int64_t k, std::int64_t n, const float* w_kn) {
  AlignedBuffer buffer(aligned_alloc_bytes(std::size_t(k * n) * sizeof(float)));
  if (!buffer) return Status::out_of_memory("OpenBLAS: cannot allocate the weights");
  // Transposed in 64 x 64 blocks, so that reads and writes both stay within cached lines.
  float* w_nk = static_cast<float*>(buffer.get());
  constexpr std::int64_t kBlock = 64;
  for (std::int64_t i0 = 0; i0 < k; i0 += kBlock)
    for (std::int64_t j0 = 0; j0 < n; j0 += kBlock)
      for (std::int64_t j = j0; j < std::min(j0 + kBlock, n); ++j)
        for (std::int64_t i = i0; i < std::min(i0 + kBlock, k); ++i) w_nk[j * k + i] = w_kn[i * n + j];
  return std::unique_ptr<GemmImpl>(std::make_unique<OpenblasGemm>(k, n, std::move(buffer)));
}

void ensure_openblas_environment() {
  // The core type only when the user left it unset, OpenBLAS did fall back,
  // and the CPU has the AVX-512 that the SkylakeX kernels use.
  const bool coretype = !std::getenv("OPENBLAS_CORETYPE") && strcasecmp(openblas_get_corename(), "prescott") == 0 &&
                        hw::info().max_isa >= hw::Isa::avx512;
  // Its idle workers spin ~2^28 cycles (~0.1 s) by default, yielding, on
  // the very cores the next implementation's turn needs (seen: Tessera's
  // 2-thread M = 1 GEMV 1.5x slower right after OpenBLAS's turn); 2^20
  // (~0.4 ms) still keeps them hot across back-to-back calls within a repeat.
  const bool timeout = !std::getenv("OPENBLAS_THREAD_TIMEOUT");
  if (!coretype && !timeout) return;
  std::ifstream cmdline("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  for (std::string arg; std::getline(cmdline, arg, '\0');) args.push_back(arg);
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  if (coretype) setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
  if (timeout) setenv("OPENBLAS_THREAD_TIMEOUT", "20", 1);
  execv("/proc/self/exe", argv.data());
  fmt::print(stderr, "warning: cannot re-run with OpenBLAS's environment set ({}); OpenBLAS keeps its {} kernels\n",
             std::strerror(errno), openblas_get_corename());
}

std::string openblas_version() { return openblas_get_config(); }

}  // namespace tessera::app::bench
