// `tessera bench diffusion`: the Stable Diffusion UNet's blocks
// (tessera/models/diffusion.hpp) at their SD 1.x sizes, each fused against
// the same math one op at a time (the block's BlockMode::unfused), on f32
// NHWC activations, the two interleaved.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "bench/harness.hpp"
#include "bench/report.hpp"
#include "commands.hpp"
#include "tessera/core/hw.hpp"
#include "tessera/core/tensor.hpp"
#include "tessera/models/diffusion.hpp"
#include "tessera/runtime/context.hpp"
#include "tessera/runtime/profiler.hpp"
#include "tessera/runtime/stream.hpp"

namespace tessera::app {

namespace {

using bench::Row;
using bench::threads_label;
using models::BlockMode;

struct DiffusionBenchOptions {
  std::vector<int> threads{1, 2};
  std::vector<std::string> cases;  // substrings of case names; empty: all
  int repeats = 5;
  bool json = false;
};

// SD 1.x: 8 heads, GroupNorms of 32 groups, the text encoder's 77 x 768 context.
constexpr std::int64_t kHeads = 8, kGroups = 32, kContextLen = 77, kContextDim = 768;

// One block on inputs and weights made once.
struct Case {
  std::string name;
  std::string what;  // for the title
  std::function<Status(Stream&, models::Workspace&, BlockMode)> run;
};

Result<Tensor> filled(const Shape& shape, std::uint64_t seed) {
  TESSERA_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(DType::f32, shape));
  bench::fill_tensor(t, seed);
  return t;
}

Result<Case> resnet_case(std::int64_t in, std::int64_t out, std::int64_t side) {
  TESSERA_ASSIGN_OR_RETURN(models::ResnetBlockWeights w, models::random_resnet_block(in, out, kGroups, 1));
  TESSERA_ASSIGN_OR_RETURN(Tensor x, filled({1, side, side, in}, 2));
  TESSERA_ASSIGN_OR_RETURN(Tensor temb, filled({1, out}, 3));
  TESSERA_ASSIGN_OR_RETURN(Tensor y, Tensor::empty(DType::f32, {1, side, side, out}));
  return Case{in == out ? fmt::format("resnet_c{}_{}x{}", in, side, side)
                        : fmt::format("resnet_c{}to{}_{}x{}", in, out, side, side),
              fmt::format("resnet block {} -> {} channels{}, [1, {}, {}, .], time embedding", in, out,
                          in == out ? "" : " (1x1 skip conv)", side, side),
              [w = std::move(w), x, temb, y](Stream& s, models::Workspace& ws, BlockMode mode) {
                return models::resnet_block(s, w, x, temb, y, ws, mode);
              }};
}

Result<Case> transformer_case(std::int64_t channels, std::int64_t side) {
  TESSERA_ASSIGN_OR_RETURN(models::TransformerBlockWeights w,
                           models::random_transformer_block(channels, kHeads, kContextDim, kGroups, 1));
  TESSERA_ASSIGN_OR_RETURN(Tensor x, filled({1, side, side, channels}, 2));
  TESSERA_ASSIGN_OR_RETURN(Tensor context, filled({1, kContextLen, kContextDim}, 3));
  TESSERA_ASSIGN_OR_RETURN(Tensor y, Tensor::empty(DType::f32, x.shape()));
  return Case{fmt::format("transformer_c{}_{}x{}_ctx{}x{}", channels, side, side, kContextLen, kContextDim),
              fmt::format("transformer block, {} channels in {} heads, {} tokens, context {} x {}", channels, kHeads,
                          side * side, kContextLen, kContextDim),
              [w = std::move(w), x, context, y](Stream& s, models::Workspace& ws, BlockMode mode) {
                return models::transformer_block(s, w, x, context, y, ws, mode);
              }};
}

Result<Case> upsample_case(std::int64_t channels, std::int64_t side) {
  TESSERA_ASSIGN_OR_RETURN(models::ConvLayer conv, models::random_conv(channels, channels, 3, 1));
  TESSERA_ASSIGN_OR_RETURN(Tensor x, filled({1, side, side, channels}, 2));
  TESSERA_ASSIGN_OR_RETURN(Tensor y, Tensor::empty(DType::f32, {1, 2 * side, 2 * side, channels}));
  return Case{fmt::format("upsample_c{}_{}x{}to{}x{}", channels, side, side, 2 * side, 2 * side),
              fmt::format("upsample block: nearest x2 + conv 3x3, {} channels, {} x {} -> {} x {}", channels, side,
                          side, 2 * side, 2 * side),
              [conv = std::move(conv), x, y](Stream& s, models::Workspace& ws, BlockMode mode) {
                return models::upsample(s, conv, x, y, ws, mode);
              }};
}

// SD's VAE decoder mid block at the latent's size: resnet, one attention
// head of all channels, resnet.
Result<Case> vae_mid_case(std::int64_t channels, std::int64_t side) {
  TESSERA_ASSIGN_OR_RETURN(models::VaeMidBlockWeights w, models::random_vae_mid_block(channels, kGroups, 1));
  TESSERA_ASSIGN_OR_RETURN(Tensor x, filled({1, side, side, channels}, 2));
  TESSERA_ASSIGN_OR_RETURN(Tensor y, Tensor::empty(DType::f32, x.shape()));
  return Case{fmt::format("vae_mid_c{}_{}x{}", channels, side, side),
              fmt::format("VAE decoder mid block: resnet, attention in one head of {}, resnet, [1, {}, {}, .]", channels,
                          side, side),
              [w = std::move(w), x, y](Stream& s, models::Workspace& ws, BlockMode mode) {
                return models::vae_mid_block(s, w, x, y, ws, mode);
              }};
}

// What one call runs, as the profiler saw it.
struct CallProfile {
  std::int64_t flops = 0;
  std::string ops;  // "9 ops: group_norm x2, conv2d x3, ..."
};

Result<CallProfile> profile_call(Context& ctx, const std::function<Status()>& call) {
  Profiler& profiler = ctx.profiler();
  profiler.start();
  const Status status = call();
  profiler.stop();
  TESSERA_RETURN_IF_ERROR(status);
  const std::vector<OpRecord> records = profiler.records();
  CallProfile p;
  std::vector<std::pair<std::string_view, int>> counts;  // by op, in the order they first ran
  for (const OpRecord& r : records) {
    p.flops += r.flops;
    const auto it = std::ranges::find(counts, r.op, &std::pair<std::string_view, int>::first);
    if (it == counts.end())
      counts.emplace_back(r.op, 1);
    else
      ++it->second;
  }
  std::vector<std::string> parts;
  for (const auto& [op, n] : counts) parts.push_back(n > 1 ? fmt::format("{} x{}", op, n) : std::string(op));
  p.ops = fmt::format("{} ops: {}", records.size(), fmt::join(parts, ", "));
  return p;
}

void run_case(bench::Contexts& contexts, const Case& c, const DiffusionBenchOptions& opt,
              const bench::MeasureOptions& measure) {
  for (int t : opt.threads) {
    const std::string where = fmt::format("diffusion {} {}", c.name, threads_label(t));
    Context& ctx = contexts.at(t);
    Stream stream(ctx);
    models::Workspace fused_ws, unfused_ws;
    // One profiled call of each: the ops each mode runs, the block's FLOPs, the workspaces sized.
    const Result<CallProfile> fused = profile_call(ctx, [&] { return c.run(stream, fused_ws, BlockMode::fused); });
    const Result<CallProfile> unfused =
        profile_call(ctx, [&] { return c.run(stream, unfused_ws, BlockMode::unfused); });
    if (!fused.ok() || !unfused.ok()) {
      fmt::print(stderr, "{}: skipped: {}\n", where, (fused.ok() ? unfused : fused).status().to_string());
      continue;
    }
    // The block's FLOPs, credited to both so that GFLOP/s compares times: the smaller count (the fused one
    // includes heads zero-padded for the flash kernels, the unfused one its elementwise ops).
    const double flops = double(std::min(fused->flops, unfused->flops));
    std::vector<bench::Contender> contenders{
        {.impl = "tessera", .call = [&] { return c.run(stream, fused_ws, BlockMode::fused); }},
        {.impl = "tessera_unfused", .call = [&] { return c.run(stream, unfused_ws, BlockMode::unfused); }}};
    bench::measure_interleaved(contenders, measure);
    std::vector<Row> rows;
    for (const bench::Contender& result : contenders) {
      if (!result.error.ok()) {
        fmt::print(stderr, "{}: {} failed: {}\n", where, result.impl, result.error.to_string());
        continue;
      }
      Row r{.suite = "diffusion", .case_name = c.name, .dtype = "f32", .threads = t, .impl = result.impl};
      r.median_ms = bench::median(result.ms);
      r.best_ms = bench::best(result.ms);
      r.gflops = flops / r.median_ms / 1e6;
      r.kernel = result.impl == "tessera" ? fused->ops : unfused->ops;
      rows.push_back(std::move(r));
    }
    bench::add_ratio(rows, "tessera", [](std::string_view impl) { return impl == "tessera_unfused"; });
    bench::add_ratio(rows, "tessera_unfused", [](std::string_view impl) { return impl == "tessera"; });
    bench::print_rows(
        fmt::format("{} | f32 | workspace {:.1f} MiB fused, {:.1f} MiB unfused | {}", c.what,
                    double(fused_ws.bytes()) / (1 << 20), double(unfused_ws.bytes()) / (1 << 20), threads_label(t)),
        rows, opt.json);
  }
}

void print_header(const bench::MeasureOptions& measure, Context& ctx) {
  const hw::Info& hw = hw::info();
  fmt::print("tessera bench diffusion: {}, {} cores, L3 {} MiB, isa {}\n", hw.cpu_name, hw.cores, hw.l3_bytes >> 20,
             hw::to_string(ctx.isa()));
  fmt::print(
      "tessera: the block's fused ops (GroupNorm + SiLU in one pass; bias, time embedding and residual in the "
      "conv / linear epilogues; flash attention; GEGLU in one pass; the upsample read inside the conv)\n");
  fmt::print(
      "tessera_unfused: the same math one op at a time (group_norm, silu, conv / linear, add bias, add "
      "residual; matmul + softmax + matmul with the scores in memory; gelu, mul; resize, conv)\n");
  fmt::print(
      "f32 NHWC, batch 1; median and best of {} repeats after warm-up, the two interleaved; GFLOP/s: the "
      "block's FLOPs for both; target: tessera >= 1.3x tessera_unfused (its vs-best-peer column)\n",
      measure.repeats);
}

void run_bench_diffusion(DiffusionBenchOptions opt) {
  std::ranges::sort(opt.threads);
  opt.threads.erase(std::unique(opt.threads.begin(), opt.threads.end()), opt.threads.end());
  const std::vector<std::pair<std::string, std::function<Result<Case>()>>> makers{
      {"resnet_c320_64x64", [] { return resnet_case(320, 320, 64); }},
      {"resnet_c320to640_32x32", [] { return resnet_case(320, 640, 32); }},
      {"transformer_c320_64x64_ctx77x768", [] { return transformer_case(320, 64); }},
      {"upsample_c640_32x32to64x64", [] { return upsample_case(640, 32); }},
      {"vae_mid_c512_64x64", [] { return vae_mid_case(512, 64); }},
  };
  const auto selected = [&](const std::string& name) {
    return opt.cases.empty() || std::ranges::any_of(opt.cases, [&](const std::string& part) {
             return name.find(part) != std::string::npos;
           });
  };
  if (std::ranges::none_of(makers, [&](const auto& m) { return selected(m.first); })) {
    fmt::print(stderr, "no case matches --case\n");
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  bench::Contexts contexts(opt.threads);
  const bench::MeasureOptions measure{.repeats = opt.repeats};
  if (!opt.json) print_header(measure, contexts.at(opt.threads.front()));
  for (const auto& [name, make] : makers) {
    if (!selected(name)) continue;
    Result<Case> c = make();
    if (!c.ok()) {
      fmt::print(stderr, "diffusion {}: skipped: {}\n", name, c.status().to_string());
      continue;
    }
    run_case(contexts, *c, opt, measure);
  }
  if (!opt.json)
    fmt::print("\ndone in {:.0f} s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace

void add_bench_diffusion_command(CLI::App& bench) {
  static DiffusionBenchOptions opt;
  CLI::App* diffusion = bench.add_subcommand(
      "diffusion", "Diffusion UNet blocks (resnet, transformer, upsample) at SD 1.x sizes: fused against unfused");
  diffusion->add_option("--threads", opt.threads, "thread counts")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  diffusion->add_option("--case", opt.cases, "run only the cases whose name contains one of these, e.g. resnet")
      ->delimiter(',');
  diffusion->add_option("--repeats", opt.repeats, "timed repeats per implementation and case")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  diffusion->add_flag("--json", opt.json, "one JSON object per line (DESIGN.md, Benchmarks) instead of tables");
  diffusion->callback([] { run_bench_diffusion(opt); });
}

}  // namespace tessera::app
