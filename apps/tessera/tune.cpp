// `tessera tune gemm`: for each GEMM shape, finds the tiling of Linear's
// kernel row that runs fastest on this machine, one parameter at a time, and
// stores it in the tuning file (TuningStore) that every Context reads when it
// is made; `--reset` empties the file.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "bench/harness.hpp"
#include "commands.hpp"
#include "tessera/core/aligned.hpp"
#include "tessera/core/compare.hpp"
#include "tessera/core/tensor.hpp"
#include "tessera/ops/matmul.hpp"
#include "tessera/runtime/context.hpp"
#include "tessera/runtime/stream.hpp"
#include "tessera/runtime/tuning.hpp"

namespace tessera::app {

namespace {

using bench::GemmType;

struct TuneOptions {
  std::vector<std::int64_t> ms, ns, ks;
  std::vector<std::string> dtypes{"f32"};
  int threads = 0;  // 0: one per core
  int repeats = 5;
  bool reset = false;
};

// Failures exit with status 1; CLI11 prints nothing more for a RuntimeError.
[[noreturn]] void fail(const Status& s) {
  fmt::print(stderr, "tessera tune: {}\n", s.to_string());
  throw CLI::RuntimeError(1);
}

// A tiling: the values of a plan's tuning_params(), in their order.
using Setting = std::vector<std::int64_t>;

Setting setting_of(const ops::Plan& plan) {
  Setting s;
  for (const ops::TuningParam& p : plan.tuning_params()) s.push_back(p.value);
  return s;
}

// "m_block=64 n_block=256 k_block=256"; the bare values when they do not match the parameters.
std::string describe(std::span<const ops::TuningParam> params, const Setting& s) {
  if (s.size() != params.size()) return fmt::format("{}", fmt::join(s, " "));
  std::string out;
  for (std::size_t i = 0; i < params.size(); ++i) out += fmt::format("{}{}={}", i ? " " : "", params[i].name, s[i]);
  return out;
}

// "[#####.....] 12/30 m_block=64" on stderr, redrawn in place; only on a terminal.
class Progress {
 public:
  explicit Progress(std::int64_t total) : total_(total), tty_(::isatty(::fileno(stderr)) == 1) {}
  ~Progress() {
    if (tty_ && done_ > 0) fmt::print(stderr, "\r\033[K");
  }
  void step(std::string_view label) {
    done_ = std::min(done_ + 1, total_);
    if (!tty_) return;
    constexpr std::int64_t kWidth = 30;
    const std::int64_t filled = total_ > 0 ? done_ * kWidth / total_ : kWidth;
    fmt::print(stderr, "\r\033[K[{}{}] {}/{} {}", std::string(std::size_t(filled), '#'),
               std::string(std::size_t(kWidth - filled), '.'), done_, total_, label);
    std::fflush(stderr);
  }

 private:
  std::int64_t total_, done_ = 0;
  bool tty_;
};

// One GEMM shape and type on one Context: its weights (copies of them when
// timed cold), A and C, and plans for any setting of its kernel row's tiling.
class GemmCase {
 public:
  static Result<std::unique_ptr<GemmCase>> make(Context& ctx, GemmType type, std::int64_t m, std::int64_t n,
                                                 std::int64_t k) {
    std::unique_ptr<GemmCase> owner(new GemmCase(ctx, type, m, n, k));  // a Stream stays where it is made
    GemmCase& c = *owner;
    TESSERA_ASSIGN_OR_RETURN(Tensor w, Tensor::empty(DType::f32, {k, n}));
    bench::fill_tensor(w, 1);
    const std::int64_t cold_bytes = m <= bench::kMaxColdM ? bench::cold_bytes() : 0;
    do {
      TESSERA_ASSIGN_OR_RETURN(ops::WeightsPtr packed, bench::tessera_weights(type, w));
      c.weights_.push_back(std::move(packed));
    } while (std::int64_t(c.weights_.size()) * c.weights_.front()->bytes() <= cold_bytes);
    TESSERA_ASSIGN_OR_RETURN(c.a_, Tensor::empty(type == GemmType::bf16 ? DType::bf16 : DType::f32, {m, k}));
    bench::fill_tensor(c.a_, 2);
    TESSERA_ASSIGN_OR_RETURN(c.c_, Tensor::empty(DType::f32, {m, n}));
    // The tuning key, and the default tiling: the one the row's tiling
    // function gives, whatever the tuning file holds for the key now.
    TESSERA_ASSIGN_OR_RETURN(ops::PlanPtr plan, c.plan_in(ctx));
    c.key_ = plan->tuning_key();
    if (c.key_.empty()) return owner;
    c.stored_ = ctx.tuning().find(c.key_);
    ctx.tuning().erase(c.key_);
    TESSERA_ASSIGN_OR_RETURN(plan, c.plan_in(ctx));
    c.kernel_ = plan->kernel();
    c.params_ = plan->tuning_params();
    c.default_ = setting_of(*plan);
    return owner;
  }

  const std::string& key() const { return key_; }
  std::string_view kernel() const { return kernel_; }
  std::span<const ops::TuningParam> params() const { return params_; }
  const Setting& default_setting() const { return default_; }
  const std::optional<Setting>& stored() const { return stored_; }
  // The plan `ctx` makes for this GEMM (on the first weight copy), as dispatch makes it.
  Result<ops::PlanPtr> plan_in(Context& ctx) const { return plan(ctx, weights_.front()); }
  std::int64_t copies() const { return std::int64_t(weights_.size()); }
  double gflops(double ms) const { return 2.0 * double(m_) * double(n_) * double(k_) / ms / 1e6; }
  // The tolerance the GEMM tests hold Linear to: bf16 where operands are
  // rounded to bf16 on their way into the tiles.
  Tolerance tolerance() const {
    return tolerance_for(type_ == GemmType::bf16 || type_ == GemmType::int4 ? DType::bf16 : DType::f32, k_);
  }

  // A plan per weight copy with tiling `s`, made as dispatch makes it: from
  // an override in the context's tuning store.
  Result<std::vector<ops::PlanPtr>> plans_for(const Setting& s) {
    ctx_.tuning().set(key_, s);
    std::vector<ops::PlanPtr> plans;
    Status status;
    for (const ops::WeightsPtr& w : weights_) {
      Result<ops::PlanPtr> made = plan(ctx_, w);
      if (!made.ok()) {
        status = made.status();
        break;
      }
      plans.push_back(std::move(made).value());
    }
    ctx_.tuning().erase(key_);
    TESSERA_RETURN_IF_ERROR(status);
    if (setting_of(*plans.front()) != s)
      return Status::internal(fmt::format("{}: the plan ignored the override {}", key_, describe(params_, s)));
    return plans;
  }

  // Runs `plan` once; returns when C is written. Its workspace (sized by
  // the tiling: W8A8's quantized A, the AMX row's bf16 A) from the pool.
  Status run(const ops::Plan& plan) {
    const Tensor in[] = {a_}, out[] = {c_};
    TESSERA_RETURN_IF_ERROR(plan.run(stream_, in, out));
    return stream_.synchronize();
  }
  // C as the plan with tiling `s` computes it.
  Result<Tensor> output(const Setting& s) {
    TESSERA_ASSIGN_OR_RETURN(std::vector<ops::PlanPtr> plans, plans_for(s));
    TESSERA_RETURN_IF_ERROR(run(*plans.front()));
    TESSERA_ASSIGN_OR_RETURN(Tensor copy, Tensor::empty(DType::f32, {m_, n_}));
    std::memcpy(copy.data(), c_.data(), std::size_t(c_.numel()) * sizeof(float));
    return copy;
  }

 private:
  GemmCase(Context& ctx, GemmType type, std::int64_t m, std::int64_t n, std::int64_t k)
      : ctx_(ctx), stream_(ctx), type_(type), m_(m), n_(n), k_(k) {}

  Result<ops::PlanPtr> plan(Context& ctx, const ops::WeightsPtr& w) const {
    return ops::Linear::plan(ctx, a_.desc(), w, c_.desc(), {}, {.quantize_activations = type_ == GemmType::int8});
  }
  Context& ctx_;
  Stream stream_;
  GemmType type_;
  std::int64_t m_, n_, k_;
  std::vector<ops::WeightsPtr> weights_;
  Tensor a_, c_;
  std::string key_;
  std::string_view kernel_;
  std::vector<ops::TuningParam> params_;
  Setting default_;
  std::optional<Setting> stored_;  // what the tuning file held for the key
};

// The median time (ms) of each setting, measured interleaved (drift hits all
// alike), each call on the next weight copy. Progress steps once per turn of
// a setting: its warm-up, then each of its repeats.
Result<std::vector<double>> measure(GemmCase& gemm, std::span<const Setting> settings,
                                    std::span<const std::string> labels, int repeats, Progress& progress) {
  std::vector<std::vector<ops::PlanPtr>> plans;
  for (const Setting& s : settings) {
    TESSERA_ASSIGN_OR_RETURN(std::vector<ops::PlanPtr> p, gemm.plans_for(s));
    plans.push_back(std::move(p));
  }
  std::vector<bench::Contender> contenders;
  std::size_t turn_of = settings.size();  // the setting whose calls ran last
  for (std::size_t i = 0; i < settings.size(); ++i) {
    auto call = [&gemm, &plans, &progress, &labels, &turn_of, i, next = std::size_t(0)]() mutable {
      if (turn_of != i) progress.step(labels[i]), turn_of = i;
      const ops::Plan& plan = *plans[i][next];
      next = (next + 1) % plans[i].size();
      return gemm.run(plan);
    };
    contenders.push_back({.impl = labels[i], .call = call, .warmup_calls = gemm.copies()});
  }
  bench::measure_interleaved(contenders, {.repeats = repeats});
  std::vector<double> medians;
  for (const bench::Contender& c : contenders) {
    if (!c.error.ok()) return Status(c.error.code(), fmt::format("{}: {}", c.impl, c.error.message()));
    medians.push_back(bench::median(c.ms));
  }
  return medians;
}

// One line of the table: a setting tried in a sweep of one parameter.
struct Tried {
  std::string param, value;
  double ms, default_ms;  // and the default's, measured in the same sweep
  bool chosen;
};

void print_table(const GemmCase& gemm, std::span<const Tried> rows) {
  fmt::print("{:<10}{:>8}{:>11}{:>10}{:>12}\n", "param", "value", "ms", "GFLOP/s", "vs default");
  for (const Tried& t : rows)
    fmt::print("{:<10}{:>8}{:>11.4f}{:>10.1f}{:>11.2f}x{}\n", t.param, t.value, t.ms, gemm.gflops(t.ms),
               t.default_ms / t.ms, t.chosen ? "  <- kept" : "");
  fmt::print("vs default: the default's median in the same sweep / this one (> 1: faster)\n");
}

// Coordinate descent, one pass: each parameter in turn tries its candidates
// with the others at the best found so far, beside the default.
Result<Setting> sweep(GemmCase& gemm, int repeats, std::vector<Tried>& table) {
  const std::span<const ops::TuningParam> params = gemm.params();
  std::int64_t total = 0;
  for (const ops::TuningParam& p : params)
    if (p.candidates.size() > 1) total += std::int64_t(p.candidates.size() + 1) * (repeats + 1);
  Progress progress(total);
  Setting best = gemm.default_setting();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const ops::TuningParam& p = params[i];
    if (p.candidates.size() < 2) continue;
    std::vector<Setting> settings{gemm.default_setting()};
    std::vector<std::string> labels{"default"};
    for (std::int64_t v : p.candidates) {
      settings.push_back(best);
      settings.back()[i] = v;
      labels.push_back(fmt::format("{}={}", p.name, v));
    }
    TESSERA_ASSIGN_OR_RETURN(const std::vector<double> ms, measure(gemm, settings, labels, repeats, progress));
    const auto fastest = std::size_t(std::min_element(ms.begin() + 1, ms.end()) - ms.begin());
    best = settings[fastest];
    if (table.empty()) table.push_back({"default", "-", ms[0], ms[0], false});
    for (std::size_t j = 1; j < settings.size(); ++j)
      table.push_back({std::string(p.name), std::to_string(p.candidates[j - 1]), ms[j], ms[0], j == fastest});
  }
  return best;
}

void tune_shape(Context& ctx, const TuneOptions& opt, GemmType type, std::int64_t m, std::int64_t n, std::int64_t k) {
  fmt::print("\ntessera tune gemm: m{} n{} k{} {}, {}\n", m, n, k, bench::to_string(type), bench::threads_label(ctx.pool().threads()));
  Result<std::unique_ptr<GemmCase>> made = GemmCase::make(ctx, type, m, n, k);
  if (!made.ok()) fail(made.status());
  GemmCase& gemm = **made;
  if (gemm.key().empty()) {
    fmt::print("its kernel row has no tiling to tune\n");
    return;
  }
  fmt::print("kernel {}, key {}\n", gemm.kernel(), gemm.key());
  fmt::print("default: {}{}\n", describe(gemm.params(), gemm.default_setting()),
             gemm.copies() > 1 ? fmt::format(" (weights cold: {} copies)", gemm.copies()) : std::string());
  if (gemm.stored()) fmt::print("the tuning file holds: {}\n", describe(gemm.params(), *gemm.stored()));

  std::vector<Tried> table;
  Result<Setting> swept = sweep(gemm, opt.repeats, table);
  if (!swept.ok()) fail(swept.status());
  const Setting best = *swept;
  if (table.empty()) {
    fmt::print("each parameter has one value for this shape: nothing to tune\n");
    return;
  }
  print_table(gemm, table);

  // The best once more against the default, side by side: what decides.
  double speedup = 1.0;
  if (best != gemm.default_setting()) {
    const Setting pair[] = {gemm.default_setting(), best};
    const std::string labels[] = {"default", "best"};
    const Result<std::vector<double>> ms = [&] {
      Progress progress(2 * (opt.repeats + 1));
      return measure(gemm, pair, labels, opt.repeats, progress);
    }();
    if (!ms.ok()) fail(ms.status());
    speedup = (*ms)[0] / (*ms)[1];
    fmt::print("best: {}: {:.4f} ms against the default's {:.4f} ms ({:.2f}x)\n", describe(gemm.params(), best),
               (*ms)[1], (*ms)[0], speedup);
    Result<Tensor> got = gemm.output(best), ref = gemm.output(gemm.default_setting());
    if (!got.ok() || !ref.ok()) fail(got.ok() ? ref.status() : got.status());
    if (std::memcmp(got->data(), ref->data(), std::size_t(got->numel()) * sizeof(float)) == 0) {
      fmt::print("output: bit-identical to the default's\n");
    } else {
      Result<Comparison> cmp = compare(*got, *ref, gemm.tolerance());
      if (!cmp.ok()) fail(cmp.status());
      fmt::print("output against the default's: {}\n", cmp->to_string());
      if (!cmp->passes(gemm.tolerance()))
        fail(Status::internal(fmt::format("{}: {} is outside the GEMM tolerance; nothing stored", gemm.key(),
                                          describe(gemm.params(), best))));
    }
  }

  // The winner is stored even when it is the default: the key then records
  // that this shape was tuned, and a later default change does not move it.
  const bool best_wins = best != gemm.default_setting() && speedup >= 1.0;
  const Setting chosen = best_wins ? best : gemm.default_setting();
  TuningStore store;
  store.set(gemm.key(), chosen);
  fmt::print("stored {}{} under {}\n", describe(gemm.params(), chosen), best_wins ? "" : " (the default: at least as fast)",
             gemm.key());
  if (Status saved = store.save(); !saved.ok()) fail(saved);
  fmt::print("tuning file: {}\n", store.path());

  // What the next run picks: a fresh context reads the file, as any program's does.
  Context fresh({.threads = ctx.pool().threads()});
  Result<ops::PlanPtr> next = gemm.plan_in(fresh);
  if (!next.ok()) fail(next.status());
  fmt::print("dispatch now uses: {} ({})\n", describe(gemm.params(), setting_of(**next)), (*next)->kernel());
}

void run_tune(const TuneOptions& opt) {
  if (opt.reset) {
    TuningStore store;
    const std::size_t entries = store.size();
    store.clear();
    if (Status saved = store.save(); !saved.ok()) fail(saved);
    fmt::print("tuning file {}: {} entries removed\n", store.path(), entries);
  }
  const bool shapes = !opt.ms.empty() || !opt.ns.empty() || !opt.ks.empty();
  if (!shapes && opt.reset) return;
  if (opt.ms.empty() || opt.ns.empty() || opt.ks.empty())
    throw CLI::ValidationError("--m, --n, --k", "expected all three (or --reset alone)");
  Context ctx({.threads = opt.threads});
  for (const std::string& name : opt.dtypes)
    for (std::int64_t m : opt.ms)
      for (std::int64_t n : opt.ns)
        for (std::int64_t k : opt.ks) tune_shape(ctx, opt, *bench::parse_gemm_type(name), m, n, k);
}

}  // namespace

void add_tune_command(CLI::App& app) {
  CLI::App* tune = app.add_subcommand("tune", "Find the fastest tiling of a kernel for given shapes and store it for dispatch");
  tune->require_subcommand(1);
  static TuneOptions opt;
  CLI::App* gemm = tune->add_subcommand(
      "gemm", "Tune Linear's kernel row for GEMM shapes (every combination of --m, --n, --k and --dtype)");
  gemm->add_option("--m", opt.ms, "rows of A")->delimiter(',')->check(CLI::Range(std::int64_t(1), std::int64_t(1) << 20));
  gemm->add_option("--n", opt.ns, "columns of W")->delimiter(',')->check(CLI::Range(std::int64_t(1), std::int64_t(1) << 20));
  gemm->add_option("--k", opt.ks, "rows of W (int4: a multiple of 128)")
      ->delimiter(',')
      ->check(CLI::Range(std::int64_t(1), std::int64_t(1) << 20));
  gemm->add_option("--dtype", opt.dtypes, "weight types, as `bench gemm` runs them")
      ->delimiter(',')
      ->check(CLI::IsMember({"f32", "bf16", "int8", "int4"}))
      ->capture_default_str();
  gemm->add_option("--threads", opt.threads, "threads (default: one per core); the setting is stored for this count")
      ->check(CLI::Range(1, 1024));
  gemm->add_option("--repeats", opt.repeats, "timed repeats per setting (the median counts)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  gemm->add_flag("--reset", opt.reset, "first remove every stored setting from the tuning file");
  gemm->callback([] { run_tune(opt); });
}

}  // namespace tessera::app
