#pragma once
// Attention family. A kernel runs one unit: the query rows of one sequence
// and kv head — `rows` = positions × group, position-major, where the group
// is the query heads sharing the kv head (GQA rows are packed together so
// each block of K and V is read once for all of them) — against keys
// [t0, t1), flash-style: blocks of keys, an online softmax, the scores never
// leaving the core. It writes either the final normalized rows (and their
// log-sum-exp), or, for one piece of a split-KV decode, the unnormalized
// sums with each row's running max and sum, which the op merges.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>

#include "kernels/registry.hpp"
#include "tessera/core/dtype.hpp"

namespace tessera::kernels {

// Where the keys and values of one sequence and kv head live: contiguous
// (token t at t * token_stride) or paged (block_table[t / block_size], then
// slot t % block_size at slot * token_stride within the block).
struct KvSource {
  DType dtype;  // f32, bf16, or i8 (paged only: with per-token scales)
  const void* k;
  const void* v;
  std::int64_t k_token_stride, v_token_stride;  // elements; equal when paged
  const std::int32_t* block_table;   // nullptr: contiguous
  std::int64_t block_size;           // paged: tokens per block
  std::int64_t block_stride;         // paged: elements between physical blocks
  const float* k_scale;              // i8: scale of token t at block * scale_block_stride + slot
  const float* v_scale;
  std::int64_t scale_block_stride;
};

// Element offset of token t (and, for i8, of its scale) within a KvSource.
// `static`: each ISA translation unit keeps its own copy (see registry.hpp).
static inline std::int64_t kv_token_offset(const KvSource& kv, std::int64_t t, std::int64_t token_stride) {
  if (!kv.block_table) return t * token_stride;
  return kv.block_table[t / kv.block_size] * kv.block_stride + (t % kv.block_size) * token_stride;
}
static inline std::int64_t kv_scale_offset(const KvSource& kv, std::int64_t t) {
  return kv.block_table[t / kv.block_size] * kv.scale_block_stride + t % kv.block_size;
}

struct AttentionArgs {
  std::int64_t head_dim;
  std::int64_t rows;   // positions × group
  std::int64_t group;  // row r: position r / group, query head r % group of the kv head's group
  DType q_dtype;
  const void* q;  // position 0 of the unit, first head of the group
  std::int64_t q_pos_stride, q_head_stride;
  float scale;
  float softcap;  // > 0: each scaled logit s becomes softcap tanh(s / softcap), before the mask
  DType mask_dtype;
  const void* mask;  // nullptr or additive, at (position 0, first head, key 0)
  std::int64_t mask_pos_stride, mask_head_stride, mask_key_stride;
  bool causal;
  std::int64_t causal_offset;  // position p of the unit sees keys t <= p + causal_offset
  KvSource kv;
  bool prefetch_l1 = false;  // the tiling's: the decode kernels prefetch into L1, not L2
  // The rows of q of the task run after this one (same strides), or none:
  // requested during this one's last block.
  const void* next_q = nullptr;
  std::int64_t next_rows = 0;
};

struct AttentionOutput {
  // Final rows: o = sums / l (zeros where l = 0), lse = m + log(l) (-inf there).
  DType o_dtype;
  void* o;
  std::int64_t o_pos_stride, o_head_stride;
  float* lse;  // optional
  std::int64_t lse_pos_stride, lse_head_stride;
  // Optional: each group head's sink logit (AttentionAttrs::sinks), indexed
  // by the row's head within the group; it joins the final rows' denominator
  // (row_end). Split pieces leave it to the op's merge.
  const float* sinks;
  // Split-KV piece, when partial_o is set: [rows][head_dim] unnormalized sums,
  // the running max of the scaled logits and the sum of exp(logit - max).
  float* partial_o;
  float* partial_m;
  float* partial_l;
};

// How a final row ends, from its running max m (natural log units) and sum
// l of exp(logit - m): o = sums * inv, and lse. With a sink logit (or
// nullptr) the denominator is l + exp(sink - m), taken relative to the
// larger of m and the sink so that neither overflows. A row that sees no
// key (l = 0): inv 0 and lse -inf (the sink, with one). A NaN sum stays
// NaN, as in the reference. Where inv is 0 (no key, or a sink that outweighs
// the keys past f32's range) the callers write zeros rather than sums * 0:
// the SIMD rows' sums of a row that sees nothing hold 0 · V, NaN where V is
// infinite. Static, as kv_token_offset.
struct RowEnd {
  float inv, lse;
};
static inline RowEnd row_end(float m, float l, const float* sink) {
  if (l == 0.0f) return {0.0f, sink ? *sink : -std::numeric_limits<float>::infinity()};
  if (!sink) return {1.0f / l, m + std::log(l)};
  const float top = std::max(m, *sink), w = std::exp(m - top), denominator = l * w + std::exp(*sink - top);
  return {w / denominator, top + std::log(denominator)};
}

struct AttentionProblem {
  DType q, kv, o;
  std::int64_t head_dim;
  std::int64_t positions;  // query positions per sequence (the longest, for variable lengths)
  std::int64_t group;
  std::int64_t units;      // sequences × kv heads
  std::int64_t kv_len;     // keys per sequence (the longest)
  bool split_allowed;      // fixed-length or paged keys: a unit may take part of them
  std::int64_t threads;
  bool bf16_math;          // FpMath::bf16: f32 q may be rounded to bf16
  bool softcap;            // the logits are soft-capped (AttentionArgs::softcap)
};

struct AttentionTiling {
  std::int64_t positions_per_unit;  // query positions per task
  std::int64_t keys_per_split;      // 0: no split, every task takes all its keys
  bool prefetch_l1 = false;         // decode: the next blocks' rows are prefetched into L1 (else L2)
};

struct AttentionFamily {
  using Problem = AttentionProblem;
  using Tiling = AttentionTiling;
  using Run = void (*)(const AttentionArgs&, std::int64_t t0, std::int64_t t1, const AttentionOutput&);
};

std::span<const KernelRow<AttentionFamily>> rows(AttentionFamily);

namespace ref { void attention(const AttentionArgs& a, std::int64_t t0, std::int64_t t1, const AttentionOutput& out); }
namespace avx2 {
void flash_attention(const AttentionArgs& a, std::int64_t t0, std::int64_t t1, const AttentionOutput& out);
void attention_decode(const AttentionArgs& a, std::int64_t t0, std::int64_t t1, const AttentionOutput& out);
}  // namespace avx2
namespace avx512 {
void flash_attention(const AttentionArgs& a, std::int64_t t0, std::int64_t t1, const AttentionOutput& out);
void attention_decode(const AttentionArgs& a, std::int64_t t0, std::int64_t t1, const AttentionOutput& out);
}  // namespace avx512
namespace avx512_bf16 {
void attention_decode_vnni(const AttentionArgs& a, std::int64_t t0, std::int64_t t1, const AttentionOutput& out);
void attention_decode_bf16_dot(const AttentionArgs& a, std::int64_t t0, std::int64_t t1, const AttentionOutput& out);
void flash_attention_bf16_dot(const AttentionArgs& a, std::int64_t t0, std::int64_t t1, const AttentionOutput& out);
}
namespace amx { void flash_attention_bf16(const AttentionArgs& a, std::int64_t t0, std::int64_t t1, const AttentionOutput& out); }

}  // namespace tessera::kernels
