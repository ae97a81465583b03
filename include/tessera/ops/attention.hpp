#pragma once
// Attention: o = softmax(scale · q kᵀ + mask [+ ALiBi]) · v, computed flash-style — the
// score matrix is processed a block of keys at a time with an online softmax
// and never reaches memory, so memory use is O(S), not O(S²).
//
// Layouts: q [B, Sq, Hq, D], k and v [B, Skv, Hkv, D], o [B, Sq, Hq, D]. Any
// strides with a unit stride along D, so a [B, H, S, D] tensor is passed as a
// permuted view. GQA / MQA: Hq is a multiple of Hkv; query head h reads kv
// head h / (Hq / Hkv). q, o and k / v (one dtype for both) are each f32 or
// bf16: f32 queries against a bf16 KV cache, as PagedAttention over a bf16
// KvCache. Compute and accumulation are f32 (FpMath below).
//
// causal: query i of a sequence with Sq queries and Skv keys sees keys
// j <= i + Skv - Sq (the queries are the last Sq positions, as with a KV
// cache). A row that sees no key with a finite logit gives zeros, and its
// log-sum-exp is -inf (its sink, AttentionAttrs::sinks, with one).
//
// Decode (Sq <= 8, long Skv) takes a split-KV kernel: the keys of a sequence
// are split across cores and the pieces merged by their log-sum-exp, so a
// single sequence keeps every core busy.
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "tessera/ops/kv_cache.hpp"
#include "tessera/ops/plan.hpp"
#include "tessera/runtime/context.hpp"

namespace tessera::ops {

// How f32 queries may be computed (oneDNN's fpmath_mode). strict: in f32,
// a bf16 cache widened to f32. bf16: a kernel may round f32 q and the
// probabilities to bf16 and multiply in bf16 dot products, as it does for
// bf16 q, within the bf16 attention tolerance. Where the keys and values
// are bf16 (a bf16 KvCache), more than 8 query positions (prefill in
// chunks) then take the bf16 flash kernels, ~1.8x faster; decode keeps
// the f32 kernel, which reads a cache past the L3 faster.
enum class FpMath { strict, bf16 };

struct AttentionAttrs {
  float scale = 0.0f;   // 0: 1 / sqrt(D)
  bool causal = false;
  FpMath fpmath = FpMath::strict;
  // Sliding window (Mistral, Gemma's local layers), with causal: query i
  // sees only the `window` latest keys it would see, j in (i + Skv - Sq -
  // window, i + Skv - Sq]; keys before a block's window are not read. 0:
  // no window. Not with a mask (fold the window into it).
  std::int64_t window = 0;
  // ALiBi (BLOOM, MPT, Baichuan-13B, Falcon's ALiBi variants): one slope per
  // query head (Hq of them, or none), adding -slope * |i + Skv - Sq - j| to
  // query i's logit of key j (flash-attn's and vLLM's form; under causal,
  // slope * (j - i - Skv + Sq) for the keys a query sees), so lse includes
  // it. With a window too; not with a mask (fold the biases into it). The
  // biases take Hq x (keys + queries) floats with the plan (the totals'
  // with variable lengths; paged: max_kv_len plus q's).
  std::vector<float> alibi_slopes;
  // Attention sinks (gpt-oss; vLLM's and flash-attn's `sinks`): one learned
  // logit per query head (Hq of them, or none) that joins each row's softmax
  // denominator with no value of its own, o_i = Σ_j e^(s_ij) v_j / (e^sink +
  // Σ_j e^(s_ij)) over the scaled, masked logits s; the sink is not scaled.
  // lse is the log of that whole denominator, so a row that sees no key gives
  // zeros and lse = sink. With masks, windows, ALiBi and paged caches. (So
  // the lse of calls over parts of the keys, merged, would count the sink
  // once per part: give the sinks to one part only.)
  std::vector<float> sinks;
  // Logit soft-capping (Gemma 2, Grok; flash-attn's and vLLM's softcap): each
  // scaled logit s becomes softcap * tanh(s / softcap), before the mask and
  // ALiBi are added. 0: none; else within [1e-30, 1e30] (the kernels keep the
  // cap and its reciprocal finite). The AVX-512, AVX512-BF16 and AMX kernel rows
  // have no capping step yet: capped attention takes the AVX2 rows there.
  float softcap = 0.0f;
};

// Optional operands. run() takes inputs {q, k, v, [mask], [cu_seqlens_q,
// cu_seqlens_kv]} and outputs {o, [lse]} in this order.
struct AttentionOptions {
  // Additive, f32 or bf16, broadcasting (numpy rules) to [B, Hq, Sq, Skv].
  // A key-padding mask is [B, 1, 1, Skv] holding 0 or -inf.
  std::optional<TensorDesc> mask;
  // Variable lengths without padding: `varlen_batch` sequences stored back to
  // back, q and o [total_q, Hq, D], k and v [total_kv, Hkv, D]; the inputs
  // cu_seqlens_q and cu_seqlens_kv (i32 [varlen_batch + 1]) hold each
  // sequence's start, from 0 to the total, non-decreasing (run() checks).
  // 0: fixed lengths. No mask with variable lengths.
  std::int64_t varlen_batch = 0;
  // Log-sum-exp of each row's scaled logits (natural log), f32 [B, Hq, Sq]
  // (variable lengths: [Hq, total_q]).
  std::optional<TensorDesc> lse;
};

struct Attention {
  static Result<PlanPtr> plan(Context& ctx, const TensorDesc& q, const TensorDesc& k, const TensorDesc& v,
                              const TensorDesc& o, const AttentionAttrs& attrs = {},
                              const AttentionOptions& options = {});
};

Status attention(Stream& stream, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                 const AttentionAttrs& attrs = {});
Status attention(Stream& stream, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                 const Tensor& o, const AttentionAttrs& attrs = {});

// Attention of new queries against sequences in a paged KV cache.
// q and o [B, Sq, Hq, D]; input seq_ids (i32 [B]) names each row's sequence,
// whose keys (its current length L, including the Sq newest tokens, already
// appended) are read straight from the cache's blocks. With causal, query i
// sees keys j <= i + L - Sq. Inputs {q, seq_ids}, outputs {o, [lse]}.
// Variable lengths (continuous batching: prefill chunks and decode tokens in
// one call): q and o [total_q, Hq, D], the sequences' queries back to back,
// and a third input cu_seqlens_q (i32 [B + 1]) holding each one's start,
// from 0 to total_q, non-decreasing (a sequence may have no new queries);
// lse [Hq, total_q]. Each sequence's queries take the kernel row for their
// count (decode rows for a few, flash rows for a prefill chunk).
struct PagedAttention {
  // Plans for sequences of up to `max_kv_len` tokens (this sizes the split-KV
  // workspace); run() reports a longer one. The plan keeps the cache alive.
  // mask: additive, f32 or bf16, broadcasting to [B, Hq, Sq, keys] with
  // column j for key j of the row's sequence (keys: at least the longest
  // sequence's length, which run() checks, or 1 for any): tree attention of
  // speculative drafts, ALiBi's biases. With fixed lengths only; an input
  // after seq_ids.
  static Result<PlanPtr> plan(Context& ctx, std::shared_ptr<const KvCache> cache, const TensorDesc& q,
                              const TensorDesc& seq_ids, const TensorDesc& o, std::int64_t max_kv_len,
                              const AttentionAttrs& attrs = {}, const std::optional<TensorDesc>& lse = {},
                              const std::optional<TensorDesc>& mask = {});
  // Sequences whose blocks the caller manages (an engine's own block
  // manager, vLLM's block tables; their keys and values written by
  // KvCache::write): in place of seq_ids, block_tables i32 [B, max_blocks]
  // (unit stride along a row) lists each sequence's blocks in order and
  // seq_lens i32 [B] holds its length L. Inputs {q, block_tables, seq_lens,
  // [cu_seqlens_q or mask]}. run() checks each length against max_kv_len and
  // the table's width, and every block it reads against the pool.
  static Result<PlanPtr> plan_block_tables(Context& ctx, std::shared_ptr<const KvCache> cache, const TensorDesc& q,
                                           const TensorDesc& block_tables, const TensorDesc& seq_lens, const TensorDesc& o,
                                           std::int64_t max_kv_len, const AttentionAttrs& attrs = {},
                                           const std::optional<TensorDesc>& lse = {}, const std::optional<TensorDesc>& mask = {});
};

// One-shot: plans per power-of-two bucket of the longest sequence, so a
// sequence growing token by token re-plans only when it doubles.
Status paged_attention(Stream& stream, const std::shared_ptr<const KvCache>& cache, const Tensor& q,
                       const Tensor& seq_ids, const Tensor& o, const AttentionAttrs& attrs = {});
// Variable lengths: q and o [total_q, Hq, D], cu_seqlens_q i32 [B + 1]. (Its
// own name: an overload of paged_attention would make a call ending in
// `o, {}` ambiguous.)
Status paged_attention_varlen(Stream& stream, const std::shared_ptr<const KvCache>& cache, const Tensor& q,
                              const Tensor& seq_ids, const Tensor& cu_seqlens_q, const Tensor& o, const AttentionAttrs& attrs = {});
// Block tables the caller manages (PagedAttention::plan_block_tables), fixed lengths.
Status paged_attention_block_tables(Stream& stream, const std::shared_ptr<const KvCache>& cache, const Tensor& q,
                                    const Tensor& block_tables, const Tensor& seq_lens, const Tensor& o,
                                    const AttentionAttrs& attrs = {});

}  // namespace tessera::ops
