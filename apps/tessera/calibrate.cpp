// `tessera calibrate`: measures this machine's roofline (memory bandwidth on
// 1 and on all threads, FMA and AMX peaks on all threads) and caches it for
// the profiler and the benches.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "bench/harness.hpp"
#include "bench/peak.hpp"
#include "commands.hpp"
#include "tessera/core/hw.hpp"
#include "tessera/runtime/calibration.hpp"

namespace tessera::app {

namespace {

struct CalibrateOptions {
  int threads = 0;  // 0: one per core
  bool show = false;
};

void print_calibration(const Calibration& c) {
  auto peak = [](double rate) { return rate > 0 ? fmt::format("{:.0f}", rate) : std::string("-"); };
  fmt::print("cpu {}\n", c.cpu_name);
  fmt::print("{:<18}{:>10}{:>14}\n", "", bench::threads_label(1), bench::threads_label(c.threads));
  fmt::print("{:<18}{:>10.1f}{:>14.1f}\n", "read GB/s", c.read_gbps_1t, c.read_gbps_all);
  fmt::print("{:<18}{:>10.1f}{:>14.1f}\n", "triad GB/s", c.triad_gbps_1t, c.triad_gbps_all);
  fmt::print("{:<18}{:>10}{:>14}\n", "fma f32 GFLOP/s", "", peak(c.fma_f32_gflops));
  fmt::print("{:<18}{:>10}{:>14}\n", "amx bf16 GFLOP/s", "", peak(c.amx_bf16_gflops));
  fmt::print("{:<18}{:>10}{:>14}\n", "amx int8 GOP/s", "", peak(c.amx_int8_gops));
}

Result<Calibration> measure(int threads) {
  const hw::Info& hw = hw::info();
  const int all = threads > 0 ? threads : hw.cores;
  const std::int64_t array_bytes = bench::cold_bytes();  // as `bench membound` streams them
  fmt::print("tessera calibrate: {}, 1 and {} threads, arrays of {} MiB\n", hw.cpu_name, all, array_bytes >> 20);
  bench::Contexts contexts({1, all});
  const bench::MeasureOptions options;
  auto stream = [&](int t) { return bench::stream_roofline(contexts.at(t), "calibrate", array_bytes, options, false); };
  TESSERA_ASSIGN_OR_RETURN(const bench::Roofline one, stream(1));
  TESSERA_ASSIGN_OR_RETURN(const bench::Roofline every, stream(all));
  // A peak is what the unit can do: the best of a few probes, since a
  // shared machine's neighbours take some of them (2x spread seen here).
  bench::Peaks peaks;
  for (int probe = 0; probe < 5; ++probe) {
    const bench::Peaks p = bench::measure_peaks(contexts.at(all));
    peaks = {std::max(peaks.fma_f32, p.fma_f32), std::max(peaks.amx_bf16, p.amx_bf16), std::max(peaks.amx_int8, p.amx_int8)};
  }
  return Calibration{.cpu_name = hw.cpu_name,
                     .threads = all,
                     .read_gbps_1t = one.read_gbps,
                     .read_gbps_all = every.read_gbps,
                     .triad_gbps_1t = one.triad_gbps,
                     .triad_gbps_all = every.triad_gbps,
                     .fma_f32_gflops = peaks.fma_f32,
                     .amx_bf16_gflops = peaks.amx_bf16,
                     .amx_int8_gops = peaks.amx_int8};
}

// Failures exit with status 1; CLI11 prints nothing more for a RuntimeError.
[[noreturn]] void fail(const Status& s) {
  fmt::print(stderr, "tessera calibrate: {}\n", s.to_string());
  throw CLI::RuntimeError(1);
}

void show_cached(const std::string& path) {
  Result<Calibration> cached = load_calibration(path);
  if (cached.status().code() == StatusCode::unsupported) {
    fmt::print("no calibration of this machine is cached: {}\n", cached.status().message());
    return;
  }
  if (!cached.ok()) fail(cached.status());
  print_calibration(*cached);
  fmt::print("cached in {}\n", path);
}

void run_calibrate(const CalibrateOptions& opt) {
  const std::string path = calibration_path();
  if (opt.show) return show_cached(path);
  Result<Calibration> measured = measure(opt.threads);
  if (!measured.ok()) fail(measured.status());
  fmt::print("\n");
  print_calibration(*measured);
  if (Status saved = save_calibration(*measured, path); !saved.ok()) fail(saved);
  fmt::print("saved to {}\n", path);
}

}  // namespace

void add_calibrate_command(CLI::App& app) {
  static CalibrateOptions opt;
  CLI::App* calibrate = app.add_subcommand(
      "calibrate", "Measure memory bandwidth (1 and all threads), FMA and AMX peaks, and cache them for the profiler "
                   "and the benches");
  CLI::Option* threads =
      calibrate->add_option("--threads", opt.threads, "threads of the all-threads rows (default: one per core)")
          ->check(CLI::Range(1, 1024));
  calibrate->add_flag("--show", opt.show, "print the cached calibration instead of measuring")->excludes(threads);
  calibrate->callback([] { run_calibrate(opt); });
}

}  // namespace tessera::app
