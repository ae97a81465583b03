#include "tessera/runtime/profiler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <tuple>

namespace tessera {

namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

Result<File> open_for_writing(const std::string& path) {
  File f(std::fopen(path.c_str(), "w"));
  if (!f) return Status::invalid_argument(fmt::format("path: cannot open '{}' for writing", path));
  return f;
}

Status finish(File f, const std::string& path) {
  if (std::ferror(f.get()) || std::fclose(f.release()) != 0)
    return Status::internal(fmt::format("path: writing '{}' failed", path));
  return {};
}

// A string as a JSON string literal; the names written are plain ASCII.
std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + '"';
}

}  // namespace

std::string OpRecord::shapes_string() const {
  std::string s;
  for (int i = 0; i < shape_count; ++i) {
    if (i > 0) s += i == shape_count - 1 ? " -> " : " ";
    s += shapes[std::size_t(i)].to_string();
  }
  return s;
}

void Profiler::start() {
  std::lock_guard lock(mutex_);
  records_.clear();
  plans_at_start_ = plans_->stats();
  Result<Calibration> c = load_calibration();
  calibration_ = c.ok() ? std::optional(*c) : std::nullopt;
  epoch_ = Clock::now();
  on_.store(true, std::memory_order_relaxed);
}

void Profiler::add(const OpRecord& r) {
  std::lock_guard lock(mutex_);
  records_.push_back(r);
}

std::vector<OpRecord> Profiler::records() const {
  std::lock_guard lock(mutex_);
  return records_;
}

// The time the op would take at this machine's limits — its bytes at the
// triad bandwidth of its thread count, or its FLOPs at the peak of the unit
// its kernel row uses, whichever is longer — over the time it took.
std::optional<double> Profiler::roofline_pct(const OpRecord& r) const {
  if (!calibration_ || r.run_ns() <= 0) return std::nullopt;
  const Calibration& c = *calibration_;
  const double share = c.threads > 0 ? std::min(1.0, double(r.threads) / c.threads) : 1.0;
  const double bandwidth = r.threads <= 1 ? c.triad_gbps_1t : c.triad_gbps_all;
  const bool amx = r.kernel.find("amx") != std::string_view::npos;
  const bool int8 = r.kernel.find("int8") != std::string_view::npos;
  const double peak = share * (amx ? (int8 ? c.amx_int8_gops : c.amx_bf16_gflops) : c.fma_f32_gflops);
  double attainable_ns = 0;
  if (bandwidth > 0) attainable_ns = double(r.bytes) / bandwidth;  // bytes / (GB/s) = ns
  if (peak > 0) attainable_ns = std::max(attainable_ns, double(r.flops) / peak);
  if (attainable_ns <= 0) return std::nullopt;
  return 100.0 * attainable_ns / double(r.run_ns());
}

std::vector<OpSummary> Profiler::summarize(int top_n) const { return summarize(records(), top_n); }

std::vector<OpSummary> Profiler::summarize(const std::vector<OpRecord>& records, int top_n) const {
  struct Sum {
    OpSummary s;
    std::int64_t run_ns = 0, host_ns = 0, bytes = 0, flops = 0;
    double roofline_ns = 0;  // sum of attainable times, when every record has one
    bool roofline = true;
  };
  std::map<std::tuple<std::string_view, std::string_view, DType, std::string>, Sum> groups;
  std::int64_t total_ns = 0;
  for (const OpRecord& r : records) {
    Sum& g = groups[{r.op, r.kernel, r.dtype, r.shapes_string()}];
    if (g.s.calls == 0) g.s = {std::string(r.op), std::string(r.kernel), std::string(to_string(r.dtype)), r.shapes_string()};
    ++g.s.calls;
    g.run_ns += r.run_ns();
    g.host_ns += r.host_ns();
    g.bytes += r.bytes;
    g.flops += r.flops;
    const std::optional<double> pct = roofline_pct(r);
    if (pct) g.roofline_ns += *pct / 100.0 * double(r.run_ns());
    g.roofline = g.roofline && pct.has_value();
    total_ns += r.run_ns();
  }
  std::vector<OpSummary> out;
  for (auto& [key, g] : groups) {
    OpSummary s = std::move(g.s);
    s.total_ms = g.run_ns * 1e-6;
    s.time_pct = total_ns > 0 ? 100.0 * double(g.run_ns) / double(total_ns) : 0.0;
    s.mean_us = g.run_ns * 1e-3 / double(s.calls);
    s.host_us = g.host_ns * 1e-3 / double(s.calls);
    s.gbps = g.run_ns > 0 ? double(g.bytes) / double(g.run_ns) : 0.0;
    s.gflops = g.run_ns > 0 ? double(g.flops) / double(g.run_ns) : 0.0;
    if (g.roofline && g.run_ns > 0) s.roofline_pct = 100.0 * g.roofline_ns / double(g.run_ns);
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(), [](const OpSummary& a, const OpSummary& b) { return a.total_ms > b.total_ms; });
  if (top_n > 0 && out.size() > std::size_t(top_n)) out.resize(std::size_t(top_n));
  return out;
}

std::string Profiler::table(int top_n) const {
  const std::vector<OpRecord> records = this->records();
  const std::vector<OpSummary> all = summarize(records);
  const std::size_t shown = top_n > 0 ? std::min(all.size(), std::size_t(top_n)) : all.size();
  std::size_t op_w = 2, kernel_w = 6, shapes_w = 6;
  for (std::size_t i = 0; i < shown; ++i)
    op_w = std::max(op_w, all[i].op.size()), kernel_w = std::max(kernel_w, all[i].kernel.size()),
    shapes_w = std::max(shapes_w, all[i].shapes.size());
  std::string s = fmt::format("{:<{}} {:<{}} {:<5} {:<{}} {:>6} {:>9} {:>6} {:>9} {:>8} {:>9} {:>9} {:>8}\n", "op", op_w,
                              "kernel", kernel_w, "dtype", "shapes", shapes_w, "calls", "total ms", "time%", "mean us",
                              "GB/s", "GFLOP/s", "roofline%", "host us");
  double op_ms = 0;
  for (const OpSummary& o : all) op_ms += o.total_ms;
  for (std::size_t i = 0; i < shown; ++i) {
    const OpSummary& o = all[i];
    s += fmt::format("{:<{}} {:<{}} {:<5} {:<{}} {:>6} {:>9.3f} {:>6.1f} {:>9.1f} {:>8.1f} {:>9.1f} {:>9} {:>8.2f}\n", o.op,
                     op_w, o.kernel, kernel_w, o.dtype, o.shapes, shapes_w, o.calls, o.total_ms, o.time_pct, o.mean_us,
                     o.gbps, o.gflops, o.roofline_pct ? fmt::format("{:.0f}", *o.roofline_pct) : "-", o.host_us);
  }
  if (shown < all.size()) s += fmt::format("({} more op kinds not shown)\n", all.size() - shown);
  std::int64_t first = 0, last = 0;
  if (!records.empty()) {
    first = records.front().host_begin_ns, last = records.front().run_end_ns;
    for (const OpRecord& r : records) first = std::min(first, r.host_begin_ns), last = std::max(last, r.run_end_ns);
  }
  PlanCache::Stats p = plans_->stats();
  const std::int64_t hits = p.hits - plans_at_start_.hits, misses = p.misses - plans_at_start_.misses;
  s += fmt::format("{} op runs, {:.3f} ms in ops, {:.3f} ms from the first op's start to the last one's end\n",
                   records.size(), op_ms, (last - first) * 1e-6);
  s += fmt::format("memory pool peak {:.1f} MiB; plan cache {} hits, {} misses ({:.1f}% hits), {} plans held\n",
                   double(memory_->stats().peak) / (1 << 20), hits, misses,
                   hits + misses > 0 ? 100.0 * double(hits) / double(hits + misses) : 0.0, p.size);
  if (!calibration_) s += "roofline%: no calibration of this machine (run `tessera calibrate`)\n";
  return s;
}

Status Profiler::write_csv(const std::string& path) const {
  TESSERA_ASSIGN_OR_RETURN(File f, open_for_writing(path));
  std::fprintf(f.get(), "op,kernel,dtype,shapes,stream,threads,host_begin_us,host_us,run_begin_us,run_us,bytes,flops,gbps,gflops,roofline_pct\n");
  for (const OpRecord& r : records()) {
    const double ns = double(std::max<std::int64_t>(r.run_ns(), 1));
    const std::optional<double> pct = roofline_pct(r);
    std::fprintf(f.get(), "%s\n",
                 fmt::format("{},{},{},\"{}\",{},{},{:.3f},{:.3f},{:.3f},{:.3f},{},{},{:.3f},{:.3f},{}", r.op, r.kernel,
                             to_string(r.dtype), r.shapes_string(), r.stream, r.threads, r.host_begin_ns * 1e-3,
                             r.host_ns() * 1e-3, r.run_begin_ns * 1e-3, r.run_ns() * 1e-3, r.bytes, r.flops,
                             double(r.bytes) / ns, double(r.flops) / ns, pct ? fmt::format("{:.1f}", *pct) : "")
                     .c_str());
  }
  return finish(std::move(f), path);
}

// Chrome's trace event format: one complete ("X") event per op run on its
// stream's track (tid), in microseconds; the host's dispatch of each op on a
// "host" track; names for the tracks.
Status Profiler::write_chrome_trace(const std::string& path) const {
  TESSERA_ASSIGN_OR_RETURN(File f, open_for_writing(path));
  const std::vector<OpRecord> records = this->records();
  constexpr int kHostTrack = 1000;  // above any stream id a process will have
  std::string out = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  out += fmt::format("{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":1,\"tid\":0,\"args\":{{\"name\":\"tessera\"}}}},\n");
  out += fmt::format("{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":{},\"args\":{{\"name\":\"host dispatch\"}}}}", kHostTrack);
  std::vector<int> streams;
  for (const OpRecord& r : records)
    if (std::find(streams.begin(), streams.end(), r.stream) == streams.end()) streams.push_back(r.stream);
  for (int id : streams)
    out += fmt::format(",\n{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":{},\"args\":{{\"name\":\"stream {}\"}}}}", id, id);
  for (const OpRecord& r : records) {
    const std::optional<double> pct = roofline_pct(r);
    const double ns = double(std::max<std::int64_t>(r.run_ns(), 1));
    out += fmt::format(
        ",\n{{\"ph\":\"X\",\"name\":{},\"cat\":{},\"pid\":1,\"tid\":{},\"ts\":{:.3f},\"dur\":{:.3f},"
        "\"args\":{{\"kernel\":{},\"dtype\":\"{}\",\"shapes\":{},\"bytes\":{},\"flops\":{},\"gbps\":{:.2f},\"gflops\":{:.2f}{}}}}}",
        json_string(r.op), json_string("op"), r.stream, r.run_begin_ns * 1e-3, std::max(r.run_ns(), std::int64_t(1)) * 1e-3,
        json_string(r.kernel), to_string(r.dtype), json_string(r.shapes_string()), r.bytes, r.flops, double(r.bytes) / ns,
        double(r.flops) / ns, pct ? fmt::format(",\"roofline_pct\":{:.1f}", *pct) : "");
    out += fmt::format(",\n{{\"ph\":\"X\",\"name\":{},\"cat\":\"dispatch\",\"pid\":1,\"tid\":{},\"ts\":{:.3f},\"dur\":{:.3f}}}",
                       json_string(r.op), kHostTrack, r.host_begin_ns * 1e-3,
                       std::max(r.host_ns(), std::int64_t(1)) * 1e-3);
  }
  out += "\n]}\n";
  std::fputs(out.c_str(), f.get());
  return finish(std::move(f), path);
}

}  // namespace tessera
