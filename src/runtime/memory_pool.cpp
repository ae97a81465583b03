#include "tessera/runtime/memory_pool.hpp"

#include <fmt/format.h>

#include <bit>

#include "tessera/core/aligned.hpp"

namespace tessera {

namespace {
constexpr std::int64_t kMinClass = 512;
}  // namespace

std::int64_t MemoryPool::size_class(std::int64_t bytes) {
  if (bytes <= kMinClass) return kMinClass;
  // Quarter steps between powers of two: at most 25 % rounding waste.
  const int log2 = 63 - std::countl_zero(std::uint64_t(bytes - 1));
  const std::int64_t step = std::int64_t(1) << (log2 - 2);
  return (bytes + step - 1) / step * step;
}

MemoryPool::Block& MemoryPool::Block::operator=(Block&& o) noexcept {
  if (this != &o) {
    release();
    pool_ = std::exchange(o.pool_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    size_class_ = std::exchange(o.size_class_, 0);
  }
  return *this;
}

void MemoryPool::Block::release() {
  if (pool_ != nullptr) pool_->give_back(data_, size_class_);
  pool_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

MemoryPool::~MemoryPool() { empty_cache(); }

Result<MemoryPool::Block> MemoryPool::allocate(std::int64_t bytes) {
  if (bytes < 0) return Status::invalid_argument(fmt::format("bytes: {} is negative", bytes));
  if (bytes > (std::int64_t(1) << 48)) return Status::out_of_memory(fmt::format("bytes: {} exceeds the pool's 256 TiB limit", bytes));
  const std::int64_t cls = size_class(bytes);
  Block block;
  {
    std::lock_guard lock(mutex_);
    auto it = cache_.find(cls);
    if (it != cache_.end() && !it->second.empty()) {
      block.data_ = it->second.back();
      it->second.pop_back();
      ++stats_.cache_hits;
    }
  }
  if (block.data_ == nullptr) {
    block.data_ = aligned_alloc_bytes(std::size_t(cls));
    if (block.data_ == nullptr) {
      empty_cache();  // give the OS our cached blocks and try once more
      block.data_ = aligned_alloc_bytes(std::size_t(cls));
    }
    if (block.data_ == nullptr) return Status::out_of_memory(fmt::format("memory pool: cannot allocate {} bytes", cls));
    std::lock_guard lock(mutex_);
    stats_.reserved += cls;
  }
  block.pool_ = this;
  block.bytes_ = bytes;
  block.size_class_ = cls;
  std::lock_guard lock(mutex_);
  ++stats_.allocations;
  stats_.in_use += cls;
  stats_.peak = std::max(stats_.peak, stats_.in_use);
  return block;
}

void MemoryPool::give_back(void* data, std::int64_t cls) {
  std::lock_guard lock(mutex_);
  cache_[cls].push_back(data);
  stats_.in_use -= cls;
}

void MemoryPool::empty_cache() {
  std::lock_guard lock(mutex_);
  for (auto& [cls, blocks] : cache_) {
    for (void* p : blocks) aligned_free(p);
    stats_.reserved -= cls * std::int64_t(blocks.size());
  }
  cache_.clear();
}

MemoryPool::Stats MemoryPool::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace tessera
