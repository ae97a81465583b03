// `tessera bench membound`: the memory-bound ops — activations, binary and
// gated elementwise ops, normalizations, softmax, reductions, layout copies,
// resize, quantization, embedding gathers — against oneDNN's primitives where oneDNN has the op,
// and each fused op against the chain of its unfused Tessera parts, with
// STREAM-style copy / triad rows as the roofline, all in one process.
//
// Sizes: `large` cases move more bytes than the last-level cache holds, so
// every call streams from DRAM; `t1` and `t4096` are a transformer's
// [tokens, 4096] activations at decode and prefill; `tiny` is 1024 elements,
// where threading must cost nothing. GB/s counts each tensor
// read or written once, the same model for every implementation.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/harness.hpp"
#include "bench/report.hpp"
#include "commands.hpp"
#include "tessera/core/hw.hpp"
#include "tessera/core/tensor.hpp"
#include "tessera/ops/elementwise.hpp"
#include "tessera/ops/embedding.hpp"
#include "tessera/ops/group_norm.hpp"
#include "tessera/ops/layout.hpp"
#include "tessera/ops/moe.hpp"
#include "tessera/ops/norm.hpp"
#include "tessera/ops/quantize.hpp"
#include "tessera/ops/reduce.hpp"
#include "tessera/ops/resize.hpp"
#include "tessera/ops/rope.hpp"
#include "tessera/ops/softmax.hpp"
#include "tessera/ops/topk.hpp"
#include "tessera/runtime/context.hpp"
#include "tessera/runtime/stream.hpp"
#if TESSERA_HAVE_ONEDNN
#include "bench/peers_onednn.hpp"
#endif

namespace tessera::app {

namespace {

using bench::Row;
using bench::threads_label;

struct MemboundOptions {
  std::vector<int> threads{1, 2};
  std::vector<std::string> dtypes{"f32", "bf16"};
  std::vector<std::string> sizes{"large", "t1", "t4096", "tiny"};
  std::vector<std::string> cases;
  int repeats = 5;
  bool json = false;
};

constexpr std::int64_t kHidden = 4096;
// The spatial cases: a diffusion UNet's 64 x 64 latent at 320 channels (NHWC).
constexpr std::int64_t kSide = 64, kChannels = 320, kGroups = 32;

// One implementation of a case: a call that returns when its outputs are written.
struct Impl {
  std::string impl;  // "tessera", "tessera_unfused", "onednn"
  std::function<Status()> call;
  std::string kernel;
};

struct Case {
  std::string name;
  std::int64_t bytes = 0;        // the op's traffic: every tensor once
  std::int64_t chain_bytes = 0;  // a fused op's unfused chain, intermediates included (0: not fused)
  std::vector<Impl> impls;
};

// What a case maker gets: the context and stream of this thread count, the
// storage type, and the number of elements of the case's main tensor.
struct Env {
  Context& ctx;
  Stream& stream;
  int threads;
  DType dtype;
  std::int64_t elements;  // of x: rows x kHidden for the row ops
  std::string size;
};

Result<Tensor> filled(DType dtype, const Shape& shape, std::uint64_t seed) {
  TESSERA_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(dtype, shape));
  bench::fill_tensor(t, seed);
  return t;
}

std::int64_t bytes_of(std::initializer_list<Tensor> ts) {
  std::int64_t b = 0;
  for (const Tensor& t : ts) b += t.numel() * tessera::bytes_of(t.dtype());
  return b;
}

// The first failing status of a chain of calls.
Status chain(std::initializer_list<std::function<Status()>> calls) {
  for (const auto& c : calls) TESSERA_RETURN_IF_ERROR(c());
  return Status{};
}

// The kernel row Tessera's plan picks for these tensors, for the report.
std::string kernel_of(Result<ops::PlanPtr> plan) { return plan.ok() ? std::string((*plan)->kernel()) : "?"; }

void add_onednn(Case& c, const Env& env, [[maybe_unused]] std::string primitive,
                [[maybe_unused]] std::vector<Tensor> inputs, [[maybe_unused]] Tensor output) {
#if TESSERA_HAVE_ONEDNN
  Result<bench::OnednnCall> call =
      bench::make_onednn_membound({.primitive = primitive, .inputs = std::move(inputs), .output = output}, env.threads);
  if (call.ok())
    c.impls.push_back({"onednn", call->run, call->kernel});
  else
    fmt::print(stderr, "membound {}: onednn not measured: {}\n", c.name, call.status().to_string());
#endif
}

// [tokens, cols] holding env.elements (x cols / kHidden); below one token, a part of one row.
Shape rows_shape(const Env& env, std::int64_t cols = kHidden) {
  if (env.elements < kHidden) return {1, env.elements * cols / kHidden};
  return {env.elements / kHidden, cols};
}

// ------------------------------------------------------------------ the ops

Result<Case> make_activation(const Env& env, ops::Activation act, std::string onednn_alg) {
  TESSERA_ASSIGN_OR_RETURN(Tensor x, filled(env.dtype, rows_shape(env), 1));
  TESSERA_ASSIGN_OR_RETURN(Tensor y, Tensor::empty(env.dtype, x.shape()));
  Case c{.name = std::string(ops::to_string(act)), .bytes = bytes_of({x, y})};
  Stream& s = env.stream;
  c.impls.push_back({"tessera", [&s, act, x, y] { return ops::activation(s, act, x, y); },
                     kernel_of(ops::Unary::plan(env.ctx, act, x.desc(), y.desc()))});
  add_onednn(c, env, "eltwise_" + onednn_alg, {x}, y);
  return c;
}

Result<Case> make_cast(const Env& env) {
  TESSERA_ASSIGN_OR_RETURN(Tensor x, filled(DType::f32, rows_shape(env), 1));
  TESSERA_ASSIGN_OR_RETURN(Tensor y, Tensor::empty(DType::bf16, x.shape()));
  Case c{.name = "cast_f32_bf16", .bytes = bytes_of({x, y})};
  Stream& s = env.stream;
  c.impls.push_back({"tessera", [&s, x, y] { return ops::cast(s, x, y); },
                     kernel_of(ops::Unary::plan(env.ctx, ops::Activation::none, x.desc(), y.desc()))});
  add_onednn(c, env, "reorder", {x}, y);
  return c;
}

Result<Case> make_binary(const Env& env, ops::BinaryOp op, bool broadcast) {
  const Shape shape = rows_shape(env);
  TESSERA_ASSIGN_OR_RETURN(Tensor a, filled(env.dtype, shape, 1));
  TESSERA_ASSIGN_OR_RETURN(Tensor b, filled(env.dtype, broadcast ? Shape{1, shape[1]} : shape, 2));
  TESSERA_ASSIGN_OR_RETURN(Tensor y, Tensor::empty(env.dtype, shape));
  Case c{.name = fmt::format("{}{}", ops::to_string(op), broadcast ? "_bcast_row" : ""), .bytes = bytes_of({a, b, y})};
  Stream& s = env.stream;
  c.impls.push_back({"tessera", [&s, op, a, b, y] { return ops::binary(s, op, a, b, y); },
                     kernel_of(ops::Binary::plan(env.ctx, op, a.desc(), b.desc(), y.desc()))});
  add_onednn(c, env, op == ops::BinaryOp::add ? "binary_add" : "binary_mul", {a, b}, y);
  return c;
}

// SwiGLU from one [T, 2H] projection: fused, and as silu into a temporary then mul.
Result<Case> make_swiglu(const Env& env) {
  TESSERA_ASSIGN_OR_RETURN(Tensor x, filled(env.dtype, rows_shape(env, 2 * kHidden), 1));
  TESSERA_ASSIGN_OR_RETURN(Tensor y, Tensor::empty(env.dtype, rows_shape(env)));
  TESSERA_ASSIGN_OR_RETURN(Tensor gate, x.slice(1, 0, y.dim(1)));
  TESSERA_ASSIGN_OR_RETURN(Tensor up, x.slice(1, y.dim(1), 2 * y.dim(1)));
  TESSERA_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(env.dtype, y.shape()));
  // Fused: x once, y once. Chain: silu reads gate, writes t; mul reads t and up, writes y.
  Case c{.name = "swiglu", .bytes = bytes_of({x, y}), .chain_bytes = bytes_of({gate, t, t, up, y})};
  Stream& s = env.stream;
  c.impls.push_back({"tessera", [&s, x, y] { return ops::swiglu(s, x, y); },
                     kernel_of(ops::Gated::plan(env.ctx, ops::Activation::silu, gate.desc(), up.desc(), std::nullopt, y.desc()))});
  c.impls.push_back({"tessera_unfused", [&s, gate, up, t, y] {
                       return chain({[&] { return ops::silu(s, gate, t); }, [&] { return ops::mul(s, t, up, y); }});
                     }, "unary + binary"});
  return c;
}

// The seeds' silu(a)·w + bias, w and bias per channel.
Result<Case> make_silu_mul_add(const Env& env) {
  TESSERA_ASSIGN_OR_RETURN(Tensor a, filled(env.dtype, rows_shape(env), 1));
  TESSERA_ASSIGN_OR_RETURN(Tensor w, filled(env.dtype, {a.dim(1)}, 2));
  TESSERA_ASSIGN_OR_RETURN(Tensor bias, filled(env.dtype, {a.dim(1)}, 3));
  TESSERA_ASSIGN_OR_RETURN(Tensor y, Tensor::empty(env.dtype, a.shape()));
  Case c{.name = "silu_mul_add", .bytes = bytes_of({a, w, bias, y}), .chain_bytes = bytes_of({a, y, y, y, y, y})};
  Stream& s = env.stream;
  c.impls.push_back({"tessera", [&s, a, w, bias, y] { return ops::gated(s, ops::Activation::silu, a, w, bias, y); },
                     kernel_of(ops::Gated::plan(env.ctx, ops::Activation::silu, a.desc(), w.desc(), bias.desc(), y.desc()))});
  c.impls.push_back({"tessera_unfused", [&s, a, w, bias, y] {
                       return chain({[&] { return ops::silu(s, a, y); }, [&] { return ops::mul(s, y, w, y); },
                                     [&] { return ops::add(s, y, bias, y); }});
                     }, "unary + binary + binary"});
  return c;
}

Result<Case> make_rms_norm(const Env& env) {
  TESSERA_ASSIGN_OR_RETURN(Tensor x, filled(env.dtype, rows_shape(env), 1));
  TESSERA_ASSIGN_OR_RETURN(Tensor g, filled(env.dtype, {x.dim(1)}, 2));
  TESSERA_ASSIGN_OR_RETURN(Tensor y, Tensor::empty(env.dtype, x.shape()));
  Case c{.name = "rms_norm", .bytes = bytes_of({x, g, y})};
  Stream& s = env.stream;
  c.impls.push_back({"tessera", [&s, x, g, y] { return ops::rms_norm(s, x, g, y); },
                     kernel_of(ops::RmsNorm::plan(env.ctx, x.desc(), g.desc(), y.desc()))});
  return c;
}

Result<Case> make_layer_norm(const Env& env) {
  TESSERA_ASSIGN_OR_RETURN(Tensor x, filled(env.dtype, rows_shape(env), 1));
  // f32 scale and shift: what oneDNN's layer normalization takes.
  TESSERA_ASSIGN_OR_RETURN(Tensor g, filled(DType::f32, {x.dim(1)}, 2));
  TESSERA_ASSIGN_OR_RETURN(Tensor b, filled(DType::f32, {x.dim(1)}, 3));
  TESSERA_ASSIGN_OR_RETURN(Tensor y, Tensor::empty(env.dtype, x.shape()));
  Case c{.name = "layer_norm", .bytes = bytes_of({x, g, b, y})};
  Stream& s = env.stream;
  c.impls.push_back({"tessera", [&s, x, g, b, y] { return ops::layer_norm(s, x, g, b, y, {.eps = 1e-5f}); },
                     kernel_of(ops::LayerNorm::plan(env.ctx, x.desc(), g.desc(), b.desc(), y.desc(), {.eps = 1e-5f}))});
  add_onednn(c, env, "layer_norm", {x, g, b}, y);
  return c;
}

// x + residual, normalized; the sum is written too (the next residual).
Result<Case> make_add_norm(const Env& env, bool rms) {
  TESSERA_ASSIGN_OR_RETURN(Tensor x, filled(env.dtype, rows_shape(env), 1));
  TESSERA_ASSIGN_OR_RETURN(Tensor r, filled(env.dtype, x.shape(), 2));
  TESSERA_ASSIGN_OR_RETURN(Tensor g, filled(env.dtype, {x.dim(1)}, 3));
  TESSERA_ASSIGN_OR_RETURN(Tensor b, filled(env.dtype, {x.dim(1)}, 4));
  TESSERA_ASSIGN_OR_RETURN(Tensor y, Tensor::empty(env.dtype, x.shape()));
  TESSERA_ASSIGN_OR_RETURN(Tensor sum, Tensor::empty(env.dtype, x.shape()));
  // Fused: x, r, y, sum. Chain: add (x, r -> sum), then the norm (sum -> y).
  Case c{.name = rms ? "add_rms_norm" : "add_layer_norm", .bytes = bytes_of({x, r, y, sum}),
         .chain_bytes = bytes_of({x, r, sum, sum, y})};
  Stream& s = env.stream;
  if (rms) {
    c.impls.push_back({"tessera", [&s, x, r, g, y, sum] { return ops::add_rms_norm(s, x, r, g, y, sum); },
                       kernel_of(ops::AddRmsNorm::plan(env.ctx, x.desc(), r.desc(), g.desc(), y.desc(), sum.desc()))});
    c.impls.push_back({"tessera_unfused", [&s, x, r, g, y, sum] {
                         return chain({[&] { return ops::add(s, x, r, sum); }, [&] { return ops::rms_norm(s, sum, g, y); }});
                       }, "binary + rms_norm"});
  } else {
    c.impls.push_back({"tessera", [&s, x, r, g, b, y, sum] { return ops::add_layer_norm(s, x, r, g, b, y, sum); },
                       kernel_of(ops::AddLayerNorm::plan(env.ctx, x.desc(), r.desc(), g.desc(), b.desc(), y.desc(), sum.desc()))});
    c.impls.push_back({"tessera_unfused", [&s, x, r, g, b, y, sum] {
                         return chain({[&] { return ops::add(s, x, r, sum); }, [&] { return ops::layer_norm(s, sum, g, b, y); }});
                       }, "binary + layer_norm"});
  }
  return c;
}

// UNet latents [N, side, side, C], N of them for the size's elements (at
// least one); tiny: one pixel of C channels, the ops' fixed costs.
Shape latent_shape(const Env& env, std::int64_t side = kSide) {
  if (env.size == "tiny") return {1, 1, 1, kChannels};
  return {std::max<std::int64_t>(1, env.elements / (kSide * kSide * kChannels)), side, side, kChannels};
}

Result<Case> make_group_norm(const Env& env) {
  TESSERA_ASSIGN_OR_RETURN(Tensor x, filled(env.dtype, latent_shape(env), 1));
  TESSERA_ASSIGN_OR_RETURN(Tensor g, filled(env.dtype, {kChannels}, 2));
  TESSERA_ASSIGN_OR_RETURN(Tensor b, filled(env.dtype, {kChannels}, 3));
  TESSERA_ASSIGN_OR_RETURN(Tensor y, Tensor::empty(env.dtype, x.shape()));
  const ops::GroupNormAttrs attrs{.groups = kGroups, .channels_last = true};
  Case c{.name = "group_norm_nhwc", .bytes = bytes_of({x, g, b, y})};
  Stream& s = env.stream;
  c.impls.push_back({"tessera", [&s, x, g, b, y, attrs] { return ops::group_norm(s, x, g, b, y, attrs); },
                     kernel_of(ops::GroupNorm::plan(env.ctx, x.desc(), g.desc(), b.desc(), y.desc(), attrs))});
  return c;
}

// The seeds' fused_residual_groupnorm_silu: y = silu(group_norm(x + residual)).
Result<Case> make_residual_group_norm_silu(const Env& env) {
  TESSERA_ASSIGN_OR_RETURN(Tensor x, filled(env.dtype, latent_shape(env), 1));
  TESSERA_ASSIGN_OR_RETURN(Tensor r, filled(env.dtype, x.shape(), 2));
  TESSERA_ASSIGN_OR_RETURN(Tensor g, filled(env.dtype, {kChannels}, 3));
  TESSERA_ASSIGN_OR_RETURN(Tensor b, filled(env.dtype, {kChannels}, 4));
  TESSERA_ASSIGN_OR_RETURN(Tensor y, Tensor::empty(env.dtype, x.shape()));
  TESSERA_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(env.dtype, x.shape()));
  const ops::GroupNormAttrs fused{.groups = kGroups, .channels_last = true, .silu = true};
  const ops::GroupNormAttrs plain{.groups = kGroups, .channels_last = true};
  // Chain: add (x, r -> t), group_norm (t -> y), silu (y -> y).
  Case c{.name = "residual_group_norm_silu_nhwc", .bytes = bytes_of({x, r, y}), .chain_bytes = bytes_of({x, r, t, t, y, y, y})};
  Stream& s = env.stream;
  c.impls.push_back({"tessera", [&s, x, r, g, b, y, fused] { return ops::residual_group_norm(s, x, r, g, b, y, fused); },
                     kernel_of(ops::GroupNorm::plan(env.ctx, x.desc(), g.desc(), b.desc(), y.desc(), fused,
                                                    {.residual = r.desc()}))});
  c.impls.push_back({"tessera_unfused", [&s, x, r, g, b, y, t, plain] {
                       return chain({[&] { return ops::add(s, x, r, t); }, [&] { return ops::group_norm(s, t, g, b, y, plain); },
                                     [&] { return ops::silu(s, y, y); }});
                     }, "binary + group_norm + unary"});
  return c;
}

Result<Case> make_softmax(const Env& env, bool log) {
  TESSERA_ASSIGN_OR_RETURN(Tensor x, filled(env.dtype, rows_shape(env), 1));
  TESSERA_ASSIGN_OR_RETURN(Tensor y, Tensor::empty(env.dtype, x.shape()));
  Case c{.name = log ? "log_softmax" : "softmax", .bytes = bytes_of({x, y})};
  Stream& s = env.stream;
  const ops::SoftmaxAttrs attrs{.log = log};
  c.impls.push_back({"tessera", [&s, x, y, attrs] { return ops::softmax(s, x, y, attrs); },
                     kernel_of(ops::Softmax::plan(env.ctx, x.desc(), std::nullopt, y.desc(), attrs))});
  add_onednn(c, env, log ? "logsoftmax" : "softmax", {x}, y);
  return c;
}

// A sum (or L2 norm: oneDNN's reduction_norm_lp_sum at p = 2) over the
// last axis (a row per output), the first (a column per output: the outputs
// side by side, the rows streaming past them), or both (one output: the run
// cut into parts for the cores).
Result<Case> make_reduce(const Env& env, ops::ReduceOp op, std::vector<int> axes) {
  TESSERA_ASSIGN_OR_RETURN(Tensor x, filled(env.dtype, rows_shape(env), 1));
  const bool first = axes.size() == 1 && axes[0] == 0, last = axes.size() == 1 && !first;
  TESSERA_ASSIGN_OR_RETURN(Tensor y, Tensor::empty(env.dtype, {last ? x.dim(0) : 1, first ? x.dim(1) : 1}));
  Case c{.name = fmt::format("reduce_{}_{}", ops::to_string(op), first ? "first" : last ? "last" : "all"), .bytes = bytes_of({x, y})};
  Stream& s = env.stream;
  const ops::ReduceAttrs attrs{.op = op, .axes = std::move(axes), .keep_dims = true};
  c.impls.push_back({"tessera", [&s, x, y, attrs] { return ops::reduce(s, x, y, attrs); },
                     kernel_of(ops::Reduce::plan(env.ctx, x.desc(), y.desc(), attrs))});
  if (op == ops::ReduceOp::sum || op == ops::ReduceOp::l2) add_onednn(c, env, op == ops::ReduceOp::l2 ? "reduction_l2" : "reduction_sum", {x}, y);
  return c;
}

// Top-k along the rows of x [rows, cols]: sampling's top 50 of Llama 3's
// 128256-token vocabulary, MoE routing's top 8 of 64 experts per token. No
// peer: oneDNN has no top-k.
Result<Case> make_top_k(const Env& env, std::string name, const Shape& shape, std::int64_t k) {
  TESSERA_ASSIGN_OR_RETURN(Tensor x, filled(env.dtype, shape, 1));
  TESSERA_ASSIGN_OR_RETURN(Tensor values, Tensor::empty(env.dtype, {x.dim(0), k}));
  TESSERA_ASSIGN_OR_RETURN(Tensor indices, Tensor::empty(DType::i64, {x.dim(0), k}));
  Case c{.name = std::move(name), .bytes = bytes_of({x, values, indices})};
  Stream& s = env.stream;
  const ops::TopKAttrs attrs{.k = k};
  c.impls.push_back({"tessera", [&s, x, values, indices, attrs] { return ops::top_k(s, x, values, indices, attrs); },
                     kernel_of(ops::TopK::plan(env.ctx, x.desc(), values.desc(), indices.desc(), attrs))});
  return c;
}

// MoE combine: each of env.elements / kHidden tokens sums its top 2
// experts' rows of the hidden size, weighted. No peer: oneDNN has none.
Result<Case> make_moe_combine(const Env& env) {
  const Shape out_shape = rows_shape(env);
  const std::int64_t tokens = out_shape[0], k = 2;
  TESSERA_ASSIGN_OR_RETURN(Tensor y, filled(env.dtype, {tokens * k, out_shape[1]}, 1));
  TESSERA_ASSIGN_OR_RETURN(Tensor weights, filled(DType::f32, {tokens, k}, 2));
  TESSERA_ASSIGN_OR_RETURN(Tensor positions, Tensor::empty(DType::i64, {tokens, k}));
  for (std::int64_t i = 0; i < tokens * k; ++i) positions.data_as<std::int64_t>()[i] = (i % k) * tokens + i / k;  // expert-major rows
  TESSERA_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(env.dtype, out_shape));
  Case c{.name = "moe_combine", .bytes = bytes_of({y, weights, positions, out})};
  Stream& s = env.stream;
  c.impls.push_back({"tessera", [&s, y, weights, positions, out] { return ops::moe_combine(s, y, weights, positions, out); },
                     kernel_of(ops::MoeCombine::plan(env.ctx, y.desc(), weights.desc(), positions.desc(), out.desc()))});
  return c;
}

// A [T, H] matrix into its transpose [H, T].
Result<Case> make_transpose(const Env& env) {
  TESSERA_ASSIGN_OR_RETURN(Tensor x, filled(env.dtype, rows_shape(env), 1));
  TESSERA_ASSIGN_OR_RETURN(Tensor y, Tensor::empty(env.dtype, {x.dim(1), x.dim(0)}));
  TESSERA_ASSIGN_OR_RETURN(Tensor xt, x.transpose(0, 1));
  Case c{.name = "transpose_2d", .bytes = bytes_of({x, y})};
  Stream& s = env.stream;
  c.impls.push_back({"tessera", [&s, xt, y] { return ops::reorder(s, xt, y); },
                     kernel_of(ops::Reorder::plan(env.ctx, xt.desc(), y.desc()))});
  add_onednn(c, env, "reorder", {xt}, y);
  return c;
}

// The latent NCHW -> NHWC, the layout change a UNet needs once.
Result<Case> make_nchw_to_nhwc(const Env& env) {
  const Shape nhwc = latent_shape(env);
  TESSERA_ASSIGN_OR_RETURN(Tensor x, filled(env.dtype, {nhwc[0], nhwc[3], nhwc[1], nhwc[2]}, 1));
  TESSERA_ASSIGN_OR_RETURN(Tensor y, Tensor::empty(env.dtype, nhwc));
  TESSERA_ASSIGN_OR_RETURN(Tensor xv, x.permute({0, 2, 3, 1}));
  Case c{.name = "nchw_to_nhwc", .bytes = bytes_of({x, y})};
  Stream& s = env.stream;
  c.impls.push_back({"tessera", [&s, xv, y] { return ops::reorder(s, xv, y); },
                     kernel_of(ops::Reorder::plan(env.ctx, xv.desc(), y.desc()))});
  add_onednn(c, env, "reorder", {xv}, y);
  return c;
}

Result<Case> make_concat(const Env& env) {
  TESSERA_ASSIGN_OR_RETURN(Tensor a, filled(env.dtype, rows_shape(env), 1));
  TESSERA_ASSIGN_OR_RETURN(Tensor b, filled(env.dtype, rows_shape(env), 2));
  TESSERA_ASSIGN_OR_RETURN(Tensor y, Tensor::empty(env.dtype, rows_shape(env, 2 * kHidden)));
  Case c{.name = "concat_last", .bytes = bytes_of({a, b, y})};
  Stream& s = env.stream;
  const std::vector<Tensor> inputs{a, b};
  const TensorDesc descs[] = {a.desc(), b.desc()};
  c.impls.push_back({"tessera", [&s, inputs, y] { return ops::concat(s, inputs, -1, y); },
                     kernel_of(ops::Concat::plan(env.ctx, descs, -1, y.desc()))});
  add_onednn(c, env, "concat", inputs, y);
  return c;
}

// Nearest x2 (NHWC) and bilinear x2 (NCHW, half-pixel: oneDNN's linear rule).
Result<Case> make_resize(const Env& env, bool bilinear) {
  Shape in = latent_shape(env, kSide / 2);
  if (in[1] > 1) in[0] *= 4;  // the output, 4x the input, is the case's size (tiny: one pixel in)
  const ops::ResizeAttrs attrs = bilinear ? ops::ResizeAttrs{.mode = ops::ResizeMode::bilinear, .coord = ops::CoordinateMode::half_pixel}
                                          : ops::ResizeAttrs{.channels_last = true};
  const Shape x_shape = bilinear ? Shape{in[0], in[3], in[1], in[2]} : in;
  const Shape y_shape = bilinear ? Shape{in[0], in[3], 2 * in[1], 2 * in[2]} : Shape{in[0], 2 * in[1], 2 * in[2], in[3]};
  TESSERA_ASSIGN_OR_RETURN(Tensor x, filled(env.dtype, x_shape, 1));
  TESSERA_ASSIGN_OR_RETURN(Tensor y, Tensor::empty(env.dtype, y_shape));
  Case c{.name = bilinear ? "resize_bilinear2x_nchw" : "resize_nearest2x_nhwc", .bytes = bytes_of({x, y})};
  Stream& s = env.stream;
  c.impls.push_back({"tessera", [&s, x, y, attrs] { return ops::resize(s, x, y, attrs); },
                     kernel_of(ops::Resize::plan(env.ctx, x.desc(), y.desc(), attrs))});
  if (bilinear) {
    add_onednn(c, env, "resampling_linear", {x}, y);
  } else {
    // oneDNN's dims are always N, C, spatial: the NHWC tensors as permuted views.
    TESSERA_ASSIGN_OR_RETURN(Tensor xv, x.permute({0, 3, 1, 2}));
    TESSERA_ASSIGN_OR_RETURN(Tensor yv, y.permute({0, 3, 1, 2}));
    add_onednn(c, env, "resampling_nearest", {xv}, yv);
  }
  return c;
}

// Rotary embedding of q [T, 32, 128] in place: the LLM's per-layer position
// step, in the half (HF Llama) or the interleaved (GPT-J, Meta Llama) style.
Result<Case> make_rope(const Env& env, bool interleaved) {
  const std::int64_t tokens = std::max<std::int64_t>(1, env.elements / kHidden);
  TESSERA_ASSIGN_OR_RETURN(Tensor x, filled(env.dtype, {1, tokens, 32, 128}, 1));
  TESSERA_ASSIGN_OR_RETURN(Tensor pos, Tensor::empty(DType::i64, {1, tokens}));
  for (std::int64_t i = 0; i < tokens; ++i) pos.data_as<std::int64_t>()[i] = i;
  TESSERA_ASSIGN_OR_RETURN(auto caches, ops::rope_cache(tokens, 128));
  const Tensor cos = caches.first, sin = caches.second;
  Case c{.name = interleaved ? "rope_interleaved" : "rope_half", .bytes = bytes_of({x, x, pos, cos, sin})};
  Stream& s = env.stream;
  const ops::RopeAttrs attrs{.interleaved = interleaved};
  c.impls.push_back({"tessera", [&s, x, pos, cos, sin, attrs] { return ops::rope(s, x, pos, cos, sin, x, attrs); },
                     kernel_of(ops::Rope::plan(env.ctx, x.desc(), pos.desc(), cos.desc(), sin.desc(), x.desc(), attrs))});
  return c;
}

// Token embeddings: every row of a [T, 4096] table gathered once, in an order
// no prefetcher can guess (a fixed shuffle of the ids), as a prefill's
// lookup reads a vocabulary.
Result<Case> make_embedding(const Env& env) {
  TESSERA_ASSIGN_OR_RETURN(Tensor table, filled(env.dtype, rows_shape(env), 1));
  const std::int64_t tokens = table.dim(0);
  TESSERA_ASSIGN_OR_RETURN(Tensor ids, Tensor::empty(DType::i64, {tokens}));
  auto* id = ids.data_as<std::int64_t>();
  for (std::int64_t i = 0; i < tokens; ++i) id[i] = i;
  for (std::int64_t i = tokens - 1; i > 0; --i) std::swap(id[i], id[(i * 7919 + 13) % (i + 1)]);
  TESSERA_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(env.dtype, table.shape()));
  Case c{.name = "embedding", .bytes = bytes_of({table, ids, out})};
  Stream& s = env.stream;
  c.impls.push_back({"tessera", [&s, table, ids, out] { return ops::embedding(s, table, ids, out); },
                     kernel_of(ops::Embedding::plan(env.ctx, table.desc(), ids.desc(), out.desc()))});
  return c;
}

// Per-channel (last axis) int8 quantization of an activation, and back.
Result<Case> make_quantize(const Env& env, bool dequantize) {
  TESSERA_ASSIGN_OR_RETURN(Tensor f, filled(env.dtype, rows_shape(env), 1));
  TESSERA_ASSIGN_OR_RETURN(Tensor q, Tensor::empty(DType::i8, f.shape()));
  TESSERA_ASSIGN_OR_RETURN(Tensor scale, Tensor::empty(DType::f32, {f.dim(1)}));
  std::fill_n(scale.data_as<float>(), f.dim(1), 1.0f / 127.0f);
  const ops::QuantAttrs attrs{.axis = 1};
  Case c{.name = dequantize ? "dequantize_i8_per_channel" : "quantize_i8_per_channel", .bytes = bytes_of({f, q, scale})};
  Stream& s = env.stream;
  if (dequantize) {
    TESSERA_RETURN_IF_ERROR(ops::quantize(s, f, scale, std::nullopt, q, attrs));
    c.impls.push_back({"tessera", [&s, q, scale, f, attrs] { return ops::dequantize(s, q, scale, std::nullopt, f, attrs); },
                       kernel_of(ops::Dequantize::plan(env.ctx, q.desc(), scale.desc(), std::nullopt, f.desc(), attrs))});
  } else {
    c.impls.push_back({"tessera", [&s, f, scale, q, attrs] { return ops::quantize(s, f, scale, std::nullopt, q, attrs); },
                       kernel_of(ops::Quantize::plan(env.ctx, f.desc(), scale.desc(), std::nullopt, q.desc(), attrs))});
  }
  return c;
}

struct CaseMaker {
  std::string name;
  std::function<Result<Case>(const Env&)> make;
  bool f32_only = false;  // its types are fixed by the case
};

std::vector<CaseMaker> case_makers() {
  using A = ops::Activation;
  return {
      {"relu", [](const Env& e) { return make_activation(e, A::relu, "relu"); }},
      {"gelu_erf", [](const Env& e) { return make_activation(e, A::gelu_erf, "gelu_erf"); }},
      {"gelu_tanh", [](const Env& e) { return make_activation(e, A::gelu_tanh, "gelu_tanh"); }},
      {"silu", [](const Env& e) { return make_activation(e, A::silu, "swish"); }},
      {"sigmoid", [](const Env& e) { return make_activation(e, A::sigmoid, "logistic"); }},
      {"tanh", [](const Env& e) { return make_activation(e, A::tanh, "tanh"); }},
      {"exp", [](const Env& e) { return make_activation(e, A::exp, "exp"); }},
      {"quick_gelu", [](const Env& e) { return make_activation(e, A::quick_gelu, "quick_gelu"); }},
      {"cast_f32_bf16", make_cast, true},
      {"add", [](const Env& e) { return make_binary(e, ops::BinaryOp::add, false); }},
      {"mul_bcast_row", [](const Env& e) { return make_binary(e, ops::BinaryOp::mul, true); }},
      {"swiglu", make_swiglu},
      {"silu_mul_add", make_silu_mul_add},
      {"rms_norm", make_rms_norm},
      {"layer_norm", make_layer_norm},
      {"add_rms_norm", [](const Env& e) { return make_add_norm(e, true); }},
      {"add_layer_norm", [](const Env& e) { return make_add_norm(e, false); }},
      {"group_norm_nhwc", make_group_norm},
      {"residual_group_norm_silu_nhwc", make_residual_group_norm_silu},
      {"softmax", [](const Env& e) { return make_softmax(e, false); }},
      {"log_softmax", [](const Env& e) { return make_softmax(e, true); }},
      {"reduce_sum_last", [](const Env& e) { return make_reduce(e, ops::ReduceOp::sum, {-1}); }},
      {"reduce_sum_first", [](const Env& e) { return make_reduce(e, ops::ReduceOp::sum, {0}); }},
      {"reduce_sum_all", [](const Env& e) { return make_reduce(e, ops::ReduceOp::sum, {0, 1}); }},
      {"reduce_l2_last", [](const Env& e) { return make_reduce(e, ops::ReduceOp::l2, {-1}); }},
      {"reduce_l2_first", [](const Env& e) { return make_reduce(e, ops::ReduceOp::l2, {0}); }},
      {"top_k_vocab",  // rows of the vocabulary holding env.elements, at least one
       [](const Env& e) { return make_top_k(e, "top_k_vocab", {std::max<std::int64_t>(1, e.elements / 128256), 128256}, 50); }},
      {"top_k_experts", [](const Env& e) { return make_top_k(e, "top_k_experts", rows_shape(e, 64), 8); }},
      {"moe_combine", make_moe_combine},
      {"transpose_2d", make_transpose},
      {"nchw_to_nhwc", make_nchw_to_nhwc},
      {"concat_last", make_concat},
      {"resize_nearest2x_nhwc", [](const Env& e) { return make_resize(e, false); }},
      {"resize_bilinear2x_nchw", [](const Env& e) { return make_resize(e, true); }},
      {"rope_half", [](const Env& e) { return make_rope(e, false); }},
      {"rope_interleaved", [](const Env& e) { return make_rope(e, true); }},
      {"embedding", make_embedding},
      {"quantize_i8_per_channel", [](const Env& e) { return make_quantize(e, false); }},
      {"dequantize_i8_per_channel", [](const Env& e) { return make_quantize(e, true); }},
  };
}

// ------------------------------------------------------------------ measuring

struct Run {
  const MemboundOptions& opt;
  bench::MeasureOptions measure;
  std::map<int, bench::Roofline> roofline;  // by threads
};

// Elements of the main tensor of each size: large ones move more bytes than the L3 holds.
std::int64_t elements_of(const std::string& size) {
  if (size == "tiny") return 1024;  // 4 KiB of f32: threading must not slow it
  if (size == "t1") return kHidden;
  if (size == "t4096") return 4096 * kHidden;
  const std::int64_t l3 = bench::cold_bytes() / 2;  // the L3, at least 64 MiB
  return (l3 * 5 / 4 / 4 + kHidden - 1) / kHidden * kHidden;  // 1.25x that in f32
}

void run_case(const CaseMaker& maker, const Env& env, const Run& run) {
  const std::string where = fmt::format("membound {} {} {}", maker.name, env.size, to_string(env.dtype));
  Result<Case> made = maker.make(env);
  if (!made.ok()) {
    fmt::print(stderr, "{}: skipped: {}\n", where, made.status().to_string());
    return;
  }
  Case& c = *made;
  std::vector<bench::Contender> contenders;
  for (const Impl& i : c.impls) contenders.push_back({.impl = i.impl, .call = i.call});
  bench::measure_interleaved(contenders, run.measure);
  std::vector<Row> rows;
  const bench::Roofline& roof = run.roofline.at(env.threads);
  for (std::size_t i = 0; i < contenders.size(); ++i) {
    const bench::Contender& result = contenders[i];
    if (!result.error.ok()) {
      fmt::print(stderr, "{}: {} failed: {}\n", where, result.impl, result.error.to_string());
      continue;
    }
    Row r{.suite = "membound", .case_name = fmt::format("{}_{}", c.name, env.size), .dtype = std::string(to_string(env.dtype)),
          .threads = env.threads, .impl = result.impl};
    r.median_ms = bench::median(result.ms);
    r.best_ms = bench::best(result.ms);
    // Every implementation is credited with the fused op's bytes, so GB/s compares times.
    r.gbps = double(c.bytes) / (r.median_ms * 1e6);
    r.pct_triad_bw = 100.0 * *r.gbps / roof.triad_gbps;
    r.kernel = c.impls[i].kernel;
    rows.push_back(std::move(r));
  }
  bench::add_ratio(rows, "tessera", [](std::string_view) { return true; });
  for (Row& r : rows)
    if (r.impl != "tessera") bench::add_ratio(rows, r.impl, [](std::string_view impl) { return impl == "tessera"; });
  std::string title = fmt::format("{} | {} | {} | {:.1f} MiB moved", c.name, env.size, to_string(env.dtype), double(c.bytes) / (1 << 20));
  if (c.chain_bytes)
    title += fmt::format(" (the unfused chain: {:.1f} MiB, {:.2f}x)", double(c.chain_bytes) / (1 << 20), double(c.chain_bytes) / double(c.bytes));
  bench::print_rows(fmt::format("{} | {}", title, threads_label(env.threads)), rows, run.opt.json);
}

void run_bench_membound(MemboundOptions opt) {
  std::ranges::sort(opt.threads);
  opt.threads.erase(std::unique(opt.threads.begin(), opt.threads.end()), opt.threads.end());
  std::vector<CaseMaker> makers = case_makers();
  if (!opt.cases.empty())
    std::erase_if(makers, [&](const CaseMaker& m) {
      return std::ranges::none_of(opt.cases, [&](const std::string& s) { return m.name.find(s) != std::string::npos; });
    });
  if (makers.empty()) {
    fmt::print(stderr, "no case matches --case\n");
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  bench::Contexts contexts(opt.threads);
  Run run{.opt = opt, .measure = {.repeats = opt.repeats}, .roofline = {}};
  const std::int64_t stream_bytes = bench::cold_bytes();
  for (int t : opt.threads) {
    Result<bench::Roofline> roof = bench::stream_roofline(contexts.at(t), "membound", stream_bytes, run.measure, opt.json);
    if (!roof.ok()) {
      fmt::print(stderr, "stream {}: {}\n", threads_label(t), roof.status().to_string());
      return;
    }
    run.roofline[t] = *roof;
  }
  for (const std::string& size : opt.sizes) {
    for (const CaseMaker& maker : makers) {
      for (const std::string& dtype_name : opt.dtypes) {
        const DType dtype = *parse_dtype(dtype_name);
        if (maker.f32_only && dtype != DType::f32) continue;
        for (int t : opt.threads) {
          Stream stream(contexts.at(t));
          run_case(maker, Env{contexts.at(t), stream, t, dtype, elements_of(size), size}, run);
        }
      }
    }
  }
  if (!opt.json)
    fmt::print("\ndone in {:.0f} s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace

void add_bench_membound_command(CLI::App& bench) {
  static MemboundOptions opt;
  CLI::App* membound = bench.add_subcommand(
      "membound",
      "Memory-bound ops (elementwise, norms, softmax, layout, resize, quantize) against oneDNN and, when fused, "
      "against their unfused chains, with the copy / triad bandwidth roofline");
  membound->add_option("--threads", opt.threads, "thread counts")->delimiter(',')->check(CLI::Range(1, 1024))->capture_default_str();
  membound->add_option("--dtype", opt.dtypes, "storage types")->delimiter(',')->check(CLI::IsMember({"f32", "bf16"}))->capture_default_str();
  membound->add_option("--size", opt.sizes, "large: more bytes than the L3; t1 / t4096: [tokens, 4096] activations; tiny: 1024 elements")
      ->delimiter(',')
      ->check(CLI::IsMember({"large", "t1", "t4096", "tiny"}))
      ->capture_default_str();
  membound->add_option("--case", opt.cases, "run only the cases whose name contains one of these, e.g. norm,softmax")->delimiter(',');
  membound->add_option("--repeats", opt.repeats, "timed repeats per implementation and case")->check(CLI::Range(1, 1000))->capture_default_str();
  membound->add_flag("--json", opt.json, "one JSON object per line (DESIGN.md, Benchmarks) instead of tables");
  membound->callback([] { run_bench_membound(opt); });
}

}  // namespace tessera::app
