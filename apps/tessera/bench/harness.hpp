#pragma once
// The shared parts of `tessera bench`: what a GEMM or an attention under
// test looks like, one Context per thread count, deterministic inputs,
// interleaved timing, and the STREAM-style bandwidth rows that are the
// roofline of memory-bound cases.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bench/report.hpp"
#include "tessera/core/status.hpp"
#include "tessera/core/tensor.hpp"
#include "tessera/ops/matmul.hpp"
#include "tessera/runtime/context.hpp"

namespace tessera::app::bench {

// The GEMMs of `bench gemm`, named by their weight type. C is f32 in all.
//   f32:  A f32,  W f32
//   bf16: A bf16, W bf16
//   int8: A f32, quantized per row on the fly (W8A8); W int8 with one scale per column
//   int4: A f32; W int4 with one scale per group of 128 along K (weight-only)
enum class GemmType { f32, bf16, int8, int4 };
std::string_view to_string(GemmType t);
std::optional<GemmType> parse_gemm_type(std::string_view name);

// Bytes of W [K, N] as stored: the values plus their f32 scales. One model
// per type, the same for every library, so that GB/s compares times.
std::int64_t weight_bytes(GemmType t, std::int64_t k, std::int64_t n);

// W [K, N] as Tessera's Linear takes it for each type: packed f32 or bf16,
// int8 per output channel (W8A8), int4 in groups of 128.
Result<ops::WeightsPtr> tessera_weights(GemmType t, const Tensor& w_kn);

// Rows up to this M are decode-like, bound by streaming the weights: measured cold.
constexpr std::int64_t kMaxColdM = 16;

// C[M, N] = A[M, K] x W[K, N] by one library, for one weight matrix.
class GemmImpl {
 public:
  virtual ~GemmImpl() = default;
  // Plans for `m` rows on `threads` threads. The weights rotate through
  // enough distinct copies that together they exceed `cold_bytes`, so that
  // every call streams them from DRAM; 0: one copy, warm in the caches.
  virtual Status prepare(int threads, std::int64_t m, std::int64_t cold_bytes) = 0;
  // One call on the next copy of the weights; returns when C is written.
  virtual Status run() = 0;
  virtual std::int64_t copies() const = 0;
  // What the library chose to run, for the report.
  virtual std::string kernel() const = 0;
};

// Dense attention as `bench attention` runs it (prefill and cross-attention):
// o = softmax(q kᵀ / sqrt(D) + causal mask) v, q and o [B, Sq, Hq, D], k and
// v [B, Skv, Hkv, D] (a peer may be given its own layout of the same
// values); query head h reads kv head h / (Hq / Hkv). causal: query i sees
// keys j <= i + Skv - Sq (ops::Attention's rule).
struct AttentionShape {
  std::int64_t batch = 1, q_len = 0, kv_len = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  bool causal = false;
  // (query, key) pairs a query head sees: Sq x Skv, or with causal the lower triangle (S (S + 1) / 2 for Sq = Skv).
  double visible_pairs() const;
  // 2 x 2 x B x Hq x D x visible pairs (q kᵀ and p v): the FLOPs every
  // implementation is credited with, also those that compute the masked half.
  double flops() const;
  // The f32 score tensor [B, Hq, Sq, Skv] an unfused implementation materializes.
  std::int64_t score_bytes() const;
};

// One implementation of one AttentionShape and dtype (f32 or bf16), its
// inputs made and filled when it is made.
class AttentionImpl {
 public:
  virtual ~AttentionImpl() = default;
  // Plans (or makes its primitives) for `threads` threads.
  virtual Status prepare(int threads) = 0;
  // One attention; returns when o is written.
  virtual Status run() = 0;
  // Distinct copies of the inputs the calls rotate through (cold rows).
  virtual std::int64_t copies() const { return 1; }
  // What ran, for the report.
  virtual std::string kernel() const = 0;
};

// One Context, so one thread pool, per thread count, made once.
class Contexts {
 public:
  explicit Contexts(const std::vector<int>& threads);
  Context& at(int threads) { return *by_threads_.at(threads); }

 private:
  std::map<int, std::unique_ptr<Context>> by_threads_;
};

std::string threads_label(int threads);  // "1 thread", "2 threads"

// Uniform values in [lo, hi) from a hash of (seed, index): the same on every run and machine.
void fill_uniform(std::span<float> out, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f);
// The same values in a contiguous f32 or bf16 tensor (rounded to nearest even).
void fill_tensor(const Tensor& t, std::uint64_t seed);

struct MeasureOptions {
  int repeats = 5;
  double repeat_ms = 25;  // a timed repeat runs back-to-back calls for at least this long
  double warmup_ms = 50;  // per contender, before the first repeat
  // Idle time before each contender's turn: OpenMP (oneDNN), OpenBLAS and
  // Tessera's pool keep their workers spinning for a while after a call —
  // libgomp for 300k pause loops, several ms — which on 2 cores would steal
  // from whoever runs next.
  double settle_ms = 20;
};

// One implementation in an interleaved measurement.
struct Contender {
  std::string impl;
  std::function<Status()> call;
  std::int64_t warmup_calls = 1;  // at least this many (cold weights: one pass over the copies)
  Status error;                   // the first failed call; the contender then drops out
  std::vector<double> ms;         // per-call time of each timed repeat
};

// Warms each contender up, then times its repeats in turn, A B C A B C ...,
// so that drift (large on this machine) hits all alike.
void measure_interleaved(std::span<Contender> contenders, const MeasureOptions& options);

double median(std::vector<double> v);
double best(std::span<const double> v);

// Copy (c = a), triad (a = b + s*c) and read (sum of b) over f32 arrays of
// `array_bytes` each, split over the context's pool. Rows: impl "stream",
// case "copy_<N>mib" etc., gbps counting the bytes each kernel reads plus
// writes (STREAM's convention: no write-allocate traffic).
Result<std::vector<Row>> measure_stream(Context& ctx, std::string_view suite, std::int64_t array_bytes,
                                        const MeasureOptions& options);
// The bandwidths (GB/s) of the three stream kernels.
struct Roofline {
  double copy_gbps, triad_gbps, read_gbps;
};
// Bytes that a bench's data (each stream array, the rotating copies of cold
// weights or KV caches) exceed so that every pass comes from DRAM: twice the
// L3, at least 128 MiB, as the L3 may be under-reported (a VM that lists no
// caches keeps hw's default 8 MiB; its L3 held 16 MiB arrays).
inline std::int64_t cold_bytes() { return 2 * std::max<std::int64_t>(hw::info().l3_bytes, 64 << 20); }

// measure_stream, its rows printed as one table ("stream bandwidth | ..."), or
// as JSON lines; returns the bandwidths, the roofline of the cold rows
// measured on the same threads.
Result<Roofline> stream_roofline(Context& ctx, std::string_view suite, std::int64_t array_bytes,
                                 const MeasureOptions& options, bool json);

}  // namespace tessera::app::bench
