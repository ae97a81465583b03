#pragma once
// Profiler: one record per op run while it is on — the op, the kernel row,
// shapes, dtype, stream, host time (plan lookup + checks + enqueue) and run
// time, and the plan's traffic model (bytes moved, FLOPs) — and the reports
// built from them: a table of the top ops by time with achieved GB/s,
// GFLOP/s and % of this machine's roofline (from `tessera calibrate`), CSV,
// and a Chrome trace (Perfetto) with one track per stream.
//
// Off, it costs one relaxed load per op. On, a record is a few clock reads
// and an append under a mutex.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/shape.hpp"
#include "tessera/core/status.hpp"
#include "tessera/runtime/calibration.hpp"
#include "tessera/runtime/memory_pool.hpp"
#include "tessera/runtime/plan_cache.hpp"

namespace tessera {

struct OpRecord {
  static constexpr int kMaxShapes = 4;
  std::string_view op, kernel;  // static strings: the op's and the kernel row's names
  DType dtype = DType::f32;     // of the first input
  std::array<Shape, kMaxShapes> shapes;  // the first inputs', then the first output's
  int shape_count = 0;
  int stream = 0;   // Stream::id()
  int threads = 1;  // the stream's pool size
  std::int64_t bytes = 0, flops = 0;
  // Nanoseconds since Profiler::start(): the host began, the op began and ended running.
  std::int64_t host_begin_ns = 0, host_end_ns = 0, run_begin_ns = 0, run_end_ns = 0;

  std::int64_t host_ns() const { return host_end_ns - host_begin_ns; }
  std::int64_t run_ns() const { return run_end_ns - run_begin_ns; }
  std::string shapes_string() const;  // "[128, 2048] [2048] -> [128, 2048]"
};

// One line of the table: the records of one (op, kernel, dtype, shapes).
struct OpSummary {
  std::string op, kernel, dtype, shapes;
  std::int64_t calls = 0;
  double total_ms = 0, time_pct = 0, mean_us = 0, host_us = 0;  // host_us: mean per call
  double gbps = 0, gflops = 0;
  std::optional<double> roofline_pct;  // attainable time / measured time; absent without calibration
};

class Profiler {
 public:
  using Clock = std::chrono::steady_clock;

  Profiler(const MemoryPool& memory, PlanCache& plans) : memory_(&memory), plans_(&plans) {}

  // Clears the records and starts recording; loads the calibration for the roofline.
  void start();
  void stop() { on_.store(false, std::memory_order_relaxed); }
  bool enabled() const { return on_.load(std::memory_order_relaxed); }

  // Nanoseconds since start() of a clock reading.
  std::int64_t since_start(Clock::time_point t) const { return std::chrono::duration_cast<std::chrono::nanoseconds>(t - epoch_).count(); }
  void add(const OpRecord& r);
  std::vector<OpRecord> records() const;

  // Per (op, kernel, dtype, shapes), most time first; all when top_n <= 0.
  std::vector<OpSummary> summarize(int top_n = 0) const;
  // The table of the top ops and a summary: wall time from the first op to
  // the last, op time, memory pool peak, plan-cache hit rate since start().
  std::string table(int top_n = 20) const;
  Status write_csv(const std::string& path) const;
  Status write_chrome_trace(const std::string& path) const;
  // The calibration the roofline comes from (absent: `tessera calibrate` was never run here).
  const std::optional<Calibration>& calibration() const { return calibration_; }

 private:
  std::optional<double> roofline_pct(const OpRecord& r) const;
  std::vector<OpSummary> summarize(const std::vector<OpRecord>& records, int top_n = 0) const;

  const MemoryPool* memory_;
  PlanCache* plans_;
  std::atomic<bool> on_{false};
  Clock::time_point epoch_;
  PlanCache::Stats plans_at_start_;
  std::optional<Calibration> calibration_;
  mutable std::mutex mutex_;
  std::vector<OpRecord> records_;
};

}  // namespace tessera
