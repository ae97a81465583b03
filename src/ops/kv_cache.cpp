#include "tessera/ops/kv_cache.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/element.hpp"

namespace tessera::ops {

namespace {

// Symmetric int8, one scale per token and head: x / scale is clamped to
// [-127, 127] first, then rounded to nearest even by adding and subtracting
// 1.5 * 2^23 (exact for |x| < 2^22, default rounding mode). Returns the
// scale, max|x| / 127.
float quantize_row(const float* row, std::int64_t dim, std::int8_t* q) {
  float amax = 0.0f;
  for (std::int64_t d = 0; d < dim; ++d) amax = std::max(amax, std::fabs(row[d]));
  const float scale = amax / 127.0f;
  for (std::int64_t d = 0; d < dim; ++d) {
    const float x = scale > 0.0f ? std::clamp(row[d] / scale, -127.0f, 127.0f) : 0.0f;
    q[d] = std::int8_t((x + 0x1.8p23f) - 0x1.8p23f);
  }
  return scale;
}

}  // namespace

Result<std::shared_ptr<KvCache>> KvCache::create(const KvCacheConfig& c) {
  if (c.num_blocks <= 0 || c.num_blocks > INT32_MAX)
    return Status::invalid_argument(fmt::format("num_blocks: {} is not in [1, 2^31)", c.num_blocks));
  if (c.block_size != 16 && c.block_size != 32)
    return Status::invalid_argument(fmt::format("block_size: {} is not 16 or 32", c.block_size));
  if (c.kv_heads <= 0) return Status::invalid_argument(fmt::format("kv_heads: {} is not positive", c.kv_heads));
  if (c.head_dim <= 0) return Status::invalid_argument(fmt::format("head_dim: {} is not positive", c.head_dim));
  if (c.dtype != DType::f32 && c.dtype != DType::bf16 && c.dtype != DType::i8)
    return Status::invalid_argument(fmt::format("dtype: {} is not f32, bf16 or i8", to_string(c.dtype)));
  const Shape shape{c.kv_heads, c.num_blocks, c.block_size, c.head_dim};
  TESSERA_ASSIGN_OR_RETURN(Tensor k, Tensor::empty(c.dtype, shape));
  TESSERA_ASSIGN_OR_RETURN(Tensor v, Tensor::empty(c.dtype, shape));
  std::shared_ptr<KvCache> cache(new KvCache(c, std::move(k), std::move(v)));
  return cache;
}

KvCache::KvCache(const KvCacheConfig& config, Tensor k, Tensor v) : config_(config), k_(std::move(k)), v_(std::move(v)) {
  if (config.dtype == DType::i8) {
    const auto slots = std::size_t(config.num_blocks * config.kv_heads * config.block_size);
    k_scales_.assign(slots, 0.0f);
    v_scales_.assign(slots, 0.0f);
  }
  // Highest id on top: blocks are handed out in increasing order.
  for (std::int64_t b = config.num_blocks - 1; b >= 0; --b) free_.push_back(std::int32_t(b));
}

std::int32_t KvCache::add_sequence() {
  sequences_.emplace_back();
  return std::int32_t(sequences_.size() - 1);
}

Result<const KvCache::Sequence*> KvCache::find(std::int32_t seq) const {
  if (seq < 0 || std::size_t(seq) >= sequences_.size())
    return Status::invalid_argument(fmt::format("seq: {} is not a sequence of this cache", seq));
  if (!sequences_[std::size_t(seq)].live) return Status::invalid_argument(fmt::format("seq: {} was released", seq));
  return &sequences_[std::size_t(seq)];
}

Result<std::int64_t> KvCache::length(std::int32_t seq) const {
  TESSERA_ASSIGN_OR_RETURN(const Sequence* s, find(seq));
  return s->length;
}

Result<std::span<const std::int32_t>> KvCache::block_table(std::int32_t seq) const {
  TESSERA_ASSIGN_OR_RETURN(const Sequence* s, find(seq));
  return std::span<const std::int32_t>(s->blocks);
}

Status KvCache::release(std::int32_t seq) {
  TESSERA_RETURN_IF_ERROR(find(seq).status());
  Sequence& s = sequences_[std::size_t(seq)];
  // Reversed, so the sequence's first block is the next one handed out.
  free_.insert(free_.end(), s.blocks.rbegin(), s.blocks.rend());
  s = Sequence{.length = 0, .blocks = {}, .live = false};
  return Status{};
}

Status KvCache::truncate(std::int32_t seq, std::int64_t length) {
  TESSERA_RETURN_IF_ERROR(find(seq).status());
  Sequence& s = sequences_[std::size_t(seq)];
  if (length < 0 || length > s.length)
    return Status::invalid_argument(fmt::format("length: {} is not in [0, {}], the tokens sequence {} holds", length, s.length, seq));
  const auto kept = std::size_t((length + config_.block_size - 1) / config_.block_size);
  free_.insert(free_.end(), s.blocks.rbegin(), s.blocks.rend() - std::ptrdiff_t(kept));  // as release: the first freed is reused first
  s.blocks.resize(kept);
  s.length = length;
  return Status{};
}

Status KvCache::check_tokens(const Tensor& k, const Tensor& v) const {
  const KvCacheConfig& c = config_;
  const Shape expected{k.rank() == 3 ? k.dim(0) : 0, c.kv_heads, c.head_dim};
  for (const auto& [t, name] : {std::pair{&k, "k"}, std::pair{&v, "v"}}) {
    if (!t->defined()) return Status::invalid_argument(fmt::format("{}: no tensor given", name));
    if (t->dtype() != DType::f32 && t->dtype() != DType::bf16)
      return Status::invalid_argument(fmt::format("{}: dtype {} is not f32 or bf16", name, to_string(t->dtype())));
    if (t->shape() != expected)
      return Status::invalid_argument(fmt::format("{}: shape {} is not [T, kv_heads = {}, head_dim = {}]{}", name,
                                                  t->shape().to_string(), c.kv_heads, c.head_dim,
                                                  name[0] == 'v' ? " matching k" : ""));
  }
  return {};
}

void KvCache::store_token(const Tensor& k, const Tensor& v, std::int64_t t, std::int64_t block, std::int64_t offset,
                          std::vector<float>& row) {
  const KvCacheConfig& c = config_;
  const std::int64_t dim = c.head_dim;
  for (std::int64_t h = 0; h < c.kv_heads; ++h) {
    const std::int64_t slot = (h * c.num_blocks + block) * c.block_size + offset;
    for (const auto& [src, dst, scales] : {std::tuple{&k, &k_, &k_scales_}, std::tuple{&v, &v_, &v_scales_}}) {
      const std::int64_t at = t * src->strides()[0] + h * src->strides()[1], step = src->strides()[2];
      if (src->dtype() == c.dtype && (step == 1 || dim == 1)) {  // a plain copy of the row
        const std::int64_t bytes = dim * bytes_of(c.dtype);
        std::memcpy(static_cast<char*>(dst->data()) + slot * bytes, static_cast<const char*>(src->data()) + at * bytes_of(c.dtype), std::size_t(bytes));
        continue;
      }
      // The row as f32, then in the cache's type: the dtypes switched once a
      // row (per element, appending 4096 tokens of 8 heads x 128 took 51 ms
      // into a bf16 cache, 37 into an int8 one; now 3.8 and 13).
      row.resize(std::size_t(dim));
      detail::load_floats(src->data(), src->dtype(), at, step, dim, row.data());
      if (c.dtype == DType::i8) (*scales)[std::size_t(slot)] = quantize_row(row.data(), dim, static_cast<std::int8_t*>(dst->data()) + slot * dim);
      else detail::store_floats(dst->data(), c.dtype, slot * dim, row.data(), dim);
    }
  }
}

Status KvCache::append(std::int32_t seq, const Tensor& k, const Tensor& v) {
  TESSERA_RETURN_IF_ERROR(find(seq).status());
  TESSERA_RETURN_IF_ERROR(check_tokens(k, v));
  const KvCacheConfig& c = config_;
  Sequence& s = sequences_[std::size_t(seq)];
  const std::int64_t tokens = k.dim(0), bs = c.block_size;
  const std::int64_t needed = (s.length + tokens + bs - 1) / bs - std::int64_t(s.blocks.size());
  if (needed > free_blocks())
    return Status::out_of_memory(fmt::format("kv cache: {} more blocks needed for {} tokens, {} free", needed,
                                                  tokens, free_blocks()));
  for (std::int64_t i = 0; i < needed; ++i) {
    s.blocks.push_back(free_.back());
    free_.pop_back();
  }
  std::vector<float> row;
  for (std::int64_t t = 0; t < tokens; ++t) {
    const std::int64_t pos = s.length + t;
    store_token(k, v, t, s.blocks[std::size_t(pos / bs)], pos % bs, row);
  }
  s.length += tokens;
  return Status{};
}

Status KvCache::write(const Tensor& slots, const Tensor& k, const Tensor& v) {
  TESSERA_RETURN_IF_ERROR(check_tokens(k, v));
  const KvCacheConfig& c = config_;
  const std::int64_t tokens = k.dim(0), pool_slots = c.num_blocks * c.block_size;
  if (!slots.defined() || (slots.dtype() != DType::i32 && slots.dtype() != DType::i64) || slots.rank() != 1 || slots.dim(0) != tokens)
    return Status::invalid_argument(fmt::format("slots: {} is not i32 or i64 [T = {}] (k's tokens)",
                                                slots.defined() ? slots.desc().to_string() : "no tensor", tokens));
  const auto slot_of = [&](std::int64_t t) { return detail::load_index(slots.data(), slots.dtype(), t * slots.strides()[0]); };
  for (std::int64_t t = 0; t < tokens; ++t)  // all checked before anything is written
    if (slot_of(t) >= pool_slots)
      return Status::invalid_argument(fmt::format("slots[{}]: {} is past the pool's {} slots (num_blocks {} x block_size {})", t,
                                                  slot_of(t), pool_slots, c.num_blocks, c.block_size));
  std::vector<float> row;
  for (std::int64_t t = 0; t < tokens; ++t)
    if (const std::int64_t slot = slot_of(t); slot >= 0) store_token(k, v, t, slot / c.block_size, slot % c.block_size, row);
  return Status{};
}

}  // namespace tessera::ops
