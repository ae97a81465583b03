#pragma once
// Paged KV cache for one attention layer: a pool of fixed-size blocks of
// tokens and, per sequence, a block table mapping its logical blocks to
// physical ones (vLLM's PagedAttention block tables). Appending allocates blocks
// as a sequence grows; releasing a sequence returns its blocks for reuse.
// An engine with its own block manager uses the pool alone instead: it
// writes tokens into the slots it chose (write) and passes its block tables
// to PagedAttention::plan_block_tables.
//
// Storage per kv head: K pool [Hkv][blocks][block_size][D] and a V pool
// shaped alike, so one head's tokens in a block are one run of memory, and a
// sequence whose blocks were handed out in order (as a fresh pool does) is
// one run per head, which the hardware prefetcher streams as it does a
// contiguous cache. (vLLM keeps the heads inside each block; here that ended
// a head's run every block_size tokens, 4 KiB at bf16 D = 128, and decode
// attention over it ran 0.75-0.9x the contiguous layout.) int8 storage is
// symmetric with one f32 scale per token and head (max|x| / 127, rounded to
// nearest even, saturated).
//
// Not thread-safe: append, write, truncate and release must not run
// concurrently with each other or with an attention that reads the cache.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tessera/core/tensor.hpp"

namespace tessera::ops {

struct KvCacheConfig {
  std::int64_t num_blocks = 0;
  std::int64_t block_size = 16;  // tokens per block: 16 or 32
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 0;
  DType dtype = DType::f32;      // f32, bf16 or i8
};

class KvCache {
 public:
  static Result<std::shared_ptr<KvCache>> create(const KvCacheConfig& config);

  const KvCacheConfig& config() const { return config_; }
  // A new, empty sequence.
  std::int32_t add_sequence();
  // Appends T tokens to `seq`: k and v [T, Hkv, D], f32 or bf16, any strides.
  // When the pool has too few free blocks, nothing is appended and the error says so.
  Status append(std::int32_t seq, const Tensor& k, const Tensor& v);
  // Returns the sequence's blocks to the pool; the id is not reused.
  Status release(std::int32_t seq);
  // Keeps the first `length` tokens of `seq` (at most its length) and returns
  // the blocks past them to the pool: speculative decoding's rejected draft
  // tokens, dropped before the accepted ones are appended.
  Status truncate(std::int32_t seq, std::int64_t length);

  // Writes T tokens into slots the caller chose, for sequences whose blocks
  // it manages itself (an engine's own block manager; attention reads them
  // through PagedAttention::plan_block_tables): token t goes to block
  // slots[t] / block_size, position slots[t] % block_size (vLLM's slot
  // mapping). slots i32 or i64 [T]; a negative slot skips its token
  // (padding). k and v as append's. A slot past the pool is an error, and
  // nothing is written then. The cache's own sequences know nothing of such
  // writes: a cache serves one of the two schemes.
  Status write(const Tensor& slots, const Tensor& k, const Tensor& v);

  // Tokens held for `seq`; an error for an unknown or released id.
  Result<std::int64_t> length(std::int32_t seq) const;
  Result<std::span<const std::int32_t>> block_table(std::int32_t seq) const;
  std::int64_t free_blocks() const { return std::int64_t(free_.size()); }

  // Storage, for the kernels. Element offsets: head h, block b, slot t, feature d
  // at ((h * num_blocks + b) * block_size + t) * D + d; scales at (h * num_blocks + b) * block_size + t.
  const void* k_pool() const { return k_.data(); }
  const void* v_pool() const { return v_.data(); }
  const float* k_scales() const { return k_scales_.empty() ? nullptr : k_scales_.data(); }
  const float* v_scales() const { return v_scales_.empty() ? nullptr : v_scales_.data(); }

 private:
  struct Sequence {
    std::int64_t length = 0;
    std::vector<std::int32_t> blocks;
    bool live = true;
  };
  KvCache(const KvCacheConfig& config, Tensor k, Tensor v);
  Result<const Sequence*> find(std::int32_t seq) const;
  // k and v as append and write take them.
  Status check_tokens(const Tensor& k, const Tensor& v) const;
  // Token t of k and v into `offset` of `block` for every kv head; `row` is scratch.
  void store_token(const Tensor& k, const Tensor& v, std::int64_t t, std::int64_t block, std::int64_t offset,
                   std::vector<float>& row);

  KvCacheConfig config_;
  Tensor k_, v_;
  std::vector<float> k_scales_, v_scales_;
  std::vector<std::int32_t> free_;  // a stack: the most recently released block is reused first
  std::vector<Sequence> sequences_;
};

}  // namespace tessera::ops
