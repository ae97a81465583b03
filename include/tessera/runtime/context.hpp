#pragma once
// Context: what every op plan and run needs — hardware info, the ISA
// ceiling, the thread pool, the memory pool and the plan cache.
#include <cstddef>
#include <optional>

#include "tessera/core/hw.hpp"
#include "tessera/core/thread_pool.hpp"
#include "tessera/runtime/memory_pool.hpp"
#include "tessera/runtime/plan_cache.hpp"

namespace tessera {

struct ContextOptions {
  int threads = 0;                  // 0: one per core
  std::optional<hw::Isa> isa;       // unset: TESSERA_ISA, else the machine's best
  std::size_t plan_cache_capacity = 1024;
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

 private:
  hw::Isa isa_;
  ThreadPool pool_;
  MemoryPool memory_;
  PlanCache plans_;
};

// The ceiling TESSERA_ISA asks for, capped at `max`; `max` when unset. An
// unknown value is logged as a warning and ignored.
hw::Isa isa_from_env(hw::Isa max);

}  // namespace tessera
