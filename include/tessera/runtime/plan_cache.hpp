#pragma once
// A bounded LRU cache of operator plans, keyed by op + attributes + input
// descs + ISA ceiling. A hit is a hash lookup and a list splice.
#include <array>
#include <bit>
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

// The words that identify a plan, and their hash. Built on every op call
// (the lookup's key), so adding a word is a store and a multiply: the words
// live inline (no allocation) up to kInlineWords, and the hash is a
// multiply-xor chain per word, mixed once when asked for. With a vector and
// a full mix per word, building the key was 30 % of a 1024-element relu's
// call (bench membound tiny).
class PlanKey {
 public:
  PlanKey(std::string_view op, hw::Isa isa);
  PlanKey& add(std::int64_t v) {
    if (size_ < kInlineWords)
      inline_[size_] = v;
    else
      spill_.push_back(v);
    ++size_;
    chain_ = (chain_ ^ std::uint64_t(v)) * 0x100000001b3ull;
    return *this;
  }
  PlanKey& add(float v) { return add(std::int64_t(std::bit_cast<std::uint32_t>(v))); }
  PlanKey& add(const TensorDesc& d) {
    add(std::int64_t(d.dtype) << 8 | d.rank());
    for (int i = 0; i < d.rank(); ++i) add(d.shape[i]).add(d.strides[i]);
    return *this;
  }
  bool operator==(const PlanKey& o) const;
  std::size_t hash() const;

 private:
  static constexpr int kInlineWords = 48;  // an attention's four rank-4 descs and its attributes
  std::array<std::int64_t, kInlineWords> inline_;
  std::vector<std::int64_t> spill_;  // the words past kInlineWords
  int size_ = 0;
  std::uint64_t chain_ = 0xcbf29ce484222325ull;
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
