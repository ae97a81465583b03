// `tessera demo`: one Llama-style decoder layer (hidden 2048, 16 heads of
// 128, SwiGLU 5632, f32) over a prefill of 128 tokens, planned once through
// the op API and run a few times; prints where the time goes, op by op.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "tessera/tessera.hpp"

namespace tessera::app {

namespace {

struct DemoOptions {
  std::int64_t tokens = 128;
  int iters = 5;
  int threads = 0;
  std::string weights = "f32";  // how the projection weights are packed: f32, bf16, int8 (W8A8), int4
};

constexpr std::int64_t kHidden = 2048, kHeads = 16, kHeadDim = 128, kFfn = 5632, kVocab = 4096;

// Deterministic weights: uniform in [-scale, scale] from a counter hash.
void fill(const Tensor& t, std::uint64_t seed, float scale) {
  float* p = t.data_as<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    std::uint64_t z = (seed << 40) + std::uint64_t(i) + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    p[i] = scale * (float(z >> 40) * 0x1p-23f - 1.0f);
  }
}

// The demo's inputs are valid by construction: a failure is a bug, reported by main.
template <class T>
T must(Result<T> r) {
  if (!r.ok()) throw std::runtime_error(r.status().to_string());
  return std::move(r).value();
}

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

Tensor weight(Shape shape, std::uint64_t seed, float scale) {
  Tensor t = must(Tensor::empty(DType::f32, shape));
  fill(t, seed, scale);
  return t;
}

void run_demo(const DemoOptions& opt) {
  Context ctx({.threads = opt.threads});
  Stream stream(ctx);
  const std::int64_t T = opt.tokens;
  const float w_in = 1.0f / std::sqrt(float(kHidden)), w_ffn = 1.0f / std::sqrt(float(kFfn));

  // Weights.
  Tensor embed = weight({kVocab, kHidden}, 1, 1.0f), g_attn = weight({kHidden}, 2, 1.0f), g_ffn = weight({kHidden}, 3, 1.0f);
  Tensor wq = weight({kHidden, kHidden}, 4, w_in), wk = weight({kHidden, kHidden}, 5, w_in);
  Tensor wv = weight({kHidden, kHidden}, 6, w_in), wo = weight({kHidden, kHidden}, 7, w_in);
  Tensor w_gate = weight({kHidden, kFfn}, 8, w_in), w_up = weight({kHidden, kFfn}, 9, w_in);
  Tensor w_down = weight({kFfn, kHidden}, 10, w_ffn);
  auto [cos, sin] = [&] {
    auto r = ops::rope_cache(T, kHeadDim);
    if (!r.ok()) throw std::runtime_error(r.status().to_string());
    return std::move(r).value();
  }();

  // Activations.
  Tensor ids = must(Tensor::empty(DType::i32, {T}));
  for (std::int64_t i = 0; i < T; ++i) ids.data_as<std::int32_t>()[i] = std::int32_t((i * 7919) % kVocab);
  Tensor pos = must(Tensor::empty(DType::i32, {1, T}));
  for (std::int64_t i = 0; i < T; ++i) pos.data_as<std::int32_t>()[i] = std::int32_t(i);
  auto act = [&](Shape s) { return must(Tensor::empty(DType::f32, s)); };
  Tensor x = act({T, kHidden}), h = act({T, kHidden}), q = act({T, kHidden}), k = act({T, kHidden}), v = act({T, kHidden});
  Tensor attn = act({T, kHidden});
  Tensor x2 = act({T, kHidden}), h2 = act({T, kHidden}), gate = act({T, kFfn}), up = act({T, kFfn});
  Tensor y = act({T, kHidden});

  // Views: [T, H*D] as [1, T, H, D] for rope and attention.
  auto as_bshd = [&](const Tensor& t) { return must(t.reshape({1, T, kHeads, kHeadDim})); };

  std::vector<Step> steps;
  auto plan_and_add = [&](std::string name, Result<ops::PlanPtr> plan, std::vector<Tensor> in, std::vector<Tensor> out) {
    steps.push_back(op_step(ctx, std::move(name), must(std::move(plan)), std::move(in), std::move(out)));
  };
  plan_and_add("embedding", ops::Embedding::plan(ctx, embed.desc(), ids.desc(), x.desc()), {embed, ids}, {x});
  plan_and_add("attn_norm", ops::RmsNorm::plan(ctx, x.desc(), g_attn.desc(), h.desc(), {.eps = 1e-5f}), {x, g_attn}, {h});
  // Projections: weights packed (or quantized) once, residual adds and the
  // gate's SiLU fused into the GEMM epilogues.
  auto pack = [&](const Tensor& w) -> ops::WeightsPtr {
    if (opt.weights == "bf16") return must(ops::pack_weights(w, DType::bf16));
    if (opt.weights == "int8") return must(ops::quantize_weights(w, {.dtype = DType::i8, .group_size = 0}));
    if (opt.weights == "int4") return must(ops::quantize_weights(w, {.dtype = DType::i4, .group_size = 128}));
    return must(ops::pack_weights(w, DType::f32));
  };
  const ops::LinearOptions linear{.quantize_activations = opt.weights == "int8"};
  auto proj_step = [&](std::string name, const Tensor& a, const Tensor& w, const Tensor& c, ops::Epilogue e = {},
                       std::vector<Tensor> extra = {}) {
    std::vector<Tensor> in{a};
    in.insert(in.end(), extra.begin(), extra.end());
    plan_and_add(std::move(name), ops::Linear::plan(ctx, a.desc(), pack(w), c.desc(), e, linear), std::move(in), {c});
  };
  proj_step("q_proj", h, wq, q);
  proj_step("k_proj", h, wk, k);
  proj_step("v_proj", h, wv, v);
  for (auto [name, t] : {std::pair{"rope_q", q}, std::pair{"rope_k", k}}) {
    const Tensor view = as_bshd(t);
    plan_and_add(name, ops::Rope::plan(ctx, view.desc(), pos.desc(), cos.desc(), sin.desc(), view.desc()),
                 {view, pos, cos, sin}, {view});
  }
  // Flash attention: QKᵀ, causal softmax and PV in one kernel; the T x T scores never reach memory.
  const Tensor q4 = as_bshd(q), k4 = as_bshd(k), v4 = as_bshd(v), attn4 = as_bshd(attn);
  plan_and_add("attention", ops::Attention::plan(ctx, q4.desc(), k4.desc(), v4.desc(), attn4.desc(), {.causal = true}),
               {q4, k4, v4}, {attn4});
  proj_step("o_proj+residual", attn, wo, x2, {.residual = x.desc()}, {x});
  plan_and_add("ffn_norm", ops::RmsNorm::plan(ctx, x2.desc(), g_ffn.desc(), h2.desc(), {.eps = 1e-5f}), {x2, g_ffn}, {h2});
  proj_step("gate_proj+silu", h2, w_gate, gate, {.activation = ops::Activation::silu});
  proj_step("up_proj", h2, w_up, up);
  plan_and_add("gate_mul_up", ops::Binary::plan(ctx, ops::BinaryOp::mul, gate.desc(), up.desc(), gate.desc()), {gate, up}, {gate});
  proj_step("down_proj+residual", gate, w_down, y, {.residual = x2.desc()}, {x2});

  using Clock = std::chrono::steady_clock;
  std::vector<double> totals;
  for (int it = -1; it < opt.iters; ++it) {  // iteration -1 warms caches and pages
    const auto t0 = Clock::now();
    for (Step& s : steps) {
      const auto s0 = Clock::now();
      Status st = s.run(stream);
      if (!st.ok()) throw std::runtime_error(s.name + ": " + st.to_string());
      if (it >= 0) s.ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - s0).count());
    }
    if (it >= 0) totals.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };

  double checksum = 0;
  for (std::int64_t i = 0; i < y.numel(); ++i) checksum += std::abs(y.data_as<float>()[i]);
  fmt::print("Llama-style decoder layer: hidden {}, {} heads x {}, SwiGLU {}, f32 activations, {} weights, prefill {} tokens\n",
             kHidden, kHeads, kHeadDim, kFfn, opt.weights, T);
  fmt::print("isa {}, {} threads, median of {} runs\n\n", hw::to_string(ctx.isa()), ctx.pool().threads(), opt.iters);
  fmt::print("{:<20} {:<24} {:<18} {:>9} {:>7} {:>9} {:>8}\n", "op", "kernel", "output", "ms", "time%", "GFLOP/s", "GB/s");
  double sum = 0;
  for (const Step& s : steps) sum += median(s.ms);
  for (const Step& s : steps) {
    const double ms = median(s.ms);
    fmt::print("{:<20} {:<24} {:<18} {:>9.3f} {:>6.1f}% {:>9} {:>8.1f}\n", s.name, s.kernel, s.shape, ms, 100.0 * ms / sum,
               s.flops ? fmt::format("{:.1f}", s.flops / ms / 1e6) : std::string("-"), s.bytes / ms / 1e6);
  }
  fmt::print("{:<20} {:<24} {:<18} {:>9.3f}\n", "total (ops)", "", "", sum);
  fmt::print("{:<20} {:<24} {:<18} {:>9.3f}\n", "total (layer)", "", "", median(totals));
  fmt::print("\nmean |y| = {:.6f} (deterministic weights: the same on every machine and ISA, to rounding{})\n",
             checksum / double(y.numel()), opt.weights == "f32" ? "" : ", and to the weights' quantization");
}

}  // namespace

void add_demo_command(CLI::App& app) {
  static DemoOptions opt;
  CLI::App* cmd = app.add_subcommand("demo", "Run a Llama-style decoder layer (prefill) and print per-op times");
  cmd->add_option("--tokens", opt.tokens, "prefill length")->check(CLI::Range(1, 4096));
  cmd->add_option("--iters", opt.iters, "timed runs (the median is shown)")->check(CLI::Range(1, 1000));
  cmd->add_option("--threads", opt.threads, "threads (0: one per core)")->check(CLI::Range(0, 1024));
  cmd->add_option("--weights", opt.weights, "projection weights: f32, bf16, int8 (W8A8) or int4 (weight-only, groups of 128)")
      ->check(CLI::IsMember({"f32", "bf16", "int8", "int4"}));
  cmd->callback([] { run_demo(opt); });
}

}  // namespace tessera::app
