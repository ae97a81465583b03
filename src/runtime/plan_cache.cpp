#include "tessera/runtime/plan_cache.hpp"

#include <bit>

namespace tessera {

namespace {
std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  // splitmix64 finalizer over (h, v): cheap and well spread.
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  return h;
}
std::int64_t fnv1a(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return std::int64_t(h);
}
}  // namespace

PlanKey::PlanKey(std::string_view op, hw::Isa isa) {
  words_.reserve(32);
  add(fnv1a(op));
  add(std::int64_t(isa));
}

PlanKey& PlanKey::add(std::int64_t v) {
  words_.push_back(v);
  hash_ = mix(hash_, std::uint64_t(v));
  return *this;
}

PlanKey& PlanKey::add(float v) { return add(std::int64_t(std::bit_cast<std::uint32_t>(v))); }

PlanKey& PlanKey::add(const TensorDesc& d) {
  add(std::int64_t(d.dtype) << 8 | d.rank());
  for (int i = 0; i < d.rank(); ++i) add(d.shape[i]).add(d.strides[i]);
  return *this;
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
