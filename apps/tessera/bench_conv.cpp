// `tessera bench conv`: Tessera's Conv2d (NHWC, weights packed once) against
// oneDNN's convolution on a diffusion UNet's shapes — 3x3 stride 1 at 320,
// 640 and 1280 channels, 1x1, 3x3 stride 2 — in f32 and bf16, and each fused
// variant against what it replaces: bias + SiLU + residual in the conv's
// epilogue against the bare conv, the unfused chain and oneDNN's post-ops;
// the nearest x2 upsample fused into the conv (its sub-pixel form) against
// resize-then-conv (Tessera's two ops, oneDNN's resampling + convolution). GFLOP/s as a share
// of the FMA (f32) or AMX (bf16) peak measured in the same run.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bench/harness.hpp"
#include "bench/peak.hpp"
#include "bench/report.hpp"
#include "commands.hpp"
#include "tessera/core/aligned.hpp"
#include "tessera/core/hw.hpp"
#include "tessera/core/tensor.hpp"
#include "tessera/ops/conv.hpp"
#include "tessera/ops/elementwise.hpp"
#include "tessera/ops/resize.hpp"
#include "tessera/runtime/context.hpp"
#include "tessera/runtime/stream.hpp"
#if TESSERA_HAVE_ONEDNN
#include "bench/peers_onednn_conv.hpp"
#endif

namespace tessera::app {

namespace {

using bench::Contexts;
using bench::Row;
using bench::threads_label;

struct ConvBenchOptions {
  std::vector<int> threads{1, 2};
  std::vector<std::string> dtypes{"f32", "bf16"};
  std::vector<std::string> cases;  // substrings of case names; empty: all
  int repeats = 5;
  bool quick = false;
  bool json = false;
};

// One image: the UNet's latent at batch 1.
constexpr std::int64_t kBatch = 1;

enum class Variant {
  plain,     // the conv alone
  epilogue,  // + bias, SiLU and the residual (a ResNet block's skip), in place on y
  upsample,  // x read as nearest-upsampled x2 (the UNet's upsample block)
};

struct ConvCase {
  std::string name;
  std::int64_t c_in, c_out;
  std::int64_t side;  // x's H = W
  std::int64_t kernel, stride;
  Variant variant = Variant::plain;

  std::int64_t conv_side() const { return variant == Variant::upsample ? 2 * side : side; }
  // "Same" padding, kernel / 2.
  std::int64_t out_side() const { return (conv_side() + 2 * (kernel / 2) - kernel) / stride + 1; }
  double flops() const {
    return 2.0 * double(kBatch * out_side() * out_side() * c_out * c_in * kernel * kernel);
  }
  ops::ConvAttrs attrs() const {
    return {.stride = {stride, stride},
            .padding = {kernel / 2, kernel / 2},
            .upsample_nearest2x = variant == Variant::upsample};
  }
};

// A case's operands in one dtype, shared by every implementation and thread count.
struct Operands {
  Tensor x;                    // [1, side, side, C]
  Tensor w;                    // f32 [Cout, C, K, K]: oneDNN reorders it itself
  ops::ConvWeightsPtr packed;  // w packed for `dtype`'s GEMM rows
  Tensor bias;                 // f32 [Cout]; epilogue cases
  Shape y_shape;               // [1, OH, OW, Cout]
};

Result<Operands> make_operands(const ConvCase& c, DType dtype) {
  Operands o;
  TESSERA_ASSIGN_OR_RETURN(o.x, Tensor::empty(dtype, {kBatch, c.side, c.side, c.c_in}));
  TESSERA_ASSIGN_OR_RETURN(o.w, Tensor::empty(DType::f32, {c.c_out, c.c_in, c.kernel, c.kernel}));
  bench::fill_tensor(o.x, 1);
  bench::fill_tensor(o.w, 2);
  TESSERA_ASSIGN_OR_RETURN(o.packed, ops::ConvWeights::pack(o.w, 1, dtype));
  if (c.variant == Variant::epilogue) {
    TESSERA_ASSIGN_OR_RETURN(o.bias, Tensor::empty(DType::f32, {c.c_out}));
    bench::fill_tensor(o.bias, 3);
  }
  o.y_shape = {kBatch, c.out_side(), c.out_side(), c.c_out};
  return o;
}

// An output of its own per implementation. With the residual in place it
// holds the residual's values at first; each call then adds to it, which
// changes no timing.
Result<Tensor> make_output(const Operands& o) {
  TESSERA_ASSIGN_OR_RETURN(Tensor y, Tensor::empty(o.x.dtype(), o.y_shape));
  bench::fill_tensor(y, 4);
  return y;
}

// One implementation of a case: a call that returns when y is written.
struct Impl {
  std::string impl;  // "tessera", "tessera_bare", "tessera_unfused", "onednn"
  std::function<Status()> call;
  std::string kernel;
};

// A Tessera plan bound to its tensors, with a workspace of its own.
struct Step {
  ops::PlanPtr plan;
  std::vector<Tensor> inputs, outputs;
  std::shared_ptr<void> workspace;
};

Result<Step> bind(Result<ops::PlanPtr> planned, std::vector<Tensor> inputs, std::vector<Tensor> outputs) {
  TESSERA_ASSIGN_OR_RETURN(ops::PlanPtr plan, std::move(planned));
  const std::int64_t bytes = std::max<std::int64_t>(plan->workspace_bytes(), 1);
  std::shared_ptr<void> workspace(aligned_alloc_bytes(std::size_t(bytes)), AlignedDeleter{});
  if (!workspace) return Status::out_of_memory(fmt::format("workspace of {} bytes for {}", bytes, plan->op()));
  return Step{std::move(plan), std::move(inputs), std::move(outputs), std::move(workspace)};
}

// The steps run in order, one call; the kernel is theirs joined.
Impl chain(std::string impl, Stream& stream, std::vector<Step> steps) {
  std::string kernel;
  for (const Step& s : steps) kernel += fmt::format("{}{}", kernel.empty() ? "" : " + ", s.plan->kernel());
  auto call = [&stream, steps = std::move(steps)]() -> Status {
    for (const Step& s : steps) TESSERA_RETURN_IF_ERROR(s.plan->run(stream, s.inputs, s.outputs, s.workspace.get()));
    return stream.synchronize();
  };
  return {std::move(impl), std::move(call), std::move(kernel)};
}

// What an implementation maker gets: the context and stream of this thread count.
struct Env {
  Context& ctx;
  Stream& stream;
  int threads;
};

// Tessera's conv as the case has it: fused epilogue or upsample included.
Result<Impl> make_tessera(const ConvCase& c, const Operands& o, const Env& env) {
  TESSERA_ASSIGN_OR_RETURN(Tensor y, make_output(o));
  std::vector<Tensor> inputs{o.x};
  ops::Epilogue epilogue;
  if (c.variant == Variant::epilogue) {
    epilogue = {.activation = ops::Activation::silu, .bias = o.bias.desc(), .residual = y.desc()};
    inputs.push_back(o.bias);
    inputs.push_back(y);
  }
  TESSERA_ASSIGN_OR_RETURN(
      Step conv, bind(ops::Conv2d::plan(env.ctx, o.x.desc(), o.packed, y.desc(), c.attrs(), epilogue), inputs, {y}));
  return chain("tessera", env.stream, {std::move(conv)});
}

// The epilogue case's conv without its epilogue: the floor the fused one is judged against.
Result<Impl> make_tessera_bare(const ConvCase& c, const Operands& o, const Env& env) {
  TESSERA_ASSIGN_OR_RETURN(Tensor y, make_output(o));
  TESSERA_ASSIGN_OR_RETURN(Step conv,
                           bind(ops::Conv2d::plan(env.ctx, o.x.desc(), o.packed, y.desc(), c.attrs()), {o.x}, {y}));
  return chain("tessera_bare", env.stream, {std::move(conv)});
}

// What the fused variant replaces, from Tessera's own ops:
//   epilogue: conv -> t; t += bias; t = silu(t); y += t
//   upsample: resize nearest x2 -> u [1, 2H, 2W, C]; conv(u) -> y
Result<Impl> make_tessera_unfused(const ConvCase& c, const Operands& o, const Env& env) {
  TESSERA_ASSIGN_OR_RETURN(Tensor y, make_output(o));
  std::vector<Step> steps;
  if (c.variant == Variant::epilogue) {
    TESSERA_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(y.dtype(), y.shape()));
    TESSERA_ASSIGN_OR_RETURN(Step conv,
                             bind(ops::Conv2d::plan(env.ctx, o.x.desc(), o.packed, t.desc(), c.attrs()), {o.x}, {t}));
    TESSERA_ASSIGN_OR_RETURN(
        Step bias,
        bind(ops::Binary::plan(env.ctx, ops::BinaryOp::add, t.desc(), o.bias.desc(), t.desc()), {t, o.bias}, {t}));
    TESSERA_ASSIGN_OR_RETURN(Step silu,
                             bind(ops::Unary::plan(env.ctx, ops::Activation::silu, t.desc(), t.desc()), {t}, {t}));
    TESSERA_ASSIGN_OR_RETURN(
        Step residual, bind(ops::Binary::plan(env.ctx, ops::BinaryOp::add, t.desc(), y.desc(), y.desc()), {t, y}, {y}));
    steps = {std::move(conv), std::move(bias), std::move(silu), std::move(residual)};
  } else {
    TESSERA_ASSIGN_OR_RETURN(Tensor u, Tensor::empty(o.x.dtype(), {kBatch, c.conv_side(), c.conv_side(), c.c_in}));
    const ops::ResizeAttrs nearest{.channels_last = true};  // PyTorch's nearest: pixel duplication
    TESSERA_ASSIGN_OR_RETURN(Step resize, bind(ops::Resize::plan(env.ctx, o.x.desc(), u.desc(), nearest), {o.x}, {u}));
    ops::ConvAttrs attrs = c.attrs();
    attrs.upsample_nearest2x = false;
    TESSERA_ASSIGN_OR_RETURN(Step conv,
                             bind(ops::Conv2d::plan(env.ctx, u.desc(), o.packed, y.desc(), attrs), {u}, {y}));
    steps = {std::move(resize), std::move(conv)};
  }
  return chain("tessera_unfused", env.stream, std::move(steps));
}

#if TESSERA_HAVE_ONEDNN
Result<Impl> make_onednn(const ConvCase& c, const Operands& o, const Env& env) {
  TESSERA_ASSIGN_OR_RETURN(Tensor y, make_output(o));
  ops::EpilogueTensors epilogue;
  if (c.variant == Variant::epilogue)
    epilogue = {.activation = ops::Activation::silu, .bias = o.bias, .residual = y};  // the sum post-op: y in place
  TESSERA_ASSIGN_OR_RETURN(bench::OnednnCall call,
                           bench::make_onednn_conv(o.x, o.w, y, c.attrs(), epilogue, env.threads));
  // oneDNN holds y's data, not y: the call keeps it alive (x, w and the bias live in the Operands).
  return Impl{"onednn", [run = std::move(call.run), y] { return run(); }, std::move(call.kernel)};
}
#endif

std::vector<Impl> make_impls(const ConvCase& c, const Operands& o, const Env& env, const std::string& where) {
  using Maker = Result<Impl> (*)(const ConvCase&, const Operands&, const Env&);
  std::vector<std::pair<const char*, Maker>> makers{{"tessera", make_tessera}};
  if (c.variant == Variant::epilogue) makers.emplace_back("tessera_bare", make_tessera_bare);
  if (c.variant != Variant::plain) makers.emplace_back("tessera_unfused", make_tessera_unfused);
#if TESSERA_HAVE_ONEDNN
  makers.emplace_back("onednn", make_onednn);
#endif
  std::vector<Impl> impls;
  for (const auto& [impl, make] : makers) {
    Result<Impl> made = make(c, o, env);
    if (made.ok())
      impls.push_back(std::move(made).value());
    else
      fmt::print(stderr, "{}: {} not measured: {}\n", where, impl, made.status().to_string());
  }
  return impls;
}

// ------------------------------------------------------------------ measuring

struct Run {
  const ConvBenchOptions& opt;
  bench::MeasureOptions measure;
  std::map<int, bench::Peaks> peaks;  // by threads
};

// The unit a row's GFLOP/s is judged against: f32 on the FMAs, bf16 on AMX (0: absent).
double peak_for(const bench::Peaks& p, DType dtype) { return dtype == DType::bf16 ? p.amx_bf16 : p.fma_f32; }

std::string describe(const ConvCase& c) {
  const std::string input = c.variant == Variant::upsample
                                ? fmt::format("x [1, {0}, {0}, {1}] upsampled x2 (nearest)", c.side, c.c_in)
                                : fmt::format("x [1, {0}, {0}, {1}]", c.side, c.c_in);
  const std::string epilogue = c.variant == Variant::epilogue ? " + bias, SiLU, residual" : "";
  return fmt::format("{0} -> y [1, {2}, {2}, {3}], {1}x{1} stride {4}{5}, {6:.2f} GFLOP", input, c.kernel, c.out_side(),
                     c.c_out, c.stride, epilogue, c.flops() / 1e9);
}

void run_case(const ConvCase& c, const Operands& o, DType dtype, int threads, Contexts& contexts, const Run& run) {
  const std::string where = fmt::format("conv {} {} {}", c.name, to_string(dtype), threads_label(threads));
  Stream stream(contexts.at(threads));
  std::vector<Impl> impls = make_impls(c, o, {contexts.at(threads), stream, threads}, where);
  if (impls.empty()) return;
  std::vector<bench::Contender> contenders;
  for (const Impl& i : impls) contenders.push_back({.impl = i.impl, .call = i.call});
  bench::measure_interleaved(contenders, run.measure);

  std::vector<Row> rows;
  for (std::size_t i = 0; i < contenders.size(); ++i) {
    const bench::Contender& result = contenders[i];
    if (!result.error.ok()) {
      fmt::print(stderr, "{}: {} failed: {}\n", where, result.impl, result.error.to_string());
      continue;
    }
    Row r{.suite = "conv",
          .case_name = c.name,
          .dtype = std::string(to_string(dtype)),
          .threads = threads,
          .impl = result.impl};
    r.median_ms = bench::median(result.ms);
    r.best_ms = bench::best(result.ms);
    // Every implementation is credited with the conv's FLOPs (the epilogue's are negligible).
    r.gflops = c.flops() / r.median_ms / 1e6;
    if (const auto pk = run.peaks.find(threads); pk != run.peaks.end() && peak_for(pk->second, dtype) > 0)
      r.pct_peak = 100.0 * *r.gflops / peak_for(pk->second, dtype);
    r.kernel = impls[i].kernel;
    rows.push_back(std::move(r));
  }
  // Tessera against the fastest peer (the bare conv is its floor, not a peer);
  // every other row against Tessera — for tessera_bare: fused / bare, the epilogue's cost.
  bench::add_ratio(rows, "tessera", [](std::string_view impl) { return impl != "tessera_bare"; });
  for (Row& r : rows)
    if (r.impl != "tessera") bench::add_ratio(rows, r.impl, [](std::string_view impl) { return impl == "tessera"; });
  bench::print_rows(fmt::format("{} | {}", where, describe(c)), rows, run.opt.json);
}

// ------------------------------------------------------------------ the cases

std::string channels(std::int64_t c_in, std::int64_t c_out) {
  return c_in == c_out ? fmt::format("c{}", c_in) : fmt::format("c{}to{}", c_in, c_out);
}

std::vector<ConvCase> conv_cases(bool quick) {
  std::vector<ConvCase> cases;
  // Stable Diffusion's UNet levels: channels at the latent side they run at.
  const std::pair<std::int64_t, std::int64_t> levels[] = {{320, 64}, {640, 32}, {1280, 16}};
  auto at_level = [&](std::int64_t c, std::int64_t side) {
    return std::ranges::find(levels, std::pair{c, side}) != std::end(levels);
  };
  // 3x3 stride 1: every channel count at every side; quick: the levels only.
  for (std::int64_t c : {320, 640, 1280})
    for (std::int64_t side : {64, 32, 16})
      if (!quick || at_level(c, side))
        cases.push_back({fmt::format("c{}_{}x{}_k3s1", c, side, side), c, c, side, 3, 1});
  // 1x1: channel-changing projections, as a ResNet block's shortcut.
  using Projection = std::tuple<std::int64_t, std::int64_t, std::int64_t>;  // C, Cout, side
  for (const auto& [c_in, c_out, side] : {Projection{320, 640, 64}, Projection{640, 320, 32}}) {
    cases.push_back({fmt::format("{}_{}x{}_k1s1", channels(c_in, c_out), side, side), c_in, c_out, side, 1, 1});
    if (quick) break;
  }
  // 3x3 stride 2: the downsampler.
  cases.push_back({"c320_64x64_k3s2", 320, 320, 64, 3, 2});
  // conv_out: the UNet's to the 4 latent channels, the VAE decoder's to RGB
  // (at 256 x 256, a quarter of SD's 512 x 512 image).
  cases.push_back({fmt::format("{}_64x64_k3s1", channels(320, 4)), 320, 4, 64, 3, 1});
  if (!quick) cases.push_back({fmt::format("{}_256x256_k3s1", channels(128, 3)), 128, 3, 256, 3, 1});
  // A ResNet block's second conv: bias, SiLU and the skip connection in its epilogue.
  for (const auto& [c, side] : levels) {
    cases.push_back({fmt::format("c{}_{}x{}_k3s1_bias_silu_res", c, side, side), c, c, side, 3, 1, Variant::epilogue});
    if (quick) break;
  }
  // The upsample block: nearest x2, then a 3x3 conv at the doubled side.
  cases.push_back({"c640_32x32_up2_k3s1", 640, 640, 32, 3, 1, Variant::upsample});
  return cases;
}

void print_header(const Run& run, Context& ctx) {
  const hw::Info& hw = hw::info();
  fmt::print("tessera bench conv: {}, {} cores, L3 {} MiB, isa {}\n", hw.cpu_name, hw.cores, hw.l3_bytes >> 20,
             hw::to_string(ctx.isa()));
  fmt::print("tessera: Conv2d on NHWC tensors, batch {}, weights packed once (ConvWeights::pack) outside the timing; "
             "bias + SiLU + residual fused in its epilogue, the x2 upsample read inside it (as four sub-pixel convs)\n",
             kBatch);
  fmt::print("tessera_bare: the same conv without the epilogue; tessera_unfused: conv, then add bias, silu, add "
             "residual (Binary, Unary); or Resize (nearest x2) into a tensor, then conv\n");
#if TESSERA_HAVE_ONEDNN
  fmt::print("peer: {} convolution, NHWC src / dst, weights reordered once into the layout it picks; bias, swish and "
             "sum post-ops; a resampling primitive before it for the upsample\n",
             bench::onednn_version());
#endif
  fmt::print("median and best of {} repeats (each >= {:.0f} ms of back-to-back calls) after warm-up, implementations "
             "interleaved\n",
             run.measure.repeats, run.measure.repeat_ms);
  fmt::print("GFLOP/s = 2 x OH x OW x Cout x C x KH x KW, the same count for every implementation (the upsample's "
             "sub-pixel convs and f32 3x3 stride 1's Winograd do 4/9 of it, bf16 3x3 stride 1's Winograd (without AMX) 1/4, hence "
             "rates past the peak); % of the FMA (f32) or AMX (bf16) peak measured "
             "in this run\n");
  fmt::print("vs best peer: the other implementation's median / this row's (> 1: this row is faster); tessera against "
             "the fastest peer, the others against tessera (tessera_bare: the fused conv's cost over the bare one)\n");
  fmt::print("targets: 3x3: tessera >= 1.00x onednn on every shape; epilogue: the tessera_bare row < 1.05x tessera "
             "(fused / bare); upsample: the tessera_unfused row <= 0.83x tessera (fused 1.2x faster)\n");
}

void run_bench_conv(ConvBenchOptions opt) {
  std::ranges::sort(opt.threads);
  opt.threads.erase(std::unique(opt.threads.begin(), opt.threads.end()), opt.threads.end());
  std::vector<DType> dtypes;
  for (const std::string& name : opt.dtypes)
    if (const auto t = parse_dtype(name); t && std::ranges::find(dtypes, *t) == dtypes.end()) dtypes.push_back(*t);
  std::vector<ConvCase> cases = conv_cases(opt.quick);
  if (!opt.cases.empty())
    std::erase_if(cases, [&](const ConvCase& c) {
      return std::ranges::none_of(opt.cases, [&](const std::string& s) { return c.name.find(s) != std::string::npos; });
    });
  if (cases.empty()) {
    fmt::print(stderr, "no case matches --case\n");
    return;
  }

  const auto start = std::chrono::steady_clock::now();
  Contexts contexts(opt.threads);
  Run run{.opt = opt, .measure = {.repeats = opt.repeats}, .peaks = {}};
  if (!opt.json) print_header(run, contexts.at(opt.threads.front()));

  // The compute roofline first, measured now, on the same threads as the rows judged against it.
  for (int t : opt.threads) {
    const bench::Peaks pk = run.peaks[t] = bench::measure_peaks(contexts.at(t));
    std::vector<Row> peak_rows;
    const std::tuple<const char*, const char*, double> units[] = {{"fma_f32", "f32", pk.fma_f32},
                                                                   {"amx_bf16", "bf16", pk.amx_bf16}};
    for (const auto& [unit, dtype, rate] : units)
      if (rate > 0)
        peak_rows.push_back(
            {.suite = "conv", .case_name = unit, .dtype = dtype, .threads = t, .impl = "peak", .gflops = rate});
    bench::print_rows(fmt::format("compute peak | {}", threads_label(t)), peak_rows, opt.json);
  }

  for (const ConvCase& c : cases)
    for (DType dtype : dtypes) {
      Result<Operands> operands = make_operands(c, dtype);
      if (!operands.ok()) {
        fmt::print(stderr, "conv {} {}: skipped: {}\n", c.name, to_string(dtype), operands.status().to_string());
        continue;
      }
      for (int t : opt.threads) run_case(c, *operands, dtype, t, contexts, run);
    }
  if (!opt.json)
    fmt::print("\ndone in {:.0f} s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace

void add_bench_conv_command(CLI::App& bench) {
  static ConvBenchOptions opt;
  CLI::App* conv = bench.add_subcommand(
      "conv",
      "Conv2d (NHWC) 3x3 / 1x1 / stride 2, f32 and bf16, against oneDNN; the fused epilogue and upsample against the "
      "bare conv and the unfused chains, with the compute peak");
  conv->add_option("--threads", opt.threads, "thread counts")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  conv->add_option("--dtype", opt.dtypes, "activation and weight types")
      ->delimiter(',')
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  conv->add_option("--case", opt.cases, "run only the cases whose name contains one of these, e.g. k3s1,silu")
      ->delimiter(',');
  conv->add_option("--repeats", opt.repeats, "timed repeats per implementation and case")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  conv->add_flag("--quick", opt.quick,
                 "3x3 only at the UNet's own levels (320 at 64x64, 640 at 32x32, 1280 at 16x16), one 1x1, one epilogue "
                 "case");
  conv->add_flag("--json", opt.json, "one JSON object per line (DESIGN.md, Benchmarks) instead of tables");
  conv->callback([] { run_bench_conv(opt); });
}

}  // namespace tessera::app
