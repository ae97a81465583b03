#include "bench/peers_onednn.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
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

// Attention as a oneDNN user writes it without a fused kernel, three
// primitives with the scores in memory:
//   s = scale * q kᵀ      matmul; f32 scores (also for bf16 inputs, as the
//                         accumulator); the scale as its output scale
//   s += mask             causal only: binary add, in place
//   p = softmax(s)        softmax_v2 along Skv; in place for f32, into a
//                         bf16 p for bf16 (the dtype of the next matmul)
//   o = p v               matmul
// Causal: oneDNN's softmax has no causal option, so a precomputed additive
// mask (0 / -inf) is added by a binary primitive, not a binary post-op on
// the first matmul: oneDNN 2.6's brgemm matmul takes a post-op mask only
// unbroadcast (score-sized, [B * Hkv, M, Skv]) — a [1, M, Skv] one sends it
// to ref:any — and on the 2-core AMX development machine (S = 1024,
// Hkv = 8, one thread) matmul + binary took 62 ms against the score-sized
// post-op's 93 in bf16, and about the same (132 / 118 ms, noisy) in f32.
// GQA without broadcasting: in [B, Hq, Sq, D] the G = Hq / Hkv query heads
// of one kv head are adjacent, so they are one matrix of G * Sq rows against
// that head's keys: batch B * Hkv, M = G * Sq (and the mask [1, G * Sq, Skv]
// holds G copies of the [Sq, Skv] triangle, broadcast over the batch).
// Layouts: q and o [B, Hq, Sq, D], k and v [B, Hkv, Skv, D] — oneDNN's plain
// batched matmul layout, its best case; the relayout that Tessera's
// [B, S, H, D] tensors would need is not timed.
class OnednnAttention final : public AttentionImpl {
 public:
  OnednnAttention(const AttentionShape& s, DType dtype)
      : bh_(s.batch * s.kv_heads),
        m_((s.q_heads / s.kv_heads) * s.q_len),
        n_(s.kv_len),
        d_(s.head_dim),
        scale_(1.0f / std::sqrt(float(s.head_dim))),
        causal_(s.causal),
        x_(dtype == DType::bf16 ? dt::bf16 : dt::f32) {
    q_ = memory(q_md(), engine_);
    k_ = memory(kt_md(), engine_);
    v_ = memory(v_md(), engine_);
    o_ = memory(o_md(), engine_);
    scores_ = memory(s_md(), engine_);
    probs_ = x_ == dt::f32 ? scores_ : memory(p_md(), engine_);  // f32: softmax in place
    fill(q_, 11);
    fill(k_, 12);
    fill(v_, 13);
    if (causal_) {
      mask_ = memory(mask_md(), engine_);
      float* mask = static_cast<float*>(mask_.get_data_handle());
      const memory::dim sq = s.q_len;
      for (memory::dim r = 0; r < m_; ++r)
        for (memory::dim j = 0; j < n_; ++j)  // row r is query r % Sq of its head
          mask[r * n_ + j] = j <= r % sq + n_ - sq ? 0.0f : -std::numeric_limits<float>::infinity();
    }
  }

  Status prepare(int threads) override {
    try {
      omp_set_num_threads(threads);  // before the primitives are made: they size their blocking for it
      dnnl::primitive_attr qk_attr;
      qk_attr.set_output_scales(0, {scale_});
      qk_pd_ = dnnl::matmul::primitive_desc(dnnl::matmul::desc(q_md(), kt_md(), s_md()), qk_attr, engine_);
      if (causal_) {
        mask_pd_ = dnnl::binary::primitive_desc(
            dnnl::binary::desc(dnnl::algorithm::binary_add, s_md(), mask_md(), s_md()), engine_);
        mask_add_ = dnnl::binary(mask_pd_);
      }
      softmax_pd_ = dnnl::softmax_v2_forward::primitive_desc(
          dnnl::softmax_v2_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::softmax_accurate, s_md(),
                                         p_md(), 2),
          engine_);
      pv_pd_ = dnnl::matmul::primitive_desc(dnnl::matmul::desc(p_md(), v_md(), o_md()), engine_);
      qk_ = dnnl::matmul(qk_pd_);
      softmax_ = dnnl::softmax_v2_forward(softmax_pd_);
      pv_ = dnnl::matmul(pv_pd_);
      return {};
    } catch (const std::exception& e) {
      return onednn_error(e);
    }
  }

  Status run() override {
    try {
      qk_.execute(stream_, {{DNNL_ARG_SRC, q_}, {DNNL_ARG_WEIGHTS, k_}, {DNNL_ARG_DST, scores_}});
      if (causal_) mask_add_.execute(stream_, {{DNNL_ARG_SRC_0, scores_}, {DNNL_ARG_SRC_1, mask_}, {DNNL_ARG_DST, scores_}});
      softmax_.execute(stream_, {{DNNL_ARG_SRC, scores_}, {DNNL_ARG_DST, probs_}});
      pv_.execute(stream_, {{DNNL_ARG_SRC, probs_}, {DNNL_ARG_WEIGHTS, v_}, {DNNL_ARG_DST, o_}});
      stream_.wait();
      return {};
    } catch (const std::exception& e) {
      return onednn_error(e);
    }
  }

  std::string kernel() const override {
    const std::string mask = causal_ ? fmt::format(" + {}", mask_pd_.impl_info_str()) : std::string();
    return fmt::format("{}{} + {} + {}", qk_pd_.impl_info_str(), mask, softmax_pd_.impl_info_str(), pv_pd_.impl_info_str());
  }

 private:
  memory::desc q_md() const { return {{bh_, m_, d_}, x_, tag::abc}; }
  memory::desc kt_md() const { return {{bh_, d_, n_}, x_, tag::acb}; }  // kᵀ: k [B * Hkv, Skv, D] read transposed
  memory::desc v_md() const { return {{bh_, n_, d_}, x_, tag::abc}; }
  memory::desc o_md() const { return {{bh_, m_, d_}, x_, tag::abc}; }
  memory::desc s_md() const { return {{bh_, m_, n_}, dt::f32, tag::abc}; }
  memory::desc p_md() const { return {{bh_, m_, n_}, x_, tag::abc}; }
  memory::desc mask_md() const { return {{1, m_, n_}, dt::f32, tag::abc}; }

  void fill(const memory& mem, std::uint64_t seed) const {
    const std::size_t count = mem.get_desc().get_size() / (x_ == dt::bf16 ? 2 : 4);
    std::vector<float> v(count);
    fill_uniform(v, seed);
    if (x_ == dt::bf16)
      std::transform(v.begin(), v.end(), static_cast<std::uint16_t*>(mem.get_data_handle()),
                     [](float x) { return f32_to_bf16(x).bits; });
    else
      std::copy(v.begin(), v.end(), static_cast<float*>(mem.get_data_handle()));
  }

  memory::dim bh_, m_, n_, d_;
  float scale_;
  bool causal_;
  dt x_;
  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  memory q_, k_, v_, o_, scores_, probs_, mask_;
  dnnl::matmul::primitive_desc qk_pd_, pv_pd_;
  dnnl::binary::primitive_desc mask_pd_;
  dnnl::softmax_v2_forward::primitive_desc softmax_pd_;
  dnnl::matmul qk_, pv_;
  dnnl::binary mask_add_;
  dnnl::softmax_v2_forward softmax_;
};

}  // namespace

Result<std::unique_ptr<AttentionImpl>> make_onednn_attention(const AttentionShape& shape, DType dtype) {
  if (dtype != DType::f32 && dtype != DType::bf16) return Status::unsupported("oneDNN attention: f32 or bf16 only");
  if (shape.kv_heads <= 0 || shape.q_heads % shape.kv_heads != 0)
    return Status::invalid_argument("oneDNN attention: Hq must be a multiple of Hkv");
  try {
    return std::unique_ptr<AttentionImpl>(std::make_unique<OnednnAttention>(shape, dtype));
  } catch (const std::exception& e) {
    return onednn_error(e);
  }
}

Result<std::unique_ptr<GemmImpl>> make_onednn_gemm(GemmType type, std::int64_t k, std::int64_t n, const float* w_kn) {
  if (type == GemmType::int4) return Status::unsupported("oneDNN 2.6 has no int4 GEMM");
  try {
    return std::unique_ptr<GemmImpl>(std::make_unique<OnednnGemm>(type, k, n, w_kn));
  } catch (const std::exception& e) {
    return onednn_error(e);
  }
}

OnednnCall onednn_call(std::string kernel, int threads, std::function<void()> execute) {
  return {[threads, execute = std::move(execute)]() -> Status {
            try {
              omp_set_num_threads(threads);
              execute();
              return {};
            } catch (const std::exception& e) {
              return onednn_error(e);
            }
          },
          std::move(kernel)};
}

std::string onednn_version() {
  const dnnl::version_t* v = dnnl::version();
  return fmt::format("oneDNN {}.{}.{}", v->major, v->minor, v->patch);
}

}  // namespace tessera::app::bench
