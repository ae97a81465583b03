#pragma once
// The rows `tessera bench` prints: the fields DESIGN.md ("Benchmarks") fixes
// for every suite, plus a few that say how a row compares, printed either as
// a table per case or as one JSON object per line.
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace tessera::app::bench {

struct Row {
  // The fields every suite shares.
  std::string suite;
  std::string case_name;  // "case" in JSON
  std::string dtype;
  int threads = 1;
  std::string impl;
  double median_ms = 0, best_ms = 0;
  std::optional<double> gflops, gbps;  // from the FLOP / traffic model; null where meaningless

  // Additions (null or absent where they do not apply).
  std::string weights;                       // GEMM weights, attention's KV cache: "cold" (streamed from DRAM) or "warm"
  std::optional<double> pct_peak;            // % of the compute peak at these threads
  std::optional<double> pct_read_bw;         // % of the read bandwidth measured in the same run
  std::optional<double> pct_triad_bw;        // % of the triad bandwidth measured in the same run (memory-bound ops)
  // best_peer's median / this row's (> 1: this row is faster). Tessera rows:
  // against the fastest peer; other rows (a peer, a variant): against "tessera".
  std::optional<double> ratio_vs_best_peer;
  std::string best_peer;                     // that row's impl
  std::string kernel;                        // what ran: Tessera's kernel row, oneDNN's implementation, ...
};

// Rows of one case: sets the row of `impl` against the fastest (by median)
// of the rows whose impl `is_peer` accepts (ratio_vs_best_peer, best_peer);
// nothing when either is missing.
void add_ratio(std::span<Row> rows, std::string_view impl, const std::function<bool(std::string_view)>& is_peer);

// One case: a table under `title`, or (json) one JSON line per row and no title.
void print_rows(std::string_view title, std::span<const Row> rows, bool json);

}  // namespace tessera::app::bench
