#include "bench/harness.hpp"

#include <fmt/format.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "tessera/core/aligned.hpp"
#include "tessera/core/dtype.hpp"

namespace tessera::app::bench {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

void settle(const MeasureOptions& options) {
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(options.settle_ms));
}

// Sum of n floats (p 16-byte aligned). SSE is baseline x86-64, so no
// dispatch is needed, and a bandwidth-bound loop gains nothing from wider
// vectors.
// Four streams at once (the quarters of the range): one sequential stream
// per core leaves read bandwidth on the table, which would flatter every
// "% of read bandwidth" figure measured against it. n is a multiple of 64.
float sum(const float* p, std::int64_t n) {
  const std::int64_t q = n / 4;
  __m128 s[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps()};
  for (std::int64_t i = 0; i < q; i += 16)
    for (int j = 0; j < 4; ++j) {
      const float* r = p + j * q + i;
      s[j] = _mm_add_ps(s[j], _mm_add_ps(_mm_add_ps(_mm_load_ps(r), _mm_load_ps(r + 4)),
                                         _mm_add_ps(_mm_load_ps(r + 8), _mm_load_ps(r + 12))));
    }
  float lanes[4];
  _mm_storeu_ps(lanes, _mm_add_ps(_mm_add_ps(s[0], s[1]), _mm_add_ps(s[2], s[3])));
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

}  // namespace

std::string_view to_string(GemmType t) {
  switch (t) {
    case GemmType::f32: return "f32";
    case GemmType::bf16: return "bf16";
    case GemmType::int8: return "int8";
    case GemmType::int4: return "int4";
  }
  return "?";
}

std::optional<GemmType> parse_gemm_type(std::string_view name) {
  for (GemmType t : {GemmType::f32, GemmType::bf16, GemmType::int8, GemmType::int4})
    if (to_string(t) == name) return t;
  return std::nullopt;
}

Result<ops::WeightsPtr> tessera_weights(GemmType t, const Tensor& w_kn) {
  switch (t) {
    case GemmType::f32: return ops::pack_weights(w_kn, DType::f32);
    case GemmType::bf16: return ops::pack_weights(w_kn, DType::bf16);
    case GemmType::int8: return ops::quantize_weights(w_kn, {.dtype = DType::i8, .group_size = 0});
    case GemmType::int4: return ops::quantize_weights(w_kn, {.dtype = DType::i4, .group_size = 128});
  }
  return Status::internal("unknown GemmType");
}

std::int64_t weight_bytes(GemmType t, std::int64_t k, std::int64_t n) {
  switch (t) {
    case GemmType::f32: return 4 * k * n;
    case GemmType::bf16: return 2 * k * n;
    case GemmType::int8: return k * n + 4 * n;
    case GemmType::int4: return k * n / 2 + 4 * n * (k / 128);
  }
  return 0;
}

double AttentionShape::visible_pairs() const {
  const double sq = double(q_len), skv = double(kv_len);
  if (!causal) return sq * skv;
  // Query i sees min(Skv, max(0, i + Skv - Sq + 1)) keys.
  double pairs = 0;
  for (std::int64_t i = 0; i < q_len; ++i)
    pairs += double(std::clamp<std::int64_t>(i + kv_len - q_len + 1, 0, kv_len));
  return pairs;
}

double AttentionShape::flops() const { return 4.0 * double(batch * q_heads * head_dim) * visible_pairs(); }

std::int64_t AttentionShape::score_bytes() const { return 4 * batch * q_heads * q_len * kv_len; }

Contexts::Contexts(const std::vector<int>& threads) {
  for (int t : threads) by_threads_[t] = std::make_unique<Context>(ContextOptions{.threads = t});
}

std::string threads_label(int threads) {
  return threads == 1 ? std::string("1 thread") : fmt::format("{} threads", threads);
}

void fill_uniform(std::span<float> out, std::uint64_t seed, float lo, float hi) {
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::uint64_t z = (seed << 40) + i + 0x9e3779b97f4a7c15ull;  // splitmix64's finalizer over a counter
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    out[i] = lo + (hi - lo) * (float(z >> 40) * 0x1p-24f);
  }
}

void fill_tensor(const Tensor& t, std::uint64_t seed) {
  std::vector<float> v(static_cast<std::size_t>(t.numel()));
  fill_uniform(v, seed);
  if (t.dtype() == DType::bf16)
    std::transform(v.begin(), v.end(), t.data_as<bf16_t>(), [](float x) { return f32_to_bf16(x); });
  else
    std::copy(v.begin(), v.end(), t.data_as<float>());
}

void measure_interleaved(std::span<Contender> contenders, const MeasureOptions& options) {
  // Warm-up, which also sizes each contender's repeat from its fastest call.
  std::vector<std::int64_t> calls(contenders.size(), 1);
  for (std::size_t i = 0; i < contenders.size(); ++i) {
    Contender& c = contenders[i];
    settle(options);
    double total = 0, fastest = std::numeric_limits<double>::infinity();
    for (std::int64_t n = 0; c.error.ok() && (n < c.warmup_calls || total < options.warmup_ms); ++n) {
      const auto t0 = Clock::now();
      c.error = c.call();
      const double ms = ms_since(t0);
      total += ms;
      fastest = std::min(fastest, ms);
    }
    calls[i] = std::max<std::int64_t>(1, std::int64_t(std::ceil(options.repeat_ms / std::max(fastest, 1e-6))));
  }
  for (int r = 0; r < options.repeats; ++r) {
    for (std::size_t i = 0; i < contenders.size(); ++i) {
      Contender& c = contenders[i];
      if (!c.error.ok()) continue;
      settle(options);
      const auto t0 = Clock::now();
      for (std::int64_t n = 0; n < calls[i] && c.error.ok(); ++n) c.error = c.call();
      if (c.error.ok()) c.ms.push_back(ms_since(t0) / double(calls[i]));
    }
  }
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const auto mid = v.begin() + std::ptrdiff_t(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  if (v.size() % 2) return *mid;
  return (*mid + *std::max_element(v.begin(), mid)) / 2;
}

double best(std::span<const double> v) { return v.empty() ? 0 : *std::min_element(v.begin(), v.end()); }

Result<std::vector<Row>> measure_stream(Context& ctx, std::string_view suite, std::int64_t array_bytes,
                                        const MeasureOptions& options) {
  // 1 MiB of floats per task: many tasks per thread, so the pool balances them,
  // and every task starts 64-byte aligned with a multiple of 16 floats.
  constexpr std::int64_t kGrain = std::int64_t(1) << 18;
  const std::int64_t n = std::max<std::int64_t>(1, array_bytes / 4 / kGrain) * kGrain;
  const std::int64_t bytes = n * 4;
  AlignedBuffer buffers[3];
  for (AlignedBuffer& b : buffers) {
    b.reset(aligned_alloc_bytes(std::size_t(bytes)));
    if (!b) return Status::out_of_memory(fmt::format("stream: cannot allocate 3 arrays of {} MiB", bytes >> 20));
  }
  float* a = static_cast<float*>(buffers[0].get());
  float* b = static_cast<float*>(buffers[1].get());
  float* c = static_cast<float*>(buffers[2].get());
  ThreadPool& pool = ctx.pool();
  // First touch from the pool, as the kernels will touch them.
  pool.parallel_for(n, kGrain, [&](std::int64_t lo, std::int64_t hi) {
    std::fill(a + lo, a + hi, 1.0f);
    std::fill(b + lo, b + hi, 2.0f);
    std::fill(c + lo, c + hi, 0.0f);
  });

  std::atomic<float> sink{0};  // keeps the sums alive
  auto kernel = [&](auto body) {
    return [&pool, n, body] {
      pool.parallel_for(n, kGrain, body);
      return Status{};
    };
  };
  std::vector<Contender> contenders;
  contenders.push_back({.impl = "copy", .call = kernel([&](std::int64_t lo, std::int64_t hi) {
                          std::memcpy(c + lo, a + lo, std::size_t(hi - lo) * sizeof(float));
                        })});
  contenders.push_back({.impl = "triad", .call = kernel([&](std::int64_t lo, std::int64_t hi) {
                          for (std::int64_t i = lo; i < hi; ++i) a[i] = b[i] + 3.0f * c[i];
                        })});
  contenders.push_back({.impl = "read", .call = kernel([&](std::int64_t lo, std::int64_t hi) {
                          sink.store(sum(b + lo, hi - lo), std::memory_order_relaxed);
                        })});
  const std::int64_t arrays_moved[] = {2, 3, 1};  // copy, triad, read
  measure_interleaved(contenders, options);

  std::vector<Row> rows;
  for (std::size_t i = 0; i < contenders.size(); ++i) {
    const Contender& k = contenders[i];
    Row r;
    r.suite = suite;
    r.case_name = fmt::format("{}_{}mib", k.impl, bytes >> 20);
    r.dtype = "f32";
    r.threads = pool.threads();
    r.impl = "stream";
    r.median_ms = median(k.ms);
    r.best_ms = best(k.ms);
    r.gbps = double(arrays_moved[i] * bytes) / r.median_ms / 1e6;
    rows.push_back(std::move(r));
  }
  return rows;
}

Result<Roofline> stream_roofline(Context& ctx, std::string_view suite, std::int64_t array_bytes,
                                 const MeasureOptions& options, bool json) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<Row> rows, measure_stream(ctx, suite, array_bytes, options));
  std::optional<double> copy, triad, read;
  for (const Row& r : rows) {
    if (r.case_name.starts_with("copy")) copy = r.gbps;
    if (r.case_name.starts_with("triad")) triad = r.gbps;
    if (r.case_name.starts_with("read")) read = r.gbps;
  }
  print_rows(fmt::format("stream bandwidth | {} | arrays of {} MiB", threads_label(ctx.pool().threads()), array_bytes >> 20),
             rows, json);
  if (!copy || !triad || !read) return Status::internal("stream: a copy, triad or read row is missing");
  return Roofline{*copy, *triad, *read};
}

}  // namespace tessera::app::bench
