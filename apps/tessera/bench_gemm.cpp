// `tessera bench gemm`: Tessera's Linear — f32, bf16, int8 (W8A8) and int4
// (weight-only) — against oneDNN's matmul and OpenBLAS's sgemm / sgemv in the
// same process, their repeats interleaved, with STREAM-style bandwidth rows
// as the roofline of the weight-bound (small M) cases.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench/harness.hpp"
#include "bench/peak.hpp"
#include "bench/report.hpp"
#include "commands.hpp"
#include "tessera/core/aligned.hpp"
#include "tessera/core/hw.hpp"
#include "tessera/core/tensor.hpp"
#include "tessera/ops/matmul.hpp"
#include "tessera/runtime/context.hpp"
#include "tessera/runtime/stream.hpp"
#if TESSERA_HAVE_ONEDNN
#include "bench/peers_onednn.hpp"
#endif
#if TESSERA_HAVE_OPENBLAS
#include "bench/peers_openblas.hpp"
#endif

namespace tessera::app {

namespace {

using bench::Contexts;
using bench::fill_tensor;
using bench::GemmImpl;
using bench::GemmType;
using bench::Row;
using bench::threads_label;

struct GemmOptions {
  std::vector<int> threads{1, 2};
  std::vector<std::string> dtypes{"f32", "bf16", "int8", "int4"};
  std::vector<std::int64_t> ms{1, 16, 128, 512};
  int repeats = 5;
  bool quick = false;
  bool json = false;
};

// Tessera's Linear on weights packed (f32, bf16) or quantized (int8, int4)
// from the case's f32 weights [K, N]; with `fused`, the epilogue of an FFN
// projection rides along: c = silu(a x w + bias) + residual. With
// `quantize_a`, A is quantized per token (W8A8, W4A8); else the weights
// alone are quantized (weight-only int8, int4).
class TesseraGemm final : public GemmImpl {
  using WeightsPtr = ops::WeightsPtr;

 public:
  TesseraGemm(Contexts& contexts, GemmType type, Tensor w_kn, bool fused, bool quantize_a)
      : contexts_(contexts), type_(type), w_kn_(std::move(w_kn)), fused_(fused), quantize_a_(quantize_a) {}

  Status prepare(int threads, std::int64_t m, std::int64_t cold_bytes) override {
    plans_.clear();
    if (weights_.empty()) {
      TESSERA_ASSIGN_OR_RETURN(WeightsPtr w, pack());
      weights_.push_back(std::move(w));
    }
    const auto copies = static_cast<std::size_t>(cold_bytes / std::max<std::int64_t>(1, weights_.front()->bytes()) + 1);
    while (weights_.size() < copies) {
      TESSERA_ASSIGN_OR_RETURN(WeightsPtr w, pack());
      weights_.push_back(std::move(w));
    }
    weights_.resize(copies);

    Context& ctx = contexts_.at(threads);
    TESSERA_ASSIGN_OR_RETURN(a_, Tensor::empty(type_ == GemmType::bf16 ? DType::bf16 : DType::f32, {m, w_kn_.dim(0)}));
    TESSERA_ASSIGN_OR_RETURN(c_, Tensor::empty(DType::f32, {m, w_kn_.dim(1)}));
    fill_tensor(a_, 2);
    inputs_ = {a_};
    ops::Epilogue epilogue;
    if (fused_) {
      TESSERA_ASSIGN_OR_RETURN(Tensor bias, Tensor::empty(DType::f32, {w_kn_.dim(1)}));
      TESSERA_ASSIGN_OR_RETURN(Tensor residual, Tensor::empty(DType::f32, {m, w_kn_.dim(1)}));
      fill_tensor(bias, 3);
      fill_tensor(residual, 4);
      epilogue = {.activation = ops::Activation::silu, .bias = bias.desc(), .residual = residual.desc()};
      inputs_.push_back(bias);
      inputs_.push_back(residual);
    }
    const ops::LinearOptions options{.quantize_activations = quantize_a_};
    for (const WeightsPtr& w : weights_) {
      TESSERA_ASSIGN_OR_RETURN(ops::PlanPtr plan, ops::Linear::plan(ctx, a_.desc(), w, c_.desc(), epilogue, options));
      plans_.push_back(std::move(plan));
    }
    workspace_.reset(aligned_alloc_bytes(std::size_t(std::max<std::int64_t>(plans_.front()->workspace_bytes(), 1))));
    if (!workspace_) return Status::out_of_memory("tessera: workspace");
    stream_.emplace(ctx);
    next_ = 0;
    return {};
  }

  Status run() override {
    const ops::Plan& plan = *plans_[next_];
    next_ = (next_ + 1) % plans_.size();
    const Tensor out[] = {c_};
    TESSERA_RETURN_IF_ERROR(plan.run(*stream_, inputs_, out, workspace_.get()));
    return stream_->synchronize();
  }

  std::int64_t copies() const override { return std::int64_t(plans_.size()); }
  std::string kernel() const override { return plans_.empty() ? std::string() : std::string(plans_.front()->kernel()); }

 private:
  Result<WeightsPtr> pack() const { return bench::tessera_weights(type_, w_kn_); }

  Contexts& contexts_;
  GemmType type_;
  Tensor w_kn_;
  bool fused_, quantize_a_;
  std::vector<WeightsPtr> weights_;  // distinct copies, each packed on its own
  Tensor a_, c_;
  std::vector<Tensor> inputs_;  // a, [bias, residual]
  AlignedBuffer workspace_;     // W8A8: A quantized per call
  std::vector<ops::PlanPtr> plans_;  // one per weight copy
  std::optional<Stream> stream_;
  std::size_t next_ = 0;
};

// An implementation in the cases of one weight matrix and type.
struct Entry {
  std::string impl;
  GemmType weights;  // its weight type: the traffic model and the peak of its rows
  std::unique_ptr<GemmImpl> gemm;
  bool cold_only = false;
  bool warm_only = false;
};

std::vector<Entry> make_entries(Contexts& contexts, GemmType type, const Tensor& w) {
  std::vector<Entry> entries;
  const bool w8a8 = type == GemmType::int8;  // int8's main row quantizes A too, as oneDNN's does
  entries.push_back({"tessera", type, std::make_unique<TesseraGemm>(contexts, type, w, false, w8a8)});
  // No peer has an int4 GEMM; int4 is measured against Tessera's own f32
  // where it is meant to win, the weight-bound rows.
  // And W4A8: A quantized per token, integer dot products.
  if (type == GemmType::int4) {
    entries.push_back({"tessera_f32", GemmType::f32, std::make_unique<TesseraGemm>(contexts, GemmType::f32, w, false, false), true});
    entries.push_back({"tessera_w4a8", type, std::make_unique<TesseraGemm>(contexts, type, w, false, true)});
  }
  // Weight-only int8 (f32 A), against W8A8.
  if (type == GemmType::int8)
    entries.push_back({"tessera_w8", type, std::make_unique<TesseraGemm>(contexts, type, w, false, false)});
  // The fused epilogue's cost is judged where the GEMM is compute-bound.
  entries.push_back({"tessera_epilogue", type, std::make_unique<TesseraGemm>(contexts, type, w, true, w8a8), false, true});
  [[maybe_unused]] auto add_peer = [&](std::string impl, Result<std::unique_ptr<GemmImpl>> peer) {
    if (peer.ok())
      entries.push_back({std::move(impl), type, std::move(peer).value()});
    else
      fmt::print(stderr, "{} {}: not measured: {}\n", impl, bench::to_string(type), peer.status().to_string());
  };
  [[maybe_unused]] const std::int64_t k = w.dim(0), n = w.dim(1);
  [[maybe_unused]] const float* data = w.data_as<float>();
#if TESSERA_HAVE_ONEDNN
  if (type != GemmType::int4) add_peer("onednn", bench::make_onednn_gemm(type, k, n, data));
#endif
#if TESSERA_HAVE_OPENBLAS
  if (type == GemmType::f32) add_peer("openblas", bench::make_openblas_gemm(k, n, data));
#endif
  return entries;
}

// What every case of the run shares.
struct Run {
  const GemmOptions& opt;
  bench::MeasureOptions measure;
  std::int64_t cold_bytes;         // bench::cold_bytes(): what the rotating weight copies of a cold row exceed
  std::map<int, double> read_gbps;  // by threads: the roofline of the cold rows
  std::map<int, bench::Peaks> peaks;  // by threads: the roofline of the warm rows
};

// The peak a warm row is judged against: the unit its kernel computes on.
// int4: Tessera's AMX rows dequantize it to bf16 tiles (the bf16 peak), its
// f32 rows to f32 (the FMA peak); the VNNI integer row and the bf16 dot
// product row have no measured peak.
double peak_for(const bench::Peaks& p, GemmType t, std::string_view kernel) {
  const auto has = [&](std::string_view s) { return kernel.find(s) != std::string_view::npos; };
  switch (t) {
    case GemmType::bf16: return p.amx_bf16;
    case GemmType::int8: return p.amx_int8;
    case GemmType::int4:
      if (has("amx")) return p.amx_bf16;
      return has("vnni") || has("bf16_dot") ? 0.0 : p.fma_f32;
    case GemmType::f32: return p.fma_f32;
  }
  return 0;
}

struct Case {
  GemmType type;
  std::int64_t m, k, n;
  int threads;
};

// Tessera's speed against the fastest other implementation of its case; the
// fused-epilogue row against the bare GEMM (below 1: what the epilogue costs),
// W4A8 against weight-only int4 and weight-only int8 against W8A8.
void add_ratio(std::vector<Row>& rows) {
  constexpr std::string_view kVariants[] = {"tessera_epilogue", "tessera_w4a8", "tessera_w8"};
  bench::add_ratio(rows, "tessera", [&](std::string_view impl) { return std::ranges::find(kVariants, impl) == std::end(kVariants); });
  for (std::string_view variant : kVariants) bench::add_ratio(rows, variant, [](std::string_view impl) { return impl == "tessera"; });
}

void run_case(std::vector<Entry>& entries, const Case& c, const Run& run) {
  const bool cold = c.m <= bench::kMaxColdM;
  const std::string name = fmt::format("m{}_k{}_n{}", c.m, c.k, c.n);
  const std::string where = fmt::format("gemm {} {} {}", name, bench::to_string(c.type), threads_label(c.threads));
  std::vector<bench::Contender> contenders;
  std::vector<const Entry*> measured;
  for (Entry& e : entries) {
    if ((e.cold_only && !cold) || (e.warm_only && cold)) continue;
    if (Status s = e.gemm->prepare(c.threads, c.m, cold ? run.cold_bytes : 0); !s.ok()) {
      fmt::print(stderr, "{}: {} skipped: {}\n", where, e.impl, s.to_string());
      continue;
    }
    contenders.push_back(
        {.impl = e.impl, .call = [g = e.gemm.get()] { return g->run(); }, .warmup_calls = e.gemm->copies()});
    measured.push_back(&e);
  }
  if (contenders.empty()) return;
  bench::measure_interleaved(contenders, run.measure);

  std::vector<Row> rows;
  for (std::size_t i = 0; i < contenders.size(); ++i) {
    const bench::Contender& result = contenders[i];
    const Entry& e = *measured[i];
    if (!result.error.ok()) {
      fmt::print(stderr, "{}: {} skipped: {}\n", where, e.impl, result.error.to_string());
      continue;
    }
    Row r;
    r.suite = "gemm";
    r.case_name = name;
    r.dtype = bench::to_string(c.type);
    r.threads = c.threads;
    r.impl = e.impl;
    r.median_ms = bench::median(result.ms);
    r.best_ms = bench::best(result.ms);
    r.gflops = 2.0 * double(c.m) * double(c.n) * double(c.k) / r.median_ms / 1e6;
    r.weights = cold ? "cold" : "warm";
    if (cold) {
      r.gbps = double(bench::weight_bytes(e.weights, c.k, c.n)) / r.median_ms / 1e6;
      if (const auto bw = run.read_gbps.find(c.threads); bw != run.read_gbps.end())
        r.pct_read_bw = 100.0 * *r.gbps / bw->second;
    } else {
      const std::string kernel = e.gemm->kernel();
      if (const auto pk = run.peaks.find(c.threads); pk != run.peaks.end() && peak_for(pk->second, e.weights, kernel) > 0)
        r.pct_peak = 100.0 * *r.gflops / peak_for(pk->second, e.weights, kernel);
    }
    r.kernel = e.gemm->kernel();
    rows.push_back(std::move(r));
  }
  add_ratio(rows);
  const std::string weights =
      cold ? fmt::format("cold weights (rotating copies > {} MiB)", run.cold_bytes >> 20) : std::string("warm weights");
  bench::print_rows(fmt::format("{} | {}", where, weights), rows, run.opt.json);
}

void print_header(const Run& run, Context& ctx) {
  const hw::Info& hw = hw::info();
  fmt::print("tessera bench gemm: {}, {} cores, L3 {} MiB, isa {}\n", hw.cpu_name, hw.cores, hw.l3_bytes >> 20,
             hw::to_string(ctx.isa()));
#if TESSERA_HAVE_ONEDNN
  fmt::print("peer: {}\n", bench::onednn_version());
  fmt::print("     int8: Tessera quantizes A inside the timed call (W8A8; tessera_w8: weight-only, f32 A); oneDNN is given u8 A "
             "ready-made\n");
#endif
#if TESSERA_HAVE_OPENBLAS
  fmt::print("peer: {}\n", bench::openblas_version());
#endif
  fmt::print("median and best of {} repeats (each >= {:.0f} ms of back-to-back calls) after warm-up, implementations "
             "interleaved\n",
             run.measure.repeats, run.measure.repeat_ms);
  fmt::print("M <= {}: weights cold (each implementation rotates through copies > 2x L3, at least 128 MiB), GB/s of weights; "
             "M > {}: warm, GFLOP/s\n",
             bench::kMaxColdM, bench::kMaxColdM);
  fmt::print("vs best peer: the fastest other implementation's median / Tessera's (> 1: Tessera is faster)\n");
}

void run_bench_gemm(GemmOptions opt) {
#if TESSERA_HAVE_OPENBLAS
  bench::ensure_openblas_environment();  // may re-exec this command: before anything else
#endif
  // Ascending M: the cold rows come first and share their weight copies.
  std::ranges::sort(opt.ms);
  opt.ms.erase(std::unique(opt.ms.begin(), opt.ms.end()), opt.ms.end());
  std::ranges::sort(opt.threads);
  opt.threads.erase(std::unique(opt.threads.begin(), opt.threads.end()), opt.threads.end());
  std::vector<GemmType> types;
  for (const std::string& name : opt.dtypes)
    if (const auto t = bench::parse_gemm_type(name); t && std::ranges::find(types, *t) == types.end()) types.push_back(*t);

  const auto start = std::chrono::steady_clock::now();
  Contexts contexts(opt.threads);
  Run run{.opt = opt, .measure = {.repeats = opt.repeats}, .cold_bytes = bench::cold_bytes(), .read_gbps = {}};
  if (!opt.json) print_header(run, contexts.at(opt.threads.front()));

  // The roofline first: cold rows report their share of the read bandwidth.
  for (int t : opt.threads) {
    Result<bench::Roofline> read = bench::stream_roofline(contexts.at(t), "gemm", run.cold_bytes, run.measure, opt.json);
    if (!read.ok()) {
      fmt::print(stderr, "stream {}: skipped: {}\n", threads_label(t), read.status().to_string());
      continue;
    }
    run.read_gbps[t] = read->read_gbps;
    // And the compute roofline of the warm rows, measured now, on these threads.
    const bench::Peaks pk = run.peaks[t] = bench::measure_peaks(contexts.at(t));
    std::vector<Row> peak_rows;
    const std::tuple<const char*, const char*, double> units[] = {
        {"fma_f32", "f32", pk.fma_f32}, {"amx_bf16", "bf16", pk.amx_bf16}, {"amx_int8", "int8", pk.amx_int8}};
    for (const auto& [unit, dtype, rate] : units)
      if (rate > 0) peak_rows.push_back({.suite = "gemm", .case_name = unit, .dtype = dtype, .threads = t, .impl = "peak", .gflops = rate});
    bench::print_rows(fmt::format("compute peak | {}", threads_label(t)), peak_rows, opt.json);
  }

  // Llama-7B's projections: q/k/v/o (4096 x 4096), gate/up (4096 x 11008), down (11008 x 4096).
  std::vector<std::pair<std::int64_t, std::int64_t>> shapes{{4096, 4096}, {4096, 11008}, {11008, 4096}};
  if (opt.quick) shapes.resize(1);
  for (const auto& [k, n] : shapes) {
    Result<Tensor> w = Tensor::empty(DType::f32, {k, n});
    if (!w.ok()) {
      fmt::print(stderr, "gemm k{} n{}: skipped: {}\n", k, n, w.status().to_string());
      continue;
    }
    fill_tensor(*w, 1);
    for (GemmType type : types) {
      std::vector<Entry> entries = make_entries(contexts, type, *w);
      for (std::int64_t m : opt.ms)
        for (int t : opt.threads) run_case(entries, {.type = type, .m = m, .k = k, .n = n, .threads = t}, run);
    }
  }
  if (!opt.json)
    fmt::print("\ndone in {:.0f} s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace

void add_bench_gemm_command(CLI::App& bench) {
  static GemmOptions opt;
  CLI::App* gemm = bench.add_subcommand(
      "gemm", "Linear f32 / bf16 / int8 / int4 against oneDNN and OpenBLAS, with the memory-bandwidth roofline");
  gemm->add_option("--threads", opt.threads, "thread counts")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  gemm->add_option("--dtype", opt.dtypes, "weight types")
      ->delimiter(',')
      ->check(CLI::IsMember({"f32", "bf16", "int8", "int4"}))
      ->capture_default_str();
  gemm->add_option("--m", opt.ms, "rows of A; up to 16 the weights are cold")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  gemm->add_option("--repeats", opt.repeats, "timed repeats per implementation and case")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  gemm->add_flag("--quick", opt.quick, "only K = N = 4096");
  gemm->add_flag("--json", opt.json, "one JSON object per line (DESIGN.md, Benchmarks) instead of tables");
  gemm->callback([] { run_bench_gemm(opt); });
}

}  // namespace tessera::app
