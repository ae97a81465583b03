#include "bench/peers_onednn.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "tessera/core/dtype.hpp"

namespace tessera::app::bench {

namespace {

using dnnl::memory;
using dt = memory::data_type;
using tag = memory::format_tag;

Status onednn_error(const std::exception& e) { return Status::internal(fmt::format("oneDNN: {}", e.what())); }

// int8 is u8 activations x s8 weights without a zero point: oneDNN's fastest
// int8 path (no compensation term). A W8A8 layer also quantizes A on every
// call; oneDNN leaves that to its caller, so it is not timed here, while
// Tessera's int8 rows include it (fused into the GEMM).
class OnednnGemm final : public GemmImpl {
 public:
  OnednnGemm(GemmType type, std::int64_t k, std::int64_t n, const float* w_kn) : type_(type), k_(k), n_(n) {
    if (type == GemmType::int8) {
      quantize(w_kn);
      plain_w_ = memory({{k, n}, dt::s8, tag::ab}, engine_, w_s8_.data());
    } else {
      // Only read, by the reorder (which also rounds to bf16 for the bf16 case).
      plain_w_ = memory({{k, n}, dt::f32, tag::ab}, engine_, const_cast<float*>(w_kn));
    }
  }

  Status prepare(int threads, std::int64_t m, std::int64_t cold_bytes) override {
    try {
      // The Debian build threads with OpenMP: oneDNN sizes its blocking for
      // omp_get_max_threads() when the primitive is made, and runs that many.
      omp_set_num_threads(threads);
      const dt src = type_ == GemmType::bf16 ? dt::bf16 : type_ == GemmType::int8 ? dt::u8 : dt::f32;
      const dt wei = type_ == GemmType::bf16 ? dt::bf16 : type_ == GemmType::int8 ? dt::s8 : dt::f32;
      const memory::desc a_md({m, k_}, src, tag::ab), w_md({k_, n_}, wei, tag::any), c_md({m, n_}, dt::f32, tag::ab);
      dnnl::primitive_attr attr;
      if (type_ == GemmType::int8) attr.set_output_scales(1 << 1, scales_);  // mask 1 << 1: one scale per column
      pd_ = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, w_md, c_md), attr, engine_);
      matmul_ = dnnl::matmul(pd_);
      a_ = memory(pd_.src_desc(), engine_);
      c_ = memory(pd_.dst_desc(), engine_);
      fill_a(m);
      pack_weights(cold_bytes);
      return {};
    } catch (const std::exception& e) {
      return onednn_error(e);
    }
  }

  Status run() override {
    try {
      matmul_.execute(stream_, {{DNNL_ARG_SRC, a_}, {DNNL_ARG_WEIGHTS, packed_[next_]}, {DNNL_ARG_DST, c_}});
      stream_.wait();
    } catch (const std::exception& e) {
      return onednn_error(e);
    }
    next_ = (next_ + 1) % packed_.size();
    return {};
  }

  std::int64_t copies() const override { return std::int64_t(packed_.size()); }
  std::string kernel() const override { return pd_.impl_info_str(); }

 private:
  // Symmetric, one scale per column, as Tessera's int8 weights.
  void quantize(const float* w) {
    const auto cols = static_cast<std::size_t>(n_);
    std::vector<float> max_abs(cols, 0.0f), inv(cols);
    for (std::int64_t i = 0; i < k_; ++i)
      for (std::int64_t j = 0; j < n_; ++j) max_abs[j] = std::max(max_abs[j], std::fabs(w[i * n_ + j]));
    scales_.resize(cols);
    for (std::int64_t j = 0; j < n_; ++j) {
      const float w_scale = max_abs[j] > 0 ? max_abs[j] / 127.0f : 1.0f;
      inv[j] = 1.0f / w_scale;
      scales_[j] = w_scale / 256.0f;  // x the activation scale: the u8 values stand for [0, 1)
    }
    w_s8_.resize(std::size_t(k_ * n_));
    for (std::int64_t i = 0; i < k_; ++i)
      for (std::int64_t j = 0; j < n_; ++j) w_s8_[i * n_ + j] = std::int8_t(std::lrint(w[i * n_ + j] * inv[j]));
  }

  void fill_a(std::int64_t m) {
    std::vector<float> v(std::size_t(m * k_));
    if (type_ == GemmType::int8) {
      fill_uniform(v, 2, 0.0f, 256.0f);
      std::transform(v.begin(), v.end(), static_cast<std::uint8_t*>(a_.get_data_handle()),
                     [](float x) { return std::uint8_t(x); });
    } else if (type_ == GemmType::bf16) {
      fill_uniform(v, 2);
      std::transform(v.begin(), v.end(), static_cast<std::uint16_t*>(a_.get_data_handle()),
                     [](float x) { return f32_to_bf16(x).bits; });
    } else {
      fill_uniform(v, 2);
      std::copy(v.begin(), v.end(), static_cast<float*>(a_.get_data_handle()));
    }
  }

  // Reorders the weights into the primitive's layout once; further copies
  // are byte copies of the first (the same layout at other addresses).
  void pack_weights(std::int64_t cold_bytes) {
    const memory::desc layout = pd_.weights_desc();
    if (!packed_.empty() && packed_.front().get_desc() != layout) packed_.clear();  // another M chose another layout
    const std::size_t bytes = layout.get_size();
    const std::size_t copies = std::size_t(cold_bytes) / bytes + 1;
    if (packed_.empty()) {
      packed_.emplace_back(layout, engine_);
      dnnl::reorder(plain_w_, packed_.front()).execute(stream_, plain_w_, packed_.front());
      stream_.wait();
    }
    while (packed_.size() < copies) {
      packed_.emplace_back(layout, engine_);
      std::memcpy(packed_.back().get_data_handle(), packed_.front().get_data_handle(), bytes);
    }
    packed_.erase(packed_.begin() + std::ptrdiff_t(copies), packed_.end());
    next_ = 0;
  }

  GemmType type_;
  std::int64_t k_, n_;
  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  std::vector<std::int8_t> w_s8_;  // int8: the quantized weights, plain [K, N]
  std::vector<float> scales_;      // int8: the output scale of each column
  memory plain_w_;
  dnnl::matmul::primitive_desc pd_;
  dnnl::matmul matmul_;
  memory a_, c_;
  std::vector<memory> packed_;
  std::size_t next_ = 0;
};

}  // namespace

Result<std::unique_ptr<GemmImpl>> make_onednn_gemm(GemmType type, std::int64_t k, std::int64_t n, const float* w_kn) {
  if (type == GemmType::int4) return Status::unsupported("oneDNN 2.6 has no int4 GEMM");
  try {
    return std::unique_ptr<GemmImpl>(std::make_unique<OnednnGemm>(type, k, n, w_kn));
  } catch (const std::exception& e) {
    return onednn_error(e);
  }
}

std::string onednn_version() {
  const dnnl::version_t* v = dnnl::version();
  return fmt::format("oneDNN {}.{}.{}", v->major, v->minor, v->patch);
}

}  // namespace tessera::app::bench
