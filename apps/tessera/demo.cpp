// `tessera demo`: one Llama-style decoder layer (hidden 2048, 16 heads of
// 128, SwiGLU 5632, f32) over a prefill of 128 tokens, then decode steps of
// one token each against the paged KV cache the prefill filled. Planned once
// through the op API and run several times; prints where the time goes, op
// by op, for both phases.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "bench/harness.hpp"
#include "commands.hpp"
#include "demo.hpp"
#include "demo_diffusion.hpp"
#include "tessera/tessera.hpp"

namespace tessera::app {

// Deterministic weights: uniform in [-scale, scale] from a counter hash.
Tensor demo_weight(Shape shape, std::uint64_t seed, float scale) {
  Tensor t = must(Tensor::empty(DType::f32, shape));
  float* p = t.data_as<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    std::uint64_t z = (seed << 40) + std::uint64_t(i) + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    p[i] = scale * (float(z >> 40) * 0x1p-23f - 1.0f);
  }
  return t;
}

ops::WeightsPtr demo_pack(const Tensor& w, const std::string& weights) {
  return must(bench::tessera_weights(bench::parse_gemm_type(weights).value_or(bench::GemmType::f32), w));
}

DemoProjections demo_projections(Stream& stream, const std::string& weights) {
  const float w_in = 1.0f / std::sqrt(float(kHidden)), w_ffn = 1.0f / std::sqrt(float(kFfn));
  // [K, N1] | [K, N2] | ... -> [K, N1 + N2 + ...], packed.
  auto side_by_side = [&](std::initializer_list<Tensor> parts) {
    std::int64_t cols = 0;
    for (const Tensor& t : parts) cols += t.dim(1);
    Tensor w = must(Tensor::empty(DType::f32, {kHidden, cols}));
    if (Status st = ops::concat(stream, std::span(parts.begin(), parts.size()), 1, w); !st.ok()) throw std::runtime_error(st.to_string());
    return demo_pack(w, weights);
  };
  return {side_by_side({demo_weight({kHidden, kHidden}, 4, w_in), demo_weight({kHidden, kHidden}, 5, w_in), demo_weight({kHidden, kHidden}, 6, w_in)}),
          demo_pack(demo_weight({kHidden, kHidden}, 7, w_in), weights),
          side_by_side({demo_weight({kHidden, kFfn}, 8, w_in), demo_weight({kHidden, kFfn}, 9, w_in)}),
          demo_pack(demo_weight({kFfn, kHidden}, 10, w_ffn), weights)};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

namespace {

struct Step {
  std::string name;
  std::string kernel;
  std::string shape;
  std::int64_t flops = 0, bytes = 0;
  std::function<Status(Stream&)> run;
  std::vector<double> ms;
};

// A planned op with its tensors and its workspace (from the context's pool).
Step op_step(Context& ctx, std::string name, ops::PlanPtr plan, std::vector<Tensor> in, std::vector<Tensor> out) {
  Step s{std::move(name), std::string(plan->kernel()), out[0].shape().to_string(), plan->flops(), plan->bytes_moved(), {}, {}};
  auto workspace = std::make_shared<MemoryPool::Block>();
  if (plan->workspace_bytes() > 0) *workspace = must(ctx.memory().allocate(plan->workspace_bytes()));
  s.run = [plan, workspace, in = std::move(in), out = std::move(out)](Stream& stream) {
    return plan->run(stream, in, out, workspace->data());
  };
  return s;
}

using Clock = std::chrono::steady_clock;

double mean_abs(const Tensor& t) {
  double sum = 0;
  for (std::int64_t i = 0; i < t.numel(); ++i) sum += std::abs(t.data_as<float>()[i]);
  return sum / double(t.numel());
}

// Runs every step in order, recording each step's time; returns the whole pass's time in ms.
double run_steps(std::vector<Step>& steps, Stream& stream, bool record) {
  const auto t0 = Clock::now();
  for (Step& s : steps) {
    const auto s0 = Clock::now();
    Status st = s.run(stream);
    if (!st.ok()) throw std::runtime_error(s.name + ": " + st.to_string());
    if (record) s.ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - s0).count());
  }
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

void print_table(const std::vector<Step>& steps, const std::vector<double>& totals, std::string_view total_name) {
  fmt::print("{:<20} {:<24} {:<18} {:>9} {:>7} {:>9} {:>8}\n", "op", "kernel", "output", "ms", "time%", "GFLOP/s", "GB/s");
  double sum = 0;
  for (const Step& s : steps) sum += median(s.ms);
  for (const Step& s : steps) {
    const double ms = median(s.ms);
    fmt::print("{:<20} {:<24} {:<18} {:>9.3f} {:>6.1f}% {:>9} {:>8.1f}\n", s.name, s.kernel, s.shape, ms, 100.0 * ms / sum,
               s.flops ? fmt::format("{:.1f}", s.flops / ms / 1e6) : std::string("-"), s.bytes / ms / 1e6);
  }
  fmt::print("{:<20} {:<24} {:<18} {:>9.3f}\n", "total (ops)", "", "", sum);
  fmt::print("{:<20} {:<24} {:<18} {:>9.3f}\n", total_name, "", "", median(totals));
}

}  // namespace

void run_demo(const DemoOptions& opt, DemoObserver* observer) {
  Context ctx({.threads = opt.threads});
  Stream stream(ctx);
  const std::int64_t T = opt.tokens, max_len = T + opt.decode_steps;

  // Weights; the projections packed (or quantized) once and shared by the prefill and decode plans.
  Tensor embed = demo_weight({kVocab, kHidden}, 1, 1.0f), g_attn = demo_weight({kHidden}, 2, 1.0f), g_ffn = demo_weight({kHidden}, 3, 1.0f);
  const DemoProjections w = demo_projections(stream, opt.weights);
  auto [cos, sin] = [&] {
    auto r = ops::rope_cache(max_len, kHeadDim);
    if (!r.ok()) throw std::runtime_error(r.status().to_string());
    return std::move(r).value();
  }();
  const ops::LinearOptions linear{.quantize_activations = opt.weights == "int8"};

  // One decoder layer over n tokens whose ids and positions are the given
  // tensors; `attention(q, k, v, o, add)` adds the attention step(s) on
  // [1, n, H, D] views. Returns the steps and the layer's output.
  auto build = [&](std::int64_t n, const Tensor& ids, const Tensor& pos, auto&& attention) {
    std::vector<Step> steps;
    auto add = [&](std::string name, Result<ops::PlanPtr> plan, std::vector<Tensor> in, std::vector<Tensor> out) {
      steps.push_back(op_step(ctx, std::move(name), must(std::move(plan)), std::move(in), std::move(out)));
    };
    auto act = [&](Shape s) { return must(Tensor::empty(DType::f32, s)); };
    Tensor x = act({n, kHidden}), h = act({n, kHidden}), qkv = act({n, 3 * kHidden});
    Tensor attn = act({n, kHidden}), x2 = act({n, kHidden}), h2 = act({n, kHidden});
    Tensor gate_up = act({n, 2 * kFfn}), ffn = act({n, kFfn}), y = act({n, kHidden});
    auto columns = [](const Tensor& t, std::int64_t part, std::int64_t width) { return must(t.slice(1, part * width, (part + 1) * width)); };
    const Tensor q = columns(qkv, 0, kHidden), k = columns(qkv, 1, kHidden), v = columns(qkv, 2, kHidden);
    auto as_bshd = [&](const Tensor& t) { return must(t.reshape({1, n, kHeads, kHeadDim})); };
    // Projections: residual adds fused into the GEMM epilogues.
    auto proj = [&](std::string name, const Tensor& a, const ops::WeightsPtr& w, const Tensor& c, ops::Epilogue e = {},
                    std::vector<Tensor> extra = {}) {
      std::vector<Tensor> in{a};
      in.insert(in.end(), extra.begin(), extra.end());
      add(std::move(name), ops::Linear::plan(ctx, a.desc(), w, c.desc(), e, linear), std::move(in), {c});
    };
    add("embedding", ops::Embedding::plan(ctx, embed.desc(), ids.desc(), x.desc()), {embed, ids}, {x});
    add("attn_norm", ops::RmsNorm::plan(ctx, x.desc(), g_attn.desc(), h.desc(), {.eps = 1e-5f}), {x, g_attn}, {h});
    proj("qkv_proj", h, w.qkv, qkv);
    for (auto [name, t] : {std::pair{"rope_q", q}, std::pair{"rope_k", k}}) {
      const Tensor view = as_bshd(t);
      add(name, ops::Rope::plan(ctx, view.desc(), pos.desc(), cos.desc(), sin.desc(), view.desc()), {view, pos, cos, sin}, {view});
    }
    attention(as_bshd(q), as_bshd(k), as_bshd(v), as_bshd(attn), steps, add);
    proj("o_proj+residual", attn, w.o, x2, {.residual = x.desc()}, {x});
    add("ffn_norm", ops::RmsNorm::plan(ctx, x2.desc(), g_ffn.desc(), h2.desc(), {.eps = 1e-5f}), {x2, g_ffn}, {h2});
    proj("gate_up_proj", h2, w.gate_up, gate_up);
    const Tensor gate = columns(gate_up, 0, kFfn), up = columns(gate_up, 1, kFfn);
    add("swiglu", ops::Gated::plan(ctx, ops::Activation::silu, gate.desc(), up.desc(), std::nullopt, ffn.desc()), {gate, up}, {ffn});
    proj("down_proj+residual", ffn, w.down, y, {.residual = x2.desc()}, {x2});
    return std::pair{std::move(steps), y};
  };

  // Prefill: flash attention (QKᵀ, causal softmax and PV in one kernel; the T x T scores never reach memory).
  Tensor ids = must(Tensor::empty(DType::i32, {T}));
  for (std::int64_t i = 0; i < T; ++i) ids.data_as<std::int32_t>()[i] = std::int32_t((i * 7919) % kVocab);
  Tensor pos = must(Tensor::empty(DType::i32, {1, T}));
  for (std::int64_t i = 0; i < T; ++i) pos.data_as<std::int32_t>()[i] = std::int32_t(i);
  Tensor k_prefill, v_prefill;
  auto [prefill, y] = build(T, ids, pos, [&](Tensor q4, Tensor k4, Tensor v4, Tensor o4, std::vector<Step>&, auto&& add) {
    k_prefill = k4, v_prefill = v4;
    add("attention", ops::Attention::plan(ctx, q4.desc(), k4.desc(), v4.desc(), o4.desc(), {.causal = true}), {q4, k4, v4}, {o4});
  });
  std::vector<double> totals;
  for (int it = -1; it < opt.iters; ++it) {  // iteration -1 warms caches and pages
    if (it == 0 && observer) observer->timed_runs_begin(ctx);
    const double ms = run_steps(prefill, stream, it >= 0);
    if (it >= 0) totals.push_back(ms);
  }
  const auto sum = [](const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); };
  fmt::print("Llama-style decoder layer: hidden {}, {} heads x {}, SwiGLU {}, f32 activations, {} weights\n", kHidden,
             kHeads, kHeadDim, kFfn, opt.weights);
  fmt::print("isa {}, {} threads\n\nprefill of {} tokens, median of {} runs\n", hw::to_string(ctx.isa()),
             ctx.pool().threads(), T, opt.iters);
  if (!observer) {
    print_table(prefill, totals, "total (layer)");
    fmt::print("mean |y| = {:.6f} (deterministic weights: the same on every machine and ISA, to rounding{})\n",
               mean_abs(y), opt.weights == "f32" ? "" : ", and to the weights' quantization");
  }
  if (opt.decode_steps == 0) {
    if (observer) observer->timed_runs_end(ctx, sum(totals));
    return;
  }

  // Decode: one token per step against a paged KV cache holding the prefill's keys and values.
  auto cache = must(ops::KvCache::create({.num_blocks = (max_len + 15) / 16, .block_size = 16, .kv_heads = kHeads,
                                          .head_dim = kHeadDim, .dtype = DType::f32}));
  const std::int32_t seq = cache->add_sequence();
  const auto as_thd = [](const Tensor& t) { return must(t.reshape({t.dim(1), t.dim(2), t.dim(3)})); };
  if (Status st = cache->append(seq, as_thd(k_prefill), as_thd(v_prefill)); !st.ok()) throw std::runtime_error(st.to_string());
  Tensor id1 = must(Tensor::empty(DType::i32, {1})), pos1 = must(Tensor::empty(DType::i32, {1, 1}));
  Tensor seq_ids = must(Tensor::empty(DType::i32, {1}));
  seq_ids.data_as<std::int32_t>()[0] = seq;
  auto [decode, y1] = build(1, id1, pos1, [&](Tensor q4, Tensor k4, Tensor v4, Tensor o4, std::vector<Step>& steps, auto&& add) {
    steps.push_back({"kv_append", "kv_cache", as_thd(k4).shape().to_string(), 0, 2 * k4.numel() * 4,
                     [cache, seq, k = as_thd(k4), v = as_thd(v4)](Stream&) { return cache->append(seq, k, v); }, {}});
    add("paged_attention", ops::PagedAttention::plan(ctx, cache, q4.desc(), seq_ids.desc(), o4.desc(), max_len, {.causal = true}),
        {q4, seq_ids}, {o4});
  });
  std::vector<double> step_ms;
  for (std::int64_t t = T; t < max_len; ++t) {
    id1.data_as<std::int32_t>()[0] = std::int32_t((t * 7919) % kVocab);
    pos1.data_as<std::int32_t>()[0] = std::int32_t(t);
    step_ms.push_back(run_steps(decode, stream, true));
  }
  if (observer) return observer->timed_runs_end(ctx, sum(totals) + sum(step_ms));
  fmt::print("\ndecode: {} steps of one token (KV length {} to {}), median per step\n", opt.decode_steps, T + 1, max_len);
  print_table(decode, step_ms, "total (token)");
  fmt::print("{:.1f} tokens/s for this layer; mean |y| of the last token = {:.6f}\n", 1000.0 / median(step_ms), mean_abs(y1));
}

void add_demo_command(CLI::App& app) {
  static DemoOptions opt;
  CLI::App* cmd = app.add_subcommand("demo", "Run a Llama-style decoder layer (prefill, then decode) and print per-op times");
  cmd->add_option("--tokens", opt.tokens, "prefill length")->check(CLI::Range(1, 4096));
  cmd->add_option("--iters", opt.iters, "timed runs (the median is shown)")->check(CLI::Range(1, 1000));
  cmd->add_option("--threads", opt.threads, "threads (0: one per core)")->check(CLI::Range(0, 1024));
  cmd->add_option("--decode", opt.decode_steps, "decode steps after the prefill (one token each, paged KV cache)")
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--weights", opt.weights,
                  "projection weights: f32, bf16, int8 (W8A8) or int4 (weight-only, groups of 128); with --diffusion, "
                  "the conv and linear weights: f32 or bf16")
      ->check(CLI::IsMember({"f32", "bf16", "int8", "int4"}));
  cmd->add_flag("--dynamic", opt.dynamic,
                "dynamic shapes instead: first-call and cached-call latency over sequence lengths, cold and after warm-up");
  cmd->add_flag("--diffusion", opt.diffusion,
                "a diffusion step instead: one SD 1.x UNet down + mid + up path at a 64x64 latent, fused and unfused, per-op times");
  cmd->callback([] {
    if (opt.diffusion) return run_diffusion_demo(opt);
    opt.dynamic ? run_dynamic_demo(opt) : run_demo(opt);
  });
}

}  // namespace tessera::app
