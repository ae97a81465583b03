#include "tessera/models/diffusion.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

#include "tessera/ops/attention.hpp"
#include "tessera/ops/elementwise.hpp"
#include "tessera/ops/group_norm.hpp"
#include "tessera/ops/layout.hpp"
#include "tessera/ops/norm.hpp"
#include "tessera/ops/resize.hpp"
#include "tessera/ops/softmax.hpp"

namespace tessera::models {

namespace {

// diffusers' values: the transformer's GroupNorm and the VAE attention's
// GroupNorm use 1e-6, the transformer's LayerNorms 1e-5.
constexpr float kTransformerGroupNormEps = 1e-6f, kLayerNormEps = 1e-5f, kVaeGroupNormEps = 1e-6f;

// ------------------------------------------------------------------ random weights

std::uint64_t mix(std::uint64_t z) {  // splitmix64's finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform f32 tensors from a hash of (seed, tensor number, element index):
// the same values on every machine; conv and linear weights are packed as
// `weights`.
class Random {
 public:
  Random(std::uint64_t seed, DType weights) : weights(weights), seed_(mix(seed + 0x9e3779b97f4a7c15ull)) {}

  const DType weights;

  Result<Tensor> uniform(const Shape& shape, float lo, float hi) {
    TESSERA_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(DType::f32, shape));
    const std::uint64_t base = mix(seed_ + ++tensors_ * 0x9e3779b97f4a7c15ull);
    float* p = t.data_as<float>();
    for (std::int64_t i = 0; i < t.numel(); ++i)
      p[i] = lo + (hi - lo) * float(mix(base + std::uint64_t(i)) >> 40) * 0x1p-24f;
    return t;
  }

 private:
  std::uint64_t seed_, tensors_ = 0;
};

// Unit gain: a uniform weight of variance 1 / fan_in keeps unit-variance inputs at unit variance.
float weight_bound(std::int64_t fan_in) { return std::sqrt(3.0f / float(std::max<std::int64_t>(fan_in, 1))); }

Result<NormWeights> make_norm(Random& rng, std::int64_t channels) {
  NormWeights n;
  TESSERA_ASSIGN_OR_RETURN(n.gamma, rng.uniform({channels}, 0.9f, 1.1f));
  TESSERA_ASSIGN_OR_RETURN(n.beta, rng.uniform({channels}, -0.1f, 0.1f));
  return n;
}

Result<ConvLayer> make_conv(Random& rng, std::int64_t in, std::int64_t out, std::int64_t kernel) {
  const float bound = weight_bound(in * kernel * kernel);
  TESSERA_ASSIGN_OR_RETURN(Tensor w, rng.uniform({out, in, kernel, kernel}, -bound, bound));
  ConvLayer c;
  TESSERA_ASSIGN_OR_RETURN(c.w, ops::ConvWeights::pack(w, 1, rng.weights));
  TESSERA_ASSIGN_OR_RETURN(c.bias, rng.uniform({out}, -0.1f, 0.1f));
  return c;
}

Result<LinearLayer> make_linear(Random& rng, std::int64_t in, std::int64_t out, bool bias) {
  const float bound = weight_bound(in);
  TESSERA_ASSIGN_OR_RETURN(Tensor w, rng.uniform({in, out}, -bound, bound));
  LinearLayer l;
  TESSERA_ASSIGN_OR_RETURN(l.w, ops::pack_weights(w, rng.weights));
  if (bias) {
    TESSERA_ASSIGN_OR_RETURN(l.bias, rng.uniform({out}, -0.1f, 0.1f));
  }
  return l;
}

Result<AttentionWeights> make_attention(Random& rng, std::int64_t channels, std::int64_t kv_features, bool qkv_bias) {
  AttentionWeights a;
  TESSERA_ASSIGN_OR_RETURN(a.q, make_linear(rng, channels, channels, qkv_bias));
  TESSERA_ASSIGN_OR_RETURN(a.k, make_linear(rng, kv_features, channels, qkv_bias));
  TESSERA_ASSIGN_OR_RETURN(a.v, make_linear(rng, kv_features, channels, qkv_bias));
  TESSERA_ASSIGN_OR_RETURN(a.out, make_linear(rng, channels, channels, true));
  return a;
}

Result<ResnetBlockWeights> make_resnet(Random& rng, std::int64_t in, std::int64_t out, std::int64_t groups) {
  ResnetBlockWeights w;
  w.groups = groups;
  TESSERA_ASSIGN_OR_RETURN(w.norm1, make_norm(rng, in));
  TESSERA_ASSIGN_OR_RETURN(w.conv1, make_conv(rng, in, out, 3));
  TESSERA_ASSIGN_OR_RETURN(w.norm2, make_norm(rng, out));
  TESSERA_ASSIGN_OR_RETURN(w.conv2, make_conv(rng, out, out, 3));
  if (in != out) {
    TESSERA_ASSIGN_OR_RETURN(w.skip, make_conv(rng, in, out, 1));
  }
  return w;
}

// ------------------------------------------------------------------ argument checks

std::optional<Tensor> if_defined(const Tensor& t) { return t.defined() ? std::optional(t) : std::nullopt; }

std::string describe(const Tensor& t) {
  return t.defined() ? fmt::format("{} {}", to_string(t.dtype()), t.shape().to_string()) : std::string("undefined");
}

// An f32 [N, H, W, C] (NHWC) activation, with `channels` channels when given.
Status check_nhwc(const Tensor& t, std::string_view name, std::optional<std::int64_t> channels = std::nullopt) {
  if (!t.defined() || t.dtype() != DType::f32 || t.rank() != 4 || (channels && t.dim(3) != *channels))
    return Status::invalid_argument(fmt::format("{}: expected an f32 [N, H, W, {}] (NHWC) tensor, got {}", name,
                                                channels ? std::to_string(*channels) : "C", describe(t)));
  return {};
}

Status check_shape(const Tensor& t, std::string_view name, const Shape& expected) {
  if (!t.defined() || t.dtype() != DType::f32 || !(t.shape() == expected))
    return Status::invalid_argument(
        fmt::format("{}: expected f32 {}, got {}", name, expected.to_string(), describe(t)));
  return {};
}

// A per-channel vector of the weights, f32 [n] when present.
Status check_vector(const Tensor& t, std::string_view owner, std::string_view field, std::int64_t n) {
  if (t.defined() && (t.dtype() != DType::f32 || !(t.shape() == Shape{n})))
    return Status::invalid_argument(fmt::format("{}.{}: expected f32 [{}], got {}", owner, field, n, describe(t)));
  return {};
}

Status check_norm(const NormWeights& n, std::string_view name, std::int64_t channels) {
  TESSERA_RETURN_IF_ERROR(check_vector(n.gamma, name, "gamma", channels));
  return check_vector(n.beta, name, "beta", channels);
}

Status check_groups(std::int64_t groups, std::string_view name, std::int64_t channels) {
  if (groups <= 0 || channels % groups != 0)
    return Status::invalid_argument(fmt::format("{}: {} groups do not divide {} channels", name, groups, channels));
  return {};
}

// A kernel x kernel conv of `in` channels (to `out` when given), one group.
Status check_conv(const ConvLayer& c, std::string_view name, std::int64_t in, std::int64_t kernel,
                  std::optional<std::int64_t> out = std::nullopt) {
  if (!c.w) return Status::invalid_argument(fmt::format("{}: no weights", name));
  const ops::ConvWeights& w = *c.w;
  if (w.groups() != 1 || w.in_channels_per_group() != in || w.kernel_h() != kernel || w.kernel_w() != kernel ||
      (out && w.out_channels() != *out))
    return Status::invalid_argument(
        fmt::format("{}: expected a {}x{} conv of {} input channels{}, got {}x{}, {} -> {} channels in {} groups", name,
                    kernel, kernel, in, out ? fmt::format(" to {}", *out) : std::string(), w.kernel_h(), w.kernel_w(),
                    w.in_channels_per_group() * w.groups(), w.out_channels(), w.groups()));
  return check_vector(c.bias, name, "bias", w.out_channels());
}

Status check_linear(const LinearLayer& l, std::string_view owner, std::string_view field, std::int64_t in,
                    std::int64_t out) {
  if (!l.w || l.w->k() != in || l.w->n() != out)
    return Status::invalid_argument(fmt::format("{}.{}: expected [{}, {}] weights, got {}", owner, field, in, out,
                                                l.w ? fmt::format("[{}, {}]", l.w->k(), l.w->n()) : "none"));
  return check_vector(l.bias, fmt::format("{}.{}", owner, field), "bias", out);
}

Status check_attention(const AttentionWeights& a, std::string_view name, std::int64_t channels,
                       std::int64_t kv_features) {
  TESSERA_RETURN_IF_ERROR(check_linear(a.q, name, "q", channels, channels));
  TESSERA_RETURN_IF_ERROR(check_linear(a.k, name, "k", kv_features, channels));
  TESSERA_RETURN_IF_ERROR(check_linear(a.v, name, "v", kv_features, channels));
  return check_linear(a.out, name, "out", channels, channels);
}

Status check_resnet(const ResnetBlockWeights& w, std::string_view name, std::int64_t in, std::int64_t out) {
  const std::string prefix(name);
  TESSERA_RETURN_IF_ERROR(check_groups(w.groups, prefix + ".groups", in));
  TESSERA_RETURN_IF_ERROR(check_groups(w.groups, prefix + ".groups", out));
  if (!(w.eps >= 0.0f) || !std::isfinite(w.eps))
    return Status::invalid_argument(fmt::format("{}.eps: {} is not finite and >= 0", name, w.eps));
  TESSERA_RETURN_IF_ERROR(check_norm(w.norm1, prefix + ".norm1", in));
  TESSERA_RETURN_IF_ERROR(check_conv(w.conv1, prefix + ".conv1", in, 3, out));
  TESSERA_RETURN_IF_ERROR(check_norm(w.norm2, prefix + ".norm2", out));
  TESSERA_RETURN_IF_ERROR(check_conv(w.conv2, prefix + ".conv2", out, 3, out));
  if (in != out) return check_conv(w.skip, prefix + ".skip", in, 1, out);
  if (w.skip.w)
    return Status::invalid_argument(fmt::format("{}.skip: expected none, the block keeps its {} channels", name, in));
  return {};
}

// ------------------------------------------------------------------ the pieces

// One block call: its stream and mode, and the workspace slots it has taken.
struct Run {
  Stream& stream;
  Workspace& workspace;
  BlockMode mode;
  std::size_t next_slot = 0;

  bool fused() const { return mode == BlockMode::fused; }
  Result<Tensor> scratch(const Shape& shape, DType dtype = DType::f32) { return workspace.slot(next_slot++, shape, dtype); }
};

// The unfused epilogue of a conv or linear whose product is in `out`: out +=
// bias, then c = residual + out. The product goes to c itself unless the
// residual is c (c += ...), which needs c intact until the add.
Result<Tensor> unfused_product(Run& r, const Tensor& residual, const Tensor& c) {
  if (residual.defined() && residual.data() == c.data()) return r.scratch(c.shape());
  return c;
}

Status unfused_epilogue(Run& r, const Tensor& bias, const Tensor& residual, const Tensor& out, const Tensor& c) {
  if (bias.defined()) TESSERA_RETURN_IF_ERROR(ops::add(r.stream, out, bias, out));
  if (residual.defined()) TESSERA_RETURN_IF_ERROR(ops::add(r.stream, residual, out, c));
  return {};
}

// y = conv(x) + bias (+ residual, which may be y itself or broadcast).
Status conv(Run& r, const ConvLayer& c, const Tensor& x, const Tensor& y, const ops::ConvAttrs& attrs,
            const Tensor& residual = {}) {
  if (r.fused()) return ops::conv2d(r.stream, x, c.w, y, attrs, {.bias = c.bias, .residual = residual});
  TESSERA_ASSIGN_OR_RETURN(Tensor out, unfused_product(r, residual, y));
  TESSERA_RETURN_IF_ERROR(ops::conv2d(r.stream, x, c.w, out, attrs));
  return unfused_epilogue(r, c.bias, residual, out, y);
}

// c = a W + bias (+ residual, which may be c itself).
Status linear(Run& r, const LinearLayer& l, const Tensor& a, const Tensor& c, const Tensor& residual = {}) {
  if (r.fused()) return ops::linear(r.stream, a, l.w, c, {.bias = l.bias, .residual = residual});
  TESSERA_ASSIGN_OR_RETURN(Tensor out, unfused_product(r, residual, c));
  TESSERA_RETURN_IF_ERROR(ops::linear(r.stream, a, l.w, out));
  return unfused_epilogue(r, l.bias, residual, out, c);
}

Status group_norm(Stream& stream, const NormWeights& n, std::int64_t groups, float eps, const Tensor& x,
                  const Tensor& y, bool silu = false) {
  return ops::group_norm(stream, x, if_defined(n.gamma), if_defined(n.beta), y,
                         {.groups = groups, .eps = eps, .channels_last = true, .silu = silu});
}

Status norm_silu(Stream& stream, const NormWeights& n, std::int64_t groups, float eps, const Tensor& x, const Tensor& y,
                 BlockMode mode) {
  if (mode == BlockMode::fused) return group_norm(stream, n, groups, eps, x, y, true);
  TESSERA_RETURN_IF_ERROR(group_norm(stream, n, groups, eps, x, y));
  return ops::silu(stream, y, y);
}

Status layer_norm(Stream& stream, const NormWeights& n, const Tensor& x, const Tensor& y) {
  return ops::layer_norm(stream, x, if_defined(n.gamma), if_defined(n.beta), y, {.eps = kLayerNormEps});
}

const ops::ConvAttrs kSame3x3{.padding = {1, 1}};

// x [N, H, W, Cin] -> y [N, H, W, Cout]; temb [N, Cout] or undefined.
Status resnet(Run& r, const ResnetBlockWeights& w, const Tensor& x, const Tensor& temb, const Tensor& y) {
  TESSERA_ASSIGN_OR_RETURN(Tensor a, r.scratch(x.shape()));
  TESSERA_RETURN_IF_ERROR(norm_silu(r.stream, w.norm1, w.groups, w.eps, x, a, r.mode));
  // The time embedding, one value per (image, channel), broadcast over the pixels.
  Tensor temb_map;
  if (temb.defined()) {
    TESSERA_ASSIGN_OR_RETURN(Tensor t4, temb.reshape({temb.dim(0), 1, 1, temb.dim(1)}));
    TESSERA_ASSIGN_OR_RETURN(temb_map, t4.expand(y.shape()));
  }
  TESSERA_ASSIGN_OR_RETURN(Tensor h, r.scratch(y.shape()));
  TESSERA_RETURN_IF_ERROR(conv(r, w.conv1, a, h, kSame3x3, temb_map));
  TESSERA_RETURN_IF_ERROR(norm_silu(r.stream, w.norm2, w.groups, w.eps, h, h, r.mode));
  if (!w.skip.w) return conv(r, w.conv2, h, y, kSame3x3, x);
  // The 1x1 skip conv writes y first; conv2 then adds onto it.
  TESSERA_RETURN_IF_ERROR(conv(r, w.skip, x, y, {}));
  return conv(r, w.conv2, h, y, kSame3x3, y);
}

// o = softmax(q kᵀ / sqrt(D)) v per head; q and o [N, ..., C], k and v
// [N, ..., C], contiguous (workspace tensors), C = heads x D; q, k and v
// f32 or bf16, o f32. Unfused through bf16, the scores are f32 and the
// probabilities bf16 (as autocast runs it): the second matmul's operands.
Status attend(Run& r, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o, std::int64_t heads) {
  const std::int64_t n = q.dim(0), c = q.dim(q.rank() - 1), d = c / heads;
  const std::int64_t sq = q.numel() / (n * c), skv = k.numel() / (n * c);
  TESSERA_ASSIGN_OR_RETURN(Tensor q4, q.reshape({n, sq, heads, d}));
  TESSERA_ASSIGN_OR_RETURN(Tensor k4, k.reshape({n, skv, heads, d}));
  TESSERA_ASSIGN_OR_RETURN(Tensor v4, v.reshape({n, skv, heads, d}));
  TESSERA_ASSIGN_OR_RETURN(Tensor o4, o.reshape({n, sq, heads, d}));
  if (r.fused()) return ops::attention(r.stream, q4, k4, v4, o4);
  // The [N, heads, Sq, Skv] scores in memory; the per-head operands are views.
  TESSERA_ASSIGN_OR_RETURN(Tensor qh, q4.permute({0, 2, 1, 3}));
  TESSERA_ASSIGN_OR_RETURN(Tensor kt, k4.permute({0, 2, 3, 1}));
  TESSERA_ASSIGN_OR_RETURN(Tensor vh, v4.permute({0, 2, 1, 3}));
  TESSERA_ASSIGN_OR_RETURN(Tensor oh, o4.permute({0, 2, 1, 3}));
  TESSERA_ASSIGN_OR_RETURN(Tensor scores, r.scratch({n, heads, sq, skv}));
  TESSERA_RETURN_IF_ERROR(ops::matmul(r.stream, qh, kt, scores));
  Tensor probs = scores;
  if (v.dtype() != DType::f32) {
    TESSERA_ASSIGN_OR_RETURN(probs, r.scratch(scores.shape(), v.dtype()));
  }
  TESSERA_RETURN_IF_ERROR(ops::softmax(r.stream, scores, probs, {.scale = 1.0f / std::sqrt(float(d))}));
  return ops::matmul(r.stream, probs, vh, oh);
}

// out = residual + attention(hidden, kv_source) projected by a.out; q from
// hidden [N, ..., C], k and v from kv_source [N, ..., K]. out may be the
// residual itself. q, k and v come out of their projections in the
// projections' weight dtype when that is bf16: such a block is held to the
// bf16 tolerance already, and bf16 operands run the attention on bf16 dot
// products (AMD EPYC, 2 threads, [1, 4096, 8, 40]: 121 -> 79 ms).
Status attention_layer(Run& r, const AttentionWeights& a, std::int64_t heads, const Tensor& hidden,
                       const Tensor& kv_source, const Tensor& out, const Tensor& residual) {
  Shape kv_shape = kv_source.shape();
  kv_shape[kv_shape.rank() - 1] = hidden.dim(hidden.rank() - 1);
  const DType qkv = a.q.w->dtype() == DType::bf16 ? DType::bf16 : DType::f32;
  TESSERA_ASSIGN_OR_RETURN(Tensor q, r.scratch(hidden.shape(), qkv));
  TESSERA_ASSIGN_OR_RETURN(Tensor k, r.scratch(kv_shape, qkv));
  TESSERA_ASSIGN_OR_RETURN(Tensor v, r.scratch(kv_shape, qkv));
  TESSERA_ASSIGN_OR_RETURN(Tensor o, r.scratch(hidden.shape()));
  TESSERA_RETURN_IF_ERROR(linear(r, a.q, hidden, q));
  TESSERA_RETURN_IF_ERROR(linear(r, a.k, kv_source, k));
  TESSERA_RETURN_IF_ERROR(linear(r, a.v, kv_source, v));
  TESSERA_RETURN_IF_ERROR(attend(r, q, k, v, o, heads));
  return linear(r, a.out, o, out, residual);
}

// x, y [N, H, W, C]; context [N, L, K]. The tokens are x's pixels: every
// linear and norm below runs over [N, H, W, .] tensors as rows of channels.
Status transformer(Run& r, const TransformerBlockWeights& w, const Tensor& x, const Tensor& context, const Tensor& y) {
  Shape wide = x.shape(), ff = x.shape();
  const std::int64_t c = x.dim(3);
  wide[3] = 8 * c;
  ff[3] = 4 * c;
  TESSERA_ASSIGN_OR_RETURN(Tensor normed, r.scratch(x.shape()));
  TESSERA_ASSIGN_OR_RETURN(Tensor t, r.scratch(x.shape()));  // the block's residual stream
  TESSERA_RETURN_IF_ERROR(group_norm(r.stream, w.norm, w.groups, kTransformerGroupNormEps, x, normed));
  TESSERA_RETURN_IF_ERROR(linear(r, w.proj_in, normed, t));
  TESSERA_RETURN_IF_ERROR(layer_norm(r.stream, w.norm1, t, normed));
  TESSERA_RETURN_IF_ERROR(attention_layer(r, w.self_attn, w.heads, normed, normed, t, t));
  TESSERA_RETURN_IF_ERROR(layer_norm(r.stream, w.norm2, t, normed));
  TESSERA_RETURN_IF_ERROR(attention_layer(r, w.cross_attn, w.heads, normed, context, t, t));
  TESSERA_RETURN_IF_ERROR(layer_norm(r.stream, w.norm3, t, normed));
  TESSERA_ASSIGN_OR_RETURN(Tensor projected, r.scratch(wide));
  TESSERA_ASSIGN_OR_RETURN(Tensor gated, r.scratch(ff));
  TESSERA_RETURN_IF_ERROR(linear(r, w.ff_in, normed, projected));
  if (r.fused()) {
    TESSERA_RETURN_IF_ERROR(ops::geglu(r.stream, projected, gated));
  } else {  // value * gelu(gate), the gate being the second half
    TESSERA_ASSIGN_OR_RETURN(Tensor value, projected.slice(3, 0, 4 * c));
    TESSERA_ASSIGN_OR_RETURN(Tensor gate, projected.slice(3, 4 * c, 8 * c));
    TESSERA_RETURN_IF_ERROR(ops::gelu(r.stream, gate, gated));
    TESSERA_RETURN_IF_ERROR(ops::mul(r.stream, value, gated, gated));
  }
  TESSERA_RETURN_IF_ERROR(linear(r, w.ff_out, gated, t, t));
  return linear(r, w.proj_out, t, y, x);
}

// y = x + attention of GroupNorm(x), one head of all C channels.
Status vae_attention(Run& r, const VaeMidBlockWeights& w, const Tensor& x, const Tensor& y) {
  TESSERA_ASSIGN_OR_RETURN(Tensor normed, r.scratch(x.shape()));
  TESSERA_RETURN_IF_ERROR(group_norm(r.stream, w.attn_norm, w.groups, kVaeGroupNormEps, x, normed));
  return attention_layer(r, w.attn, 1, normed, normed, y, x);
}

}  // namespace

std::string_view to_string(BlockMode mode) { return mode == BlockMode::fused ? "fused" : "unfused"; }

// ------------------------------------------------------------------ Workspace

Result<Tensor> Workspace::slot(std::size_t index, const Shape& shape, DType dtype) {
  TESSERA_ASSIGN_OR_RETURN(const std::int64_t n, checked_numel(shape, "workspace tensor"));
  if (index >= slots_.size()) slots_.resize(index + 1);
  Tensor& flat = slots_[index];
  if (!flat.defined() || flat.dtype() != dtype || flat.numel() < n) {
    // A new buffer; ops still queued on the old one keep it alive.
    TESSERA_ASSIGN_OR_RETURN(flat, Tensor::empty(dtype, {std::max<std::int64_t>(n, 1)}));
  }
  TESSERA_ASSIGN_OR_RETURN(Tensor part, flat.slice(0, 0, n));
  return part.reshape(shape);
}

std::int64_t Workspace::bytes() const {
  std::int64_t total = 0;
  for (const Tensor& t : slots_)
    if (t.defined()) total += t.numel() * std::int64_t(bytes_of(t.dtype()));
  return total;
}

// ------------------------------------------------------------------ random weights

Result<NormWeights> random_norm(std::int64_t channels, std::uint64_t seed) {
  Random rng(seed, DType::f32);
  return make_norm(rng, channels);
}

Result<ConvLayer> random_conv(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel,
                              std::uint64_t seed, DType weights) {
  Random rng(seed, weights);
  return make_conv(rng, in_channels, out_channels, kernel);
}

Result<LinearLayer> random_linear(std::int64_t in_features, std::int64_t out_features, bool bias, std::uint64_t seed,
                                  DType weights) {
  Random rng(seed, weights);
  return make_linear(rng, in_features, out_features, bias);
}

Result<ResnetBlockWeights> random_resnet_block(std::int64_t in_channels, std::int64_t out_channels, std::int64_t groups,
                                               std::uint64_t seed, DType weights) {
  Random rng(seed, weights);
  return make_resnet(rng, in_channels, out_channels, groups);
}

Result<TransformerBlockWeights> random_transformer_block(std::int64_t channels, std::int64_t heads,
                                                         std::int64_t context_dim, std::int64_t groups,
                                                         std::uint64_t seed, DType weights) {
  Random rng(seed, weights);
  TransformerBlockWeights w;
  w.heads = heads;
  w.groups = groups;
  TESSERA_ASSIGN_OR_RETURN(w.norm, make_norm(rng, channels));
  TESSERA_ASSIGN_OR_RETURN(w.proj_in, make_linear(rng, channels, channels, true));
  TESSERA_ASSIGN_OR_RETURN(w.norm1, make_norm(rng, channels));
  TESSERA_ASSIGN_OR_RETURN(w.self_attn, make_attention(rng, channels, channels, false));
  TESSERA_ASSIGN_OR_RETURN(w.norm2, make_norm(rng, channels));
  TESSERA_ASSIGN_OR_RETURN(w.cross_attn, make_attention(rng, channels, context_dim, false));
  TESSERA_ASSIGN_OR_RETURN(w.norm3, make_norm(rng, channels));
  TESSERA_ASSIGN_OR_RETURN(w.ff_in, make_linear(rng, channels, 8 * channels, true));
  TESSERA_ASSIGN_OR_RETURN(w.ff_out, make_linear(rng, 4 * channels, channels, true));
  TESSERA_ASSIGN_OR_RETURN(w.proj_out, make_linear(rng, channels, channels, true));
  return w;
}

Result<VaeMidBlockWeights> random_vae_mid_block(std::int64_t channels, std::int64_t groups, std::uint64_t seed,
                                                DType weights) {
  Random rng(seed, weights);
  VaeMidBlockWeights w;
  w.groups = groups;
  TESSERA_ASSIGN_OR_RETURN(w.resnet1, make_resnet(rng, channels, channels, groups));
  TESSERA_ASSIGN_OR_RETURN(w.attn_norm, make_norm(rng, channels));
  TESSERA_ASSIGN_OR_RETURN(w.attn, make_attention(rng, channels, channels, true));
  TESSERA_ASSIGN_OR_RETURN(w.resnet2, make_resnet(rng, channels, channels, groups));
  w.resnet1.eps = w.resnet2.eps = kVaeGroupNormEps;
  return w;
}

// ------------------------------------------------------------------ the blocks

Status resnet_block(Stream& stream, const ResnetBlockWeights& w, const Tensor& x, const Tensor& temb, const Tensor& y,
                    Workspace& workspace, BlockMode mode) {
  if (!w.conv1.w) return Status::invalid_argument("w.conv1: no weights");
  const std::int64_t out = w.conv1.w->out_channels();
  TESSERA_RETURN_IF_ERROR(check_nhwc(x, "x", w.conv1.w->in_channels_per_group()));
  TESSERA_RETURN_IF_ERROR(check_resnet(w, "w", x.dim(3), out));
  if (temb.defined()) TESSERA_RETURN_IF_ERROR(check_shape(temb, "temb", {x.dim(0), out}));
  TESSERA_RETURN_IF_ERROR(check_shape(y, "y", {x.dim(0), x.dim(1), x.dim(2), out}));
  Run r{stream, workspace, mode};
  return resnet(r, w, x, temb, y);
}

Status transformer_block(Stream& stream, const TransformerBlockWeights& w, const Tensor& x, const Tensor& context,
                         const Tensor& y, Workspace& workspace, BlockMode mode) {
  TESSERA_RETURN_IF_ERROR(check_nhwc(x, "x"));
  const std::int64_t c = x.dim(3);
  if (!context.defined() || context.dtype() != DType::f32 || context.rank() != 3 || context.dim(0) != x.dim(0))
    return Status::invalid_argument(
        fmt::format("context: expected an f32 [{}, L, K] tensor (x's batch), got {}", x.dim(0), describe(context)));
  TESSERA_RETURN_IF_ERROR(check_shape(y, "y", x.shape()));
  if (w.heads <= 0 || c % w.heads != 0)
    return Status::invalid_argument(fmt::format("w.heads: {} heads do not divide {} channels", w.heads, c));
  TESSERA_RETURN_IF_ERROR(check_groups(w.groups, "w.groups", c));
  TESSERA_RETURN_IF_ERROR(check_norm(w.norm, "w.norm", c));
  TESSERA_RETURN_IF_ERROR(check_linear(w.proj_in, "w", "proj_in", c, c));
  TESSERA_RETURN_IF_ERROR(check_norm(w.norm1, "w.norm1", c));
  TESSERA_RETURN_IF_ERROR(check_attention(w.self_attn, "w.self_attn", c, c));
  TESSERA_RETURN_IF_ERROR(check_norm(w.norm2, "w.norm2", c));
  TESSERA_RETURN_IF_ERROR(check_attention(w.cross_attn, "w.cross_attn", c, context.dim(2)));
  TESSERA_RETURN_IF_ERROR(check_norm(w.norm3, "w.norm3", c));
  TESSERA_RETURN_IF_ERROR(check_linear(w.ff_in, "w", "ff_in", c, 8 * c));
  TESSERA_RETURN_IF_ERROR(check_linear(w.ff_out, "w", "ff_out", 4 * c, c));
  TESSERA_RETURN_IF_ERROR(check_linear(w.proj_out, "w", "proj_out", c, c));
  Run r{stream, workspace, mode};
  return transformer(r, w, x, context, y);
}

Status vae_mid_block(Stream& stream, const VaeMidBlockWeights& w, const Tensor& x, const Tensor& y,
                     Workspace& workspace, BlockMode mode) {
  TESSERA_RETURN_IF_ERROR(check_nhwc(x, "x"));
  const std::int64_t c = x.dim(3);
  TESSERA_RETURN_IF_ERROR(check_shape(y, "y", x.shape()));
  TESSERA_RETURN_IF_ERROR(check_resnet(w.resnet1, "w.resnet1", c, c));
  TESSERA_RETURN_IF_ERROR(check_groups(w.groups, "w.groups", c));
  TESSERA_RETURN_IF_ERROR(check_norm(w.attn_norm, "w.attn_norm", c));
  TESSERA_RETURN_IF_ERROR(check_attention(w.attn, "w.attn", c, c));
  TESSERA_RETURN_IF_ERROR(check_resnet(w.resnet2, "w.resnet2", c, c));
  Run r{stream, workspace, mode};
  TESSERA_ASSIGN_OR_RETURN(Tensor h1, r.scratch(x.shape()));
  TESSERA_ASSIGN_OR_RETURN(Tensor h2, r.scratch(x.shape()));
  TESSERA_RETURN_IF_ERROR(resnet(r, w.resnet1, x, Tensor(), h1));
  TESSERA_RETURN_IF_ERROR(vae_attention(r, w, h1, h2));
  return resnet(r, w.resnet2, h2, Tensor(), y);
}

Status downsample(Stream& stream, const ConvLayer& conv, const Tensor& x, const Tensor& y, BlockMode mode) {
  return conv_layer(stream, conv, x, y, {.stride = {2, 2}, .padding = {1, 1}}, mode);
}

Status upsample(Stream& stream, const ConvLayer& c, const Tensor& x, const Tensor& y, Workspace& workspace,
                BlockMode mode) {
  TESSERA_RETURN_IF_ERROR(check_nhwc(x, "x"));
  const std::int64_t channels = x.dim(3);
  TESSERA_RETURN_IF_ERROR(check_conv(c, "conv", channels, 3));
  Run r{stream, workspace, mode};
  if (r.fused()) return conv(r, c, x, y, {.padding = {1, 1}, .upsample_nearest2x = true});
  TESSERA_ASSIGN_OR_RETURN(Tensor up, r.scratch({x.dim(0), 2 * x.dim(1), 2 * x.dim(2), channels}));
  TESSERA_RETURN_IF_ERROR(ops::resize(stream, x, up, {.channels_last = true}));  // nearest, PyTorch's rule
  return conv(r, c, up, y, kSame3x3);
}

Status conv_layer(Stream& stream, const ConvLayer& c, const Tensor& x, const Tensor& y, const ops::ConvAttrs& attrs,
                  BlockMode mode) {
  TESSERA_RETURN_IF_ERROR(check_nhwc(x, "x"));
  // The conv op checks x, y and attrs against the weights.
  if (!c.w) return Status::invalid_argument("conv: no weights");
  TESSERA_RETURN_IF_ERROR(check_vector(c.bias, "conv", "bias", c.w->out_channels()));
  Workspace none;  // no residual: the unfused path needs no scratch
  Run r{stream, none, mode};
  return conv(r, c, x, y, attrs);
}

Status group_norm_silu(Stream& stream, const NormWeights& norm, std::int64_t groups, float eps, const Tensor& x,
                       const Tensor& y, BlockMode mode) {
  TESSERA_RETURN_IF_ERROR(check_nhwc(x, "x"));
  TESSERA_RETURN_IF_ERROR(check_norm(norm, "norm", x.dim(3)));
  return norm_silu(stream, norm, groups, eps, x, y, mode);
}

}  // namespace tessera::models
