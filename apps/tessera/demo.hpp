#pragma once
// `tessera demo`'s workloads, shared with `tessera profile` (which runs them
// under the profiler) and `demo --dynamic`.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/tessera.hpp"

namespace tessera::app {

// The Llama-style decoder layer of the demo.
constexpr std::int64_t kHidden = 2048, kHeads = 16, kHeadDim = 128, kFfn = 5632, kVocab = 4096;

struct DemoOptions {
  std::int64_t tokens = 128;
  int iters = 5;
  int threads = 0;
  std::string weights = "f32";  // how the projection weights are packed: f32, bf16, int8 (W8A8), int4
  int decode_steps = 16;
  bool dynamic = false;    // run_dynamic_demo instead
  bool diffusion = false;  // run_diffusion_demo instead
};

// What `tessera profile` sees of the demo: its context as the timed runs
// begin (after a warm-up pass), and as they end with the wall time they took.
struct DemoObserver {
  virtual ~DemoObserver() = default;
  virtual void timed_runs_begin(Context& ctx) = 0;
  virtual void timed_runs_end(Context& ctx, double wall_ms) = 0;
};

// Prefill, then decode; prints per-op tables unless an observer watches.
void run_demo(const DemoOptions& opt, DemoObserver* observer = nullptr);
// The layer through the one-shot ops over a set of sequence lengths: the
// first call and the cached call of each, in a cold context and in one
// warmed up for those lengths; then the host cost of dispatch.
void run_dynamic_demo(const DemoOptions& opt);

// The demo's inputs are valid by construction: a failure is a bug, reported by main.
template <class T>
T must(Result<T> r) {
  if (!r.ok()) throw std::runtime_error(r.status().to_string());
  return std::move(r).value();
}
// Deterministic weights: uniform in [-scale, scale] from a counter hash of (seed, index).
Tensor demo_weight(Shape shape, std::uint64_t seed, float scale);
// `w` [K, N] packed as DemoOptions::weights says.
ops::WeightsPtr demo_pack(const Tensor& w, const std::string& weights);
double median(std::vector<double> v);

// The layer's projections, packed once as DemoOptions::weights says: Q, K
// and V side by side ([hidden, 3 hidden]) and gate and up ([hidden, 2
// ffn]), each one GEMM whose output's column slices are the parts, as
// inference engines fuse them (one pass over the activations, a wider N).
struct DemoProjections {
  ops::WeightsPtr qkv, o, gate_up, down;
};
DemoProjections demo_projections(Stream& stream, const std::string& weights);

}  // namespace tessera::app
