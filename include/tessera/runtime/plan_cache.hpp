#pragma once
// A bounded LRU cache of operator plans, keyed by op + attributes + input
// descs + ISA ceiling. A hit is a hash lookup and a list splice.
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tessera/core/hw.hpp"
#include "tessera/core/shape.hpp"

namespace tessera {

// Base of everything the cache holds (operator plans derive from it).
class CachedPlan {
 public:
  virtual ~CachedPlan() = default;
};

class PlanKey {
 public:
  PlanKey(std::string_view op, hw::Isa isa);
  PlanKey& add(std::int64_t v);
  PlanKey& add(float v);
  PlanKey& add(const TensorDesc& d);
  bool operator==(const PlanKey& o) const { return hash_ == o.hash_ && words_ == o.words_; }
  std::size_t hash() const { return hash_; }

 private:
  std::vector<std::int64_t> words_;
  std::size_t hash_ = 0;
};

class PlanCache {
 public:
  struct Stats {
    std::int64_t hits = 0, misses = 0, evictions = 0;
    std::size_t size = 0, capacity = 0;
  };

  explicit PlanCache(std::size_t capacity = 1024) : capacity_(capacity) {}

  // The cached plan for `key`, or nullptr (counted as a miss).
  std::shared_ptr<const CachedPlan> find(const PlanKey& key);
  // Adds (or replaces) the plan for `key`, evicting the least recently used past capacity.
  void insert(const PlanKey& key, std::shared_ptr<const CachedPlan> plan);
  void set_capacity(std::size_t capacity);
  void clear();
  Stats stats() const;

 private:
  struct KeyHash {
    std::size_t operator()(const PlanKey& k) const { return k.hash(); }
  };
  struct Entry {
    std::shared_ptr<const CachedPlan> plan;
    std::list<const PlanKey*>::iterator lru;  // position in lru_, most recent first
  };
  void evict_to(std::size_t capacity);

  mutable std::mutex mutex_;
  std::size_t capacity_;
  std::unordered_map<PlanKey, Entry, KeyHash> map_;
  std::list<const PlanKey*> lru_;
  Stats stats_;
};

}  // namespace tessera
