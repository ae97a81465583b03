// `tessera demo --dynamic`: a service sees a new sequence length on almost
// every request. The demo's decoder layer runs through the one-shot ops (the
// plan cache, token buckets for the projections) over a set of lengths: the
// first call of each length, then the cached call, in a cold context and in
// one warmed up for those lengths (Context::warmup); then what dispatch
// itself costs per op.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <tuple>
#include <vector>

#include "commands.hpp"
#include "demo.hpp"

namespace tessera::app {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

struct Weights {
  Tensor g_attn, g_ffn, cos, sin;
  DemoProjections proj;
};

// One length's activations, made and touched once: the timings below are
// the library's, not the first touch of the caller's buffers.
struct Activations {
  std::int64_t tokens;
  Tensor x, h, qkv, q, k, v, attn, x2, h2, gate_up, ffn, y, pos;
  explicit Activations(std::int64_t n) : tokens(n) {
    auto act = [](Shape s) { return must(Tensor::zeros(DType::f32, s)); };
    x = demo_weight({n, kHidden}, 11, 1.0f);
    h = act({n, kHidden}), qkv = act({n, 3 * kHidden});
    q = must(qkv.slice(1, 0, kHidden)), k = must(qkv.slice(1, kHidden, 2 * kHidden)), v = must(qkv.slice(1, 2 * kHidden, 3 * kHidden));
    attn = act({n, kHidden}), x2 = act({n, kHidden}), h2 = act({n, kHidden});
    gate_up = act({n, 2 * kFfn}), ffn = act({n, kFfn}), y = act({n, kHidden});
    pos = must(Tensor::empty(DType::i32, {1, n}));
    for (std::int64_t i = 0; i < n; ++i) pos.data_as<std::int32_t>()[i] = std::int32_t(i);
  }
};

// The decoder layer of `tessera demo`, one-shot op by op.
Status layer(Stream& s, const Weights& w, const Activations& a) {
  const std::int64_t n = a.tokens;
  auto bshd = [n](const Tensor& t) { return must(t.reshape({1, n, kHeads, kHeadDim})); };
  TESSERA_RETURN_IF_ERROR(ops::rms_norm(s, a.x, w.g_attn, a.h, {.eps = 1e-5f}));
  TESSERA_RETURN_IF_ERROR(ops::linear(s, a.h, w.proj.qkv, a.qkv));
  TESSERA_RETURN_IF_ERROR(ops::rope(s, bshd(a.q), a.pos, w.cos, w.sin, bshd(a.q)));
  TESSERA_RETURN_IF_ERROR(ops::rope(s, bshd(a.k), a.pos, w.cos, w.sin, bshd(a.k)));
  TESSERA_RETURN_IF_ERROR(ops::attention(s, bshd(a.q), bshd(a.k), bshd(a.v), bshd(a.attn), {.causal = true}));
  TESSERA_RETURN_IF_ERROR(ops::linear(s, a.attn, w.proj.o, a.x2, {.residual = a.x}));
  TESSERA_RETURN_IF_ERROR(ops::rms_norm(s, a.x2, w.g_ffn, a.h2, {.eps = 1e-5f}));
  TESSERA_RETURN_IF_ERROR(ops::linear(s, a.h2, w.proj.gate_up, a.gate_up));
  TESSERA_RETURN_IF_ERROR(ops::swiglu(s, a.gate_up, a.ffn));
  TESSERA_RETURN_IF_ERROR(ops::linear(s, a.ffn, w.proj.down, a.y, {.residual = a.x2}));
  return s.synchronize();
}

struct Latency {
  double first_ms = 0, cached_ms = 0;
  double first_host_us = 0, cached_host_us = 0;  // the profiler's host time (plan lookup or making, checks) of all ops
  std::int64_t plans_made = 0;  // plan-cache misses of the first call
};

// The first call and the cached call of each length, in order, on `ctx`.
std::vector<Latency> first_and_cached(Context& ctx, const Weights& w, const std::vector<Activations>& lengths) {
  Stream s(ctx);
  std::vector<Latency> out;
  // One call's latency and its ops' host time.
  auto call = [&](const Activations& a, double& ms, double& host_us) {
    ctx.profiler().start();
    const auto t0 = Clock::now();
    if (Status st = layer(s, w, a); !st.ok()) throw std::runtime_error(st.to_string());
    ms = ms_since(t0);
    ctx.profiler().stop();
    host_us = 0;
    for (const OpRecord& r : ctx.profiler().records()) host_us += r.host_ns() * 1e-3;
  };
  for (const Activations& a : lengths) {
    Latency l;
    const std::int64_t misses = ctx.plans().stats().misses;
    call(a, l.first_ms, l.first_host_us);
    l.plans_made = ctx.plans().stats().misses - misses;
    call(a, l.cached_ms, l.cached_host_us);
    out.push_back(l);
  }
  return out;
}

// Host cost per op of an op whose work is one element, over many calls.
template <class F>
double ns_per_call(int calls, F&& call) {
  const auto t0 = Clock::now();
  for (int i = 0; i < calls; ++i)
    if (Status st = call(); !st.ok()) throw std::runtime_error(st.to_string());
  return ms_since(t0) * 1e6 / calls;
}

void print_dispatch_costs(int threads) {
  constexpr int kCalls = 100000;
  Context ctx({.threads = threads});
  Stream inline_stream(ctx), worker(ctx, {.worker = true});
  Tensor a = must(Tensor::zeros(DType::f32, {1})), b = must(Tensor::zeros(DType::f32, {1})), y = must(Tensor::zeros(DType::f32, {1}));
  const ops::PlanPtr plan = must(ops::Binary::plan(ctx, ops::BinaryOp::add, a.desc(), b.desc(), y.desc()));
  const Tensor in[] = {a, b}, out[] = {y};
  ns_per_call(kCalls, [&] { return ops::add(inline_stream, a, b, y); });  // warm
  const double run = ns_per_call(kCalls, [&] { return plan->run(inline_stream, in, out); });
  const double one_shot = ns_per_call(kCalls, [&] { return ops::add(inline_stream, a, b, y); });
  const double queued = ns_per_call(kCalls, [&] { return plan->run(worker, in, out); });
  const double drained = ns_per_call(1, [&] { return worker.synchronize(); }) / kCalls;
  ctx.profiler().start();
  const double profiled = ns_per_call(kCalls, [&] { return ops::add(inline_stream, a, b, y); });
  ctx.profiler().stop();
  const double miss = ns_per_call(2000, [&] {
    ctx.plans().clear();
    return ops::add(inline_stream, a, b, y);
  });
  fmt::print("\nhost cost per op (an add of one element, {} calls, {} thread{}):\n", kCalls, threads, threads == 1 ? "" : "s");
  fmt::print("  plan->run, inline stream                   {:8.0f} ns\n", run);
  fmt::print("  one-shot, plan-cache hit                   {:8.0f} ns\n", one_shot);
  fmt::print("  one-shot, plan-cache hit, profiler on      {:8.0f} ns  (+{:.0f} ns)\n", profiled, profiled - one_shot);
  fmt::print("  one-shot, plan-cache miss (plan made)      {:8.0f} ns\n", miss);
  fmt::print("  plan->run onto a worker stream (enqueue)   {:8.0f} ns  (+{:.0f} ns per op to drain the queue)\n", queued, drained);
}

}  // namespace

void run_dynamic_demo(const DemoOptions& opt) {
  const std::vector<std::int64_t> lengths = {1, 7, 16, 50, 100, 128, 200, 256};
  constexpr std::int64_t kBucket = 64;
  Weights w;
  w.g_attn = demo_weight({kHidden}, 2, 1.0f), w.g_ffn = demo_weight({kHidden}, 3, 1.0f);
  std::tie(w.cos, w.sin) = must(ops::rope_cache(lengths.back(), kHeadDim));
  {
    Context prep({.threads = opt.threads});  // its own: the contexts timed below start without the weights' plans
    Stream s(prep);
    w.proj = demo_projections(s, opt.weights);
  }
  std::vector<Activations> acts;
  for (std::int64_t n : lengths) acts.emplace_back(n);

  const ContextOptions options{.threads = opt.threads, .token_bucket = kBucket};
  Context cold(options);
  const std::vector<Latency> c = first_and_cached(cold, w, acts);

  Context warm(options);
  std::vector<std::function<Status(Stream&)>> problems;
  for (const Activations& a : acts) problems.push_back([&w, &a](Stream& s) { return layer(s, w, a); });
  const auto t0 = Clock::now();
  if (Status st = warm.warmup(problems); !st.ok()) throw std::runtime_error(st.to_string());
  const double warmup_ms = ms_since(t0);
  const std::int64_t warm_plans = warm.plans().stats().size;
  const std::vector<Latency> wl = first_and_cached(warm, w, acts);

  fmt::print("Dynamic shapes: the demo's decoder layer (hidden {}, {} weights) through one-shot ops, isa {}, {} threads\n",
             kHidden, opt.weights, hw::to_string(cold.isa()), cold.pool().threads());
  fmt::print("projections planned per token bucket (powers of two up to {}, then multiples of it)\n\n", kBucket);
  fmt::print("{:>7} {:>7} | {:>11} {:>9} {:>11} {:>9} {:>6} | {:>11} {:>9} {:>11} {:>9} {:>6}\n", "tokens", "bucket",
             "cold 1st ms", "host us", "cached ms", "host us", "plans", "warm 1st ms", "host us", "cached ms", "host us", "plans");
  for (std::size_t i = 0; i < lengths.size(); ++i)
    fmt::print("{:>7} {:>7} | {:>11.3f} {:>9.1f} {:>11.3f} {:>9.1f} {:>6} | {:>11.3f} {:>9.1f} {:>11.3f} {:>9.1f} {:>6}\n",
               lengths[i], cold.token_bucket(lengths[i]), c[i].first_ms, c[i].first_host_us, c[i].cached_ms,
               c[i].cached_host_us, c[i].plans_made, wl[i].first_ms, wl[i].first_host_us, wl[i].cached_ms,
               wl[i].cached_host_us, wl[i].plans_made);
  const PlanCache::Stats cs = cold.plans().stats();
  fmt::print("\ncold context: {} plans for {} lengths ({} hits, {} misses); warm-up of {} lengths: {:.1f} ms, {} plans\n",
             cs.size, lengths.size(), cs.hits, cs.misses, lengths.size(), warmup_ms, warm_plans);
  fmt::print("host us: the ops' host time (plan lookup, or making the plan, and checks), summed over the layer's 10 ops;\n"
             "plans: plan-cache misses of the first call\n");
  print_dispatch_costs(cold.pool().threads());
}

}  // namespace tessera::app
