#include "bench/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

namespace tessera::app::bench {

namespace {

// Four significant digits: more would be noise (repeats drift by percents), and it keeps lines short.
double round4(double x) {
  if (x == 0 || !std::isfinite(x)) return x;
  const double scale = std::pow(10.0, 3 - std::floor(std::log10(std::fabs(x))));
  return std::round(x * scale) / scale;
}

nlohmann::json number(std::optional<double> v) { return v ? nlohmann::json(round4(*v)) : nlohmann::json(nullptr); }
nlohmann::json text(const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); }

std::string json_line(const Row& r) {
  // ordered_json keeps DESIGN.md's field order, so the lines read well too.
  nlohmann::ordered_json j;
  j["suite"] = r.suite;
  j["case"] = r.case_name;
  j["dtype"] = r.dtype;
  j["threads"] = r.threads;
  j["impl"] = r.impl;
  j["median_ms"] = round4(r.median_ms);
  j["best_ms"] = round4(r.best_ms);
  j["gflops"] = number(r.gflops);
  j["gbps"] = number(r.gbps);
  j["weights"] = text(r.weights);
  j["pct_peak"] = number(r.pct_peak);
  j["pct_read_bw"] = number(r.pct_read_bw);
  j["pct_triad_bw"] = number(r.pct_triad_bw);
  j["ratio_vs_best_peer"] = number(r.ratio_vs_best_peer);
  j["best_peer"] = text(r.best_peer);
  j["kernel"] = text(r.kernel);
  return j.dump();
}

std::string fixed(std::optional<double> v, int decimals) { return v ? fmt::format("{:.{}f}", *v, decimals) : "-"; }

std::string roofline(const Row& r) {
  if (r.pct_read_bw) return fmt::format("{:.1f}% read", *r.pct_read_bw);
  if (r.pct_triad_bw) return fmt::format("{:.1f}% triad", *r.pct_triad_bw);
  if (r.pct_peak) return fmt::format("{:.1f}% peak", *r.pct_peak);
  return "-";
}

}  // namespace

void add_ratio(std::span<Row> rows, std::string_view impl, const std::function<bool(std::string_view)>& is_peer) {
  const auto row = std::ranges::find_if(rows, [&](const Row& r) { return r.impl == impl; });
  const Row* peer = nullptr;
  for (const Row& r : rows)
    if (r.impl != impl && is_peer(r.impl) && (!peer || r.median_ms < peer->median_ms)) peer = &r;
  if (row == rows.end() || !peer) return;
  row->ratio_vs_best_peer = peer->median_ms / row->median_ms;
  row->best_peer = peer->impl;
}

void print_rows(std::string_view title, std::span<const Row> rows, bool json) {
  if (json) {
    for (const Row& r : rows) fmt::print("{}\n", json_line(r));
    std::fflush(stdout);  // a long run shows its lines as they come, also through a pipe
    return;
  }
  // A case's rows differ by impl; the stream rows (one impl) differ by case.
  const bool by_case = rows.size() > 1 && rows.front().impl == rows.back().impl;
  const auto label = [&](const Row& r) -> const std::string& { return by_case ? r.case_name : r.impl; };
  std::size_t width = 14, ratio_width = 20;
  std::vector<std::string> ratios;
  for (const Row& r : rows) {
    ratios.push_back(r.ratio_vs_best_peer ? fmt::format("{:.2f}x {}", *r.ratio_vs_best_peer, r.best_peer) : "-");
    width = std::max(width, label(r).size());
    ratio_width = std::max(ratio_width, ratios.back().size());
  }
  fmt::print("\n== {}\n", title);
  fmt::print("{:<{}} {:>10} {:>10} {:>9} {:>8} {:>12} {:>{}}   {}\n", by_case ? "case" : "impl", width, "median_ms",
             "best_ms", "GFLOP/s", "GB/s", "roofline", "vs best peer", ratio_width, "kernel");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    fmt::print("{:<{}} {:>10.3f} {:>10.3f} {:>9} {:>8} {:>12} {:>{}}   {}\n", label(r), width, r.median_ms, r.best_ms,
               fixed(r.gflops, 1), fixed(r.gbps, 2), roofline(r), ratios[i], ratio_width, r.kernel);
  }
  std::fflush(stdout);
}

}  // namespace tessera::app::bench
