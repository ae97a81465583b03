#pragma once
// oneDNN's matmul primitive as a peer (built only with TESSERA_HAVE_ONEDNN).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/harness.hpp"

namespace tessera::app::bench {

// f32 (f32:f32:f32), bf16 (bf16:bf16:f32) or int8 (u8:s8:f32, per-column
// output scales); there is no int4 GEMM in oneDNN 2.6. The weights are
// reordered once into the layout the primitive asks for (format_tag::any),
// its best case. w_kn: the case's f32 weights [K, N], row-major; it must
// outlive the result.
Result<std::unique_ptr<GemmImpl>> make_onednn_gemm(GemmType type, std::int64_t k, std::int64_t n, const float* w_kn);

// Dense attention (AttentionShape) as oneDNN primitives, the score tensor
// materialized: matmul q kᵀ (f32 scores), a binary add of the causal mask,
// softmax, matmul p v. f32, or bf16 q / k / v / p / o with f32
// scores. Its inputs are made and filled here, in oneDNN's plain batched
// layout [B, H, S, D].
Result<std::unique_ptr<AttentionImpl>> make_onednn_attention(const AttentionShape& shape, DType dtype);

// A memory-bound oneDNN primitive run on the caller's tensors in place
// (their data, dims and strides become oneDNN memory objects), for
// `bench membound`. `primitive` names it:
//   eltwise_relu, eltwise_gelu_erf, eltwise_gelu_tanh, eltwise_swish,
//   eltwise_logistic, eltwise_tanh, eltwise_exp,
//   eltwise_quick_gelu (swish at alpha 1.702)             {x} -> y
//   binary_add, binary_mul                                {a, b} -> y
//   softmax, logsoftmax (last axis)                       {x} -> y
//   layer_norm (last axis, f32 scale and shift)           {x, gamma, beta} -> y
//   reorder (any strides, dtype conversion)               {x} -> y
//   resampling_nearest, resampling_linear (NCHW or NHWC by strides) {x} -> y
//   reduction_sum, reduction_l2 (dims where y has 1)      {x} -> y
//   concat (along `axis`)                                 inputs -> y
// The primitive is made for `threads` OpenMP threads.
struct OnednnMemboundSpec {
  std::string primitive;
  std::vector<Tensor> inputs;
  Tensor output;
  int axis = -1;
  float eps = 1e-5f;
};
struct OnednnCall {
  std::function<Status()> run;  // one execution; returns when y is written
  std::string kernel;           // oneDNN's implementation
};
Result<OnednnCall> make_onednn_membound(const OnednnMemboundSpec& spec, int threads);
// A prepared oneDNN chain as a call: each run first sets the OpenMP thread
// count (the other peers of a run set theirs) and returns oneDNN's
// exceptions as a Status. `execute` returns when y is written.
OnednnCall onednn_call(std::string kernel, int threads, std::function<void()> execute);

// "oneDNN 2.6.3".
std::string onednn_version();

}  // namespace tessera::app::bench
