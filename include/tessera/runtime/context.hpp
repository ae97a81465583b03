#pragma once
// Context: what every op plan and run needs — hardware info, the ISA
// ceiling, the thread pool, the memory pool, the plan cache and the profiler.
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <optional>

#include "tessera/core/hw.hpp"
#include "tessera/core/thread_pool.hpp"
#include "tessera/runtime/memory_pool.hpp"
#include "tessera/runtime/plan_cache.hpp"
#include "tessera/runtime/profiler.hpp"
#include "tessera/runtime/tuning.hpp"

namespace tessera {

class Stream;

struct ContextOptions {
  int threads = 0;                  // 0: one per core
  std::optional<hw::Isa> isa;       // unset: TESSERA_ISA, else the machine's best
  std::size_t plan_cache_capacity = 1024;
  // Dynamic shapes: one-shot linear() and quantized_linear() on 2-D
  // activations [tokens, K] plan for the token count's bucket — the next
  // power of two up to this, then the next multiple of it — so every count
  // of a bucket shares one plan.
  // 0: a plan per count.
  std::int64_t token_bucket = 0;
  std::string tuning_file;          // "": TuningStore::default_path()
};

class Context {
 public:
  explicit Context(const ContextOptions& options = {});
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const hw::Info& hw() const { return hw::info(); }
  // Kernel rows above this level are never chosen; always <= hw().max_isa.
  hw::Isa isa() const { return isa_; }
  ThreadPool& pool() { return pool_; }
  MemoryPool& memory() { return memory_; }
  PlanCache& plans() { return plans_; }
  Profiler& profiler() { return profiler_; }
  // The rows a plan for `tokens` rows covers (ContextOptions::token_bucket);
  // 0 when bucketing is off, and for 0 tokens.
  std::int64_t token_bucket(std::int64_t tokens) const;
  // The tiling overrides of `tessera tune`, loaded when the context is made;
  // plans made after a change use it (plans already cached keep theirs).
  TuningStore& tuning() { return tuning_; }

  // Runs each problem once, on a stream of this context,
  // so that what a service's first requests need is ready: their plans in
  // the cache, their workspaces in the memory pool, their pages touched. A
  // problem is a call of one-shot ops (e.g. one layer at one sequence
  // length) on tensors it owns. The first error, named by its op.
  Status warmup(std::span<const std::function<Status(Stream&)>> problems);

 private:
  hw::Isa isa_;
  std::int64_t token_bucket_;
  ThreadPool pool_;
  MemoryPool memory_;
  PlanCache plans_;
  TuningStore tuning_;
  Profiler profiler_{memory_, plans_};
};

// The ceiling TESSERA_ISA asks for, capped at `max`; `max` when unset. An
// unknown value is logged as a warning and ignored.
hw::Isa isa_from_env(hw::Isa max);

}  // namespace tessera
