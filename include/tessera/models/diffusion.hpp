#pragma once
// The blocks of a Stable Diffusion 1.x UNet and of its VAE decoder,
// assembled from Tessera's ops behind a small C++ API (the graph layer will
// build them later):
//
//   resnet_block       GroupNorm + SiLU, conv 3x3, + time embedding,
//                      GroupNorm + SiLU, conv 3x3, + x (through a 1x1 conv
//                      when the channel count changes)
//   transformer_block  GroupNorm, proj_in, [LayerNorm, self-attention] +,
//                      [LayerNorm, cross-attention to a text context] +,
//                      [LayerNorm, GEGLU feed-forward] +, proj_out, + x
//   downsample         conv 3x3, stride 2, pad 1
//   upsample           nearest x2, then conv 3x3, pad 1
//   vae_mid_block      resnet, single-head attention (GroupNorm, q / k / v,
//                      out) + x, resnet; no time embedding
//
// Layout: every activation is f32 NHWC [N, H, W, C] (but an attention's q,
// k and v, bf16 when its projections' weights are). A transformer block's
// tokens are the rows of that very tensor, [N * H * W, C], so proj_in, the
// attention projections and proj_out are linears over the same memory and
// attention reads [N, S, heads, C / heads] views of it: one layout, no
// transposes anywhere.
//
// BlockMode::fused runs the fused ops: GroupNorm + SiLU in one pass, each
// conv and linear with its bias, the time embedding and the residual or skip
// add in its epilogue, flash attention, GEGLU in one pass, the nearest x2
// upsample read inside the conv (the optimized flash rows take head dims in
// multiples of 16: SD 1.x's heads of 40 are zero-padded to 48 on the way).
// BlockMode::unfused runs the same math one op at a time, as a framework
// without fusion does: group_norm then silu, conv or linear then add bias
// then add the residual, attention as matmul, softmax (the
// [N, heads, S, Skv] scores in memory) and matmul, gelu then mul, resize
// then conv. Both give the same result to f32 rounding.
//
// Scratch: the intermediates live in a Workspace the caller keeps between
// calls (see there), so a steady loop allocates nothing. y must not overlap
// x (nor the other inputs).
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tessera/core/status.hpp"
#include "tessera/core/tensor.hpp"
#include "tessera/ops/conv.hpp"
#include "tessera/ops/matmul.hpp"
#include "tessera/runtime/stream.hpp"

namespace tessera::models {

enum class BlockMode { fused, unfused };
std::string_view to_string(BlockMode mode);

// The intermediates of the block functions. A call takes its tensors in the
// same order every time, each from its own slot; a slot keeps its memory
// and grows to the largest request, so after the first call (of each block,
// when blocks share a workspace) nothing is allocated. The tensors of one
// call are reused by the next: one call at a time per workspace, on streams
// that run in order (queued ops keep the memory they use alive).
class Workspace {
 public:
  // Slot `index` viewed as a contiguous tensor of `shape` and `dtype`.
  Result<Tensor> slot(std::size_t index, const Shape& shape, DType dtype = DType::f32);
  std::int64_t bytes() const;  // held by all slots

 private:
  std::vector<Tensor> slots_;  // flat, each of the dtype last asked of it
};

// GroupNorm or LayerNorm scale and shift, f32 [C].
struct NormWeights {
  Tensor gamma, beta;
};

// A conv: weights packed once, bias f32 [Cout] (undefined: no bias).
struct ConvLayer {
  ops::ConvWeightsPtr w;
  Tensor bias;
};

// A linear: w [K, N] packed once, bias f32 [N] (undefined: no bias).
struct LinearLayer {
  ops::WeightsPtr w;
  Tensor bias;
};

// In channels and out channels are the convs': conv1 Cin -> Cout, conv2
// Cout -> Cout, both 3x3; skip (1x1, Cin -> Cout) only when Cin != Cout.
struct ResnetBlockWeights {
  std::int64_t groups = 32;  // of both GroupNorms
  float eps = 1e-5f;         // of both GroupNorms: 1e-5 in the UNet, 1e-6 in the VAE
  NormWeights norm1, norm2;  // [Cin], [Cout]
  ConvLayer conv1, conv2;
  ConvLayer skip;  // w null when Cin == Cout
};

// Multi-head attention's projections, [K, C] each; q, k and v have no bias
// in the UNet's transformer blocks. Cross-attention's k and v read the
// context: K = its width.
struct AttentionWeights {
  LinearLayer q, k, v, out;
};

// SD 1.x BasicTransformerBlock inside Transformer2DModel. GroupNorm eps
// 1e-6, LayerNorm eps 1e-5 (diffusers' values).
struct TransformerBlockWeights {
  std::int64_t heads = 8;           // divides C
  std::int64_t groups = 32;         // of the GroupNorm
  NormWeights norm;                 // GroupNorm [C]
  LinearLayer proj_in, proj_out;    // [C, C]
  NormWeights norm1, norm2, norm3;  // LayerNorms [C]
  AttentionWeights self_attn, cross_attn;
  // [C, 8C]: the GEGLU's value half, then its gate half (diffusers' order);
  // then [4C, C] back.
  LinearLayer ff_in, ff_out;
};

// The VAE decoder's mid block (single-head attention, GroupNorm eps 1e-6).
struct VaeMidBlockWeights {
  ResnetBlockWeights resnet1, resnet2;
  std::int64_t groups = 32;  // of the attention's GroupNorm
  NormWeights attn_norm;
  AttentionWeights attn;  // [C, C] each, all with bias
};

// Deterministic random weights for demos, benches and tests (the same on
// every machine): conv and linear weights uniform in +-sqrt(3 / fan_in)
// (unit gain), packed as `weights` (f32 or bf16: bf16 ones run the bf16
// kernels, e.g. 3x3 convs as Winograd F(4x4, 3x3) and the attention on bf16
// q, k and v, and hold the blocks to the bf16 tolerance), biases and betas
// in +-0.1 and gammas in 1 +- 0.1 (f32).
Result<NormWeights> random_norm(std::int64_t channels, std::uint64_t seed);
Result<ConvLayer> random_conv(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel,
                              std::uint64_t seed, DType weights = DType::f32);
Result<LinearLayer> random_linear(std::int64_t in_features, std::int64_t out_features, bool bias, std::uint64_t seed,
                                  DType weights = DType::f32);
Result<ResnetBlockWeights> random_resnet_block(std::int64_t in_channels, std::int64_t out_channels, std::int64_t groups,
                                               std::uint64_t seed, DType weights = DType::f32);
Result<TransformerBlockWeights> random_transformer_block(std::int64_t channels, std::int64_t heads,
                                                         std::int64_t context_dim, std::int64_t groups,
                                                         std::uint64_t seed, DType weights = DType::f32);
// channels 512 and groups 32 in SD's VAE.
Result<VaeMidBlockWeights> random_vae_mid_block(std::int64_t channels, std::int64_t groups, std::uint64_t seed,
                                                DType weights = DType::f32);

// x [N, H, W, Cin] -> y [N, H, W, Cout]. temb: the block's projection of the
// time embedding, [N, Cout], added after conv1; undefined: none (the VAE).
Status resnet_block(Stream& stream, const ResnetBlockWeights& w, const Tensor& x, const Tensor& temb, const Tensor& y,
                    Workspace& workspace, BlockMode mode = BlockMode::fused);

// x and y [N, H, W, C]; context [N, L, context_dim] (the text encoder's
// states, e.g. 77 x 768).
Status transformer_block(Stream& stream, const TransformerBlockWeights& w, const Tensor& x, const Tensor& context,
                         const Tensor& y, Workspace& workspace, BlockMode mode = BlockMode::fused);

// x and y [N, H, W, C]. The attention is one head of all C channels (SD's
// VAE: 512; the SIMD flash rows take head dims up to 512, the scalar one
// any).
Status vae_mid_block(Stream& stream, const VaeMidBlockWeights& w, const Tensor& x, const Tensor& y,
                     Workspace& workspace, BlockMode mode = BlockMode::fused);

// x [N, H, W, C] -> y [N, ceil(H / 2), ceil(W / 2), Cout]; conv 3x3.
Status downsample(Stream& stream, const ConvLayer& conv, const Tensor& x, const Tensor& y,
                  BlockMode mode = BlockMode::fused);
// x [N, H, W, C] -> y [N, 2H, 2W, Cout]; conv 3x3. Unfused, the upsampled
// x is a workspace tensor.
Status upsample(Stream& stream, const ConvLayer& conv, const Tensor& x, const Tensor& y, Workspace& workspace,
                BlockMode mode = BlockMode::fused);

// The pieces a UNet has outside its blocks: conv_in and conv_out (a conv
// with its bias), and the GroupNorm + SiLU before conv_out.
Status conv_layer(Stream& stream, const ConvLayer& conv, const Tensor& x, const Tensor& y, const ops::ConvAttrs& attrs,
                  BlockMode mode = BlockMode::fused);
Status group_norm_silu(Stream& stream, const NormWeights& norm, std::int64_t groups, float eps, const Tensor& x,
                       const Tensor& y, BlockMode mode = BlockMode::fused);

}  // namespace tessera::models
