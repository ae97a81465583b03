// `tessera profile`: `tessera demo`'s workloads under the profiler — the
// table of the top ops by time with their rates and % of this machine's
// roofline, and optionally a Chrome trace and a CSV of every op run.
#include <fmt/format.h>

#include <string>

#include "commands.hpp"
#include "demo.hpp"

namespace tessera::app {

namespace {

struct ProfileOptions {
  DemoOptions demo;
  int top = 25;
  std::string trace, csv;
};

class ProfileObserver final : public DemoObserver {
 public:
  explicit ProfileObserver(const ProfileOptions& opt) : opt_(opt) {}

  void timed_runs_begin(Context& ctx) override { ctx.profiler().start(); }

  void timed_runs_end(Context& ctx, double wall_ms) override {
    Profiler& profiler = ctx.profiler();
    profiler.stop();
    fmt::print("\nprofile of the timed runs ({} prefill runs, {} decode steps):\n\n{}", opt_.demo.iters,
               opt_.demo.decode_steps, profiler.table(opt_.top));
    double op_ms = 0;
    for (const OpSummary& o : profiler.summarize()) op_ms += o.total_ms;
    // What the ops do not cover: host dispatch, the KV-cache appends and the
    // demo's own loop. Over 5 % would mean time the profiler does not see.
    fmt::print("op times add up to {:.3f} ms of the {:.3f} ms wall time of the timed runs ({:.1f}%)\n", op_ms, wall_ms,
               100.0 * op_ms / wall_ms);
    if (!opt_.trace.empty()) report(profiler.write_chrome_trace(opt_.trace), "Chrome trace (open in ui.perfetto.dev)", opt_.trace);
    if (!opt_.csv.empty()) report(profiler.write_csv(opt_.csv), "CSV of every op run", opt_.csv);
  }

 private:
  static void report(const Status& s, std::string_view what, const std::string& path) {
    if (!s.ok()) throw std::runtime_error(s.to_string());
    fmt::print("{}: {}\n", what, path);
  }
  const ProfileOptions& opt_;
};

}  // namespace

void add_profile_command(CLI::App& app) {
  static ProfileOptions opt;
  opt.demo.iters = 3;
  opt.demo.decode_steps = 8;
  CLI::App* cmd = app.add_subcommand("profile", "Run `tessera demo`'s workloads under the profiler and print where the time goes");
  cmd->add_option("--tokens", opt.demo.tokens, "prefill length")->check(CLI::Range(1, 4096));
  cmd->add_option("--iters", opt.demo.iters, "profiled prefill runs")->check(CLI::Range(1, 1000));
  cmd->add_option("--decode", opt.demo.decode_steps, "profiled decode steps")->check(CLI::Range(0, 4096));
  cmd->add_option("--threads", opt.demo.threads, "threads (0: one per core)")->check(CLI::Range(0, 1024));
  cmd->add_option("--weights", opt.demo.weights, "projection weights: f32, bf16, int8 (W8A8) or int4")
      ->check(CLI::IsMember({"f32", "bf16", "int8", "int4"}));
  cmd->add_option("--top", opt.top, "rows of the table (0: all)")->check(CLI::Range(0, 10000));
  cmd->add_option("--trace", opt.trace, "write a Chrome trace (JSON, opens in Perfetto) to this file");
  cmd->add_option("--csv", opt.csv, "write every op run as CSV to this file");
  cmd->callback([] {
    ProfileObserver observer(opt);
    run_demo(opt.demo, &observer);
  });
}

}  // namespace tessera::app
