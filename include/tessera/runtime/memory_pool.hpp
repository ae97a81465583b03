#pragma once
// A caching allocator for workspaces and intermediates. Freed blocks are
// kept in per-size-class lists and handed out again, so steady-state
// inference allocates nothing from the OS. Thread-safe.
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "tessera/core/status.hpp"

namespace tessera {

class MemoryPool {
 public:
  struct Stats {
    std::int64_t in_use = 0;      // bytes in blocks handed out (size-class rounded)
    std::int64_t reserved = 0;    // bytes held from the OS: in use + cached
    std::int64_t peak = 0;        // highest in_use seen
    std::int64_t allocations = 0; // allocate() calls that succeeded
    std::int64_t cache_hits = 0;  // of those, served from the cache
  };

  // A block of pool memory, returned to the pool when destroyed.
  class Block {
   public:
    Block() = default;
    Block(Block&& o) noexcept { *this = std::move(o); }
    Block& operator=(Block&& o) noexcept;
    ~Block() { release(); }
    void* data() const { return data_; }
    std::int64_t bytes() const { return bytes_; }  // as requested
    void release();

   private:
    friend class MemoryPool;
    MemoryPool* pool_ = nullptr;
    void* data_ = nullptr;
    std::int64_t bytes_ = 0;
    std::int64_t size_class_ = 0;
  };

  MemoryPool() = default;
  ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  // 64-byte aligned; blocks of 2 MiB and more are page-aligned.
  Result<Block> allocate(std::int64_t bytes);
  // Returns cached (unused) blocks to the OS.
  void empty_cache();
  Stats stats() const;
  // The size a request is rounded up to: 4 classes per power of two above 512 bytes.
  static std::int64_t size_class(std::int64_t bytes);

 private:
  void give_back(void* data, std::int64_t size_class);

  mutable std::mutex mutex_;
  std::map<std::int64_t, std::vector<void*>> cache_;
  Stats stats_;
};

}  // namespace tessera
