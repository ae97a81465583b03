#include "tessera/runtime/plan_cache.hpp"

#include <algorithm>

namespace tessera {

namespace {
std::int64_t fnv1a(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return std::int64_t(h);
}
}  // namespace

PlanKey::PlanKey(std::string_view op, hw::Isa isa) {
  add(fnv1a(op));
  add(std::int64_t(isa));
}

bool PlanKey::operator==(const PlanKey& o) const {
  return size_ == o.size_ && chain_ == o.chain_ &&
         std::equal(inline_.begin(), inline_.begin() + std::min(size_, kInlineWords), o.inline_.begin()) && spill_ == o.spill_;
}

// The chain's high bits depend on every word; the splitmix64 finalizer
// spreads them over the low bits that pick a bucket.
std::size_t PlanKey::hash() const {
  std::uint64_t h = chain_;
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

std::shared_ptr<const CachedPlan> PlanCache::find(const PlanKey& key) {
  std::lock_guard lock(mutex_);
  auto it = map_.find(key);
  if (it == map_.end()) {
    ++stats_.misses;
    return nullptr;
  }
  ++stats_.hits;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.plan;
}

void PlanCache::insert(const PlanKey& key, std::shared_ptr<const CachedPlan> plan) {
  std::lock_guard lock(mutex_);
  if (capacity_ == 0) return;
  auto [it, inserted] = map_.try_emplace(key);
  it->second.plan = std::move(plan);
  if (inserted) {
    lru_.push_front(&it->first);
    it->second.lru = lru_.begin();
  } else {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
  }
  evict_to(capacity_);
}

void PlanCache::evict_to(std::size_t capacity) {
  while (map_.size() > capacity) {
    const PlanKey* oldest = lru_.back();
    lru_.pop_back();
    map_.erase(*oldest);
    ++stats_.evictions;
  }
}

void PlanCache::set_capacity(std::size_t capacity) {
  std::lock_guard lock(mutex_);
  capacity_ = capacity;
  evict_to(capacity_);
}

void PlanCache::clear() {
  std::lock_guard lock(mutex_);
  map_.clear();
  lru_.clear();
}

PlanCache::Stats PlanCache::stats() const {
  std::lock_guard lock(mutex_);
  Stats s = stats_;
  s.size = map_.size();
  s.capacity = capacity_;
  return s;
}

}  // namespace tessera
