// `tessera bench attention`: Tessera's fused Attention against the unfused
// chain (Tessera's own matmul + softmax + matmul, and oneDNN's) on prefill
// and cross-attention shapes, and PagedAttention over a KvCache against the
// contiguous Attention on decode shapes, measured cold as a share of the
// read bandwidth measured in the same run.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench/harness.hpp"
#include "bench/report.hpp"
#include "commands.hpp"
#include "tessera/core/aligned.hpp"
#include "tessera/core/hw.hpp"
#include "tessera/core/tensor.hpp"
#include "tessera/ops/attention.hpp"
#include "tessera/ops/kv_cache.hpp"
#include "tessera/ops/matmul.hpp"
#include "tessera/ops/softmax.hpp"
#include "tessera/runtime/context.hpp"
#include "tessera/runtime/stream.hpp"
#if TESSERA_HAVE_ONEDNN
#include "bench/peers_onednn.hpp"
#endif

namespace tessera::app {

namespace {

using bench::AttentionImpl;
using bench::AttentionShape;
using bench::Contexts;
using bench::Row;
using bench::threads_label;

struct AttentionBenchOptions {
  std::vector<int> threads{1, 2};
  std::vector<std::string> dtypes{"f32", "bf16", "int8"};
  std::vector<std::string> cases;  // substrings of case names; empty: all
  int repeats = 5;
  bool quick = false;
  bool json = false;
  bool all_peers = false;
};

// The unfused peers materialize the [B, Hq, Sq, Skv] f32 scores; above this
// they are not run unless asked (prefill S = 4096: 2 GiB, and minutes on 2 cores).
constexpr std::int64_t kMaxPeerScoreBytes = std::int64_t(1) << 30;
constexpr std::int64_t kBlockSize = 16;  // KvCache tokens per block

// Prefill and cross-attention: dense, warm (compute-bound).
struct DenseCase {
  std::string name;
  AttentionShape shape;
};

// Decode: one new token per sequence (Sq = 1) against L cached tokens, cold.
struct DecodeCase {
  std::string name;
  std::int64_t batch, kv_len, q_heads, kv_heads, head_dim;
};

std::int64_t elt_bytes(DType t) { return t == DType::f32 ? 4 : t == DType::bf16 ? 2 : 1; }

// K and V bytes a decode step reads: 2 x B x L x Hkv x D x element size,
// plus for int8 the f32 scale of each token and head. One model for paged
// and contiguous.
std::int64_t kv_bytes(DType t, std::int64_t batch, std::int64_t len, std::int64_t kv_heads, std::int64_t head_dim) {
  return 2 * batch * len * kv_heads * (head_dim * elt_bytes(t) + (t == DType::i8 ? 4 : 0));
}

Status alloc_workspace(AlignedBuffer& ws, std::int64_t bytes) {
  ws.reset(aligned_alloc_bytes(std::size_t(std::max<std::int64_t>(bytes, 1))));
  return ws ? Status{} : Status::out_of_memory(fmt::format("workspace of {} bytes", bytes));
}

// ------------------------------------------------------------------ dense (prefill, cross)

// q and o [B, Sq, Hq, D], k and v [B, Skv, Hkv, D], contiguous, filled.
struct DenseTensors {
  Tensor q, k, v, o;
};

Result<DenseTensors> make_dense_tensors(const AttentionShape& s, DType dtype) {
  DenseTensors t;
  TESSERA_ASSIGN_OR_RETURN(t.q, Tensor::empty(dtype, {s.batch, s.q_len, s.q_heads, s.head_dim}));
  TESSERA_ASSIGN_OR_RETURN(t.k, Tensor::empty(dtype, {s.batch, s.kv_len, s.kv_heads, s.head_dim}));
  TESSERA_ASSIGN_OR_RETURN(t.v, Tensor::empty(dtype, {s.batch, s.kv_len, s.kv_heads, s.head_dim}));
  TESSERA_ASSIGN_OR_RETURN(t.o, Tensor::empty(dtype, {s.batch, s.q_len, s.q_heads, s.head_dim}));
  bench::fill_tensor(t.q, 11);
  bench::fill_tensor(t.k, 12);
  bench::fill_tensor(t.v, 13);
  return t;
}

// Tessera's fused Attention on [B, S, H, D] tensors.
class TesseraAttention final : public AttentionImpl {
 public:
  static Result<std::unique_ptr<AttentionImpl>> make(Contexts& contexts, const AttentionShape& shape, DType dtype) {
    TESSERA_ASSIGN_OR_RETURN(DenseTensors t, make_dense_tensors(shape, dtype));
    return std::unique_ptr<AttentionImpl>(new TesseraAttention(contexts, shape, std::move(t)));
  }

  Status prepare(int threads) override {
    Context& ctx = contexts_.at(threads);
    TESSERA_ASSIGN_OR_RETURN(plan_, ops::Attention::plan(ctx, t_.q.desc(), t_.k.desc(), t_.v.desc(), t_.o.desc(),
                                                         {.causal = shape_.causal}));
    TESSERA_RETURN_IF_ERROR(alloc_workspace(workspace_, plan_->workspace_bytes()));
    stream_.emplace(ctx);
    return {};
  }

  Status run() override {
    const Tensor in[] = {t_.q, t_.k, t_.v}, out[] = {t_.o};
    TESSERA_RETURN_IF_ERROR(plan_->run(*stream_, in, out, workspace_.get()));
    return stream_->synchronize();
  }

  std::string kernel() const override { return plan_ ? std::string(plan_->kernel()) : std::string(); }

 private:
  TesseraAttention(Contexts& contexts, const AttentionShape& shape, DenseTensors t)
      : contexts_(contexts), shape_(shape), t_(std::move(t)) {}

  Contexts& contexts_;
  AttentionShape shape_;
  DenseTensors t_;
  ops::PlanPtr plan_;
  AlignedBuffer workspace_;
  std::optional<Stream> stream_;
};

// The same attention from Tessera's own ops, the scores materialized:
//   s = q kᵀ             Matmul, batched over [B, Hkv, G] (G = Hq / Hkv query
//                        heads per kv head; kᵀ broadcast over G), f32 scores
//   p = softmax(s / √D)  Softmax with its scale and causal options; in place
//                        for f32, into a bf16 p for bf16
//   o = p v              Matmul, written through a view straight into o
// q, k, v and o stay [B, S, H, D]; the [B, Hkv, G, S, D] operands are views
// (reshape + permute), no copies.
class TesseraUnfused final : public AttentionImpl {
 public:
  static Result<std::unique_ptr<AttentionImpl>> make(Contexts& contexts, const AttentionShape& s, DType dtype) {
    TESSERA_ASSIGN_OR_RETURN(DenseTensors t, make_dense_tensors(s, dtype));
    const std::int64_t g = s.q_heads / s.kv_heads;
    std::unique_ptr<TesseraUnfused> u(new TesseraUnfused(contexts, s, t));
    // [B, S, Hq, D] -> [B, S, Hkv, G, D] -> [B, Hkv, G, S, D]
    TESSERA_ASSIGN_OR_RETURN(Tensor q5, t.q.reshape({s.batch, s.q_len, s.kv_heads, g, s.head_dim}));
    TESSERA_ASSIGN_OR_RETURN(u->q_, q5.permute({0, 2, 3, 1, 4}));
    TESSERA_ASSIGN_OR_RETURN(Tensor o5, t.o.reshape({s.batch, s.q_len, s.kv_heads, g, s.head_dim}));
    TESSERA_ASSIGN_OR_RETURN(u->o_, o5.permute({0, 2, 3, 1, 4}));
    // [B, Skv, Hkv, D] -> [B, Skv, Hkv, 1, D] -> kᵀ [B, Hkv, 1, D, Skv], v [B, Hkv, 1, Skv, D]
    TESSERA_ASSIGN_OR_RETURN(Tensor k5, t.k.reshape({s.batch, s.kv_len, s.kv_heads, 1, s.head_dim}));
    TESSERA_ASSIGN_OR_RETURN(u->kt_, k5.permute({0, 2, 3, 4, 1}));
    TESSERA_ASSIGN_OR_RETURN(Tensor v5, t.v.reshape({s.batch, s.kv_len, s.kv_heads, 1, s.head_dim}));
    TESSERA_ASSIGN_OR_RETURN(u->v_, v5.permute({0, 2, 3, 1, 4}));
    const Shape scores{s.batch, s.kv_heads, g, s.q_len, s.kv_len};
    TESSERA_ASSIGN_OR_RETURN(u->scores_, Tensor::empty(DType::f32, scores));
    if (dtype == DType::f32) {
      u->probs_ = u->scores_;  // softmax in place
    } else {
      TESSERA_ASSIGN_OR_RETURN(u->probs_, Tensor::empty(dtype, scores));
    }
    return std::unique_ptr<AttentionImpl>(std::move(u));
  }

  Status prepare(int threads) override {
    Context& ctx = contexts_.at(threads);
    TESSERA_ASSIGN_OR_RETURN(qk_, ops::Matmul::plan(ctx, q_.desc(), kt_.desc(), scores_.desc()));
    TESSERA_ASSIGN_OR_RETURN(
        softmax_, ops::Softmax::plan(ctx, scores_.desc(), std::nullopt, probs_.desc(),
                                     {.scale = 1.0f / std::sqrt(float(shape_.head_dim)), .causal = shape_.causal}));
    TESSERA_ASSIGN_OR_RETURN(pv_, ops::Matmul::plan(ctx, probs_.desc(), v_.desc(), o_.desc()));
    TESSERA_RETURN_IF_ERROR(alloc_workspace(
        workspace_, std::max({qk_->workspace_bytes(), softmax_->workspace_bytes(), pv_->workspace_bytes()})));
    stream_.emplace(ctx);
    return {};
  }

  Status run() override {
    TESSERA_RETURN_IF_ERROR(qk_->run(*stream_, {q_, kt_}, {scores_}, workspace_.get()));
    TESSERA_RETURN_IF_ERROR(softmax_->run(*stream_, {scores_}, {probs_}, workspace_.get()));
    TESSERA_RETURN_IF_ERROR(pv_->run(*stream_, {probs_, v_}, {o_}, workspace_.get()));
    return stream_->synchronize();
  }

  std::string kernel() const override {
    return qk_ ? fmt::format("{} + {} + {}", qk_->kernel(), softmax_->kernel(), pv_->kernel()) : std::string();
  }

 private:
  TesseraUnfused(Contexts& contexts, const AttentionShape& shape, DenseTensors t)
      : contexts_(contexts), shape_(shape), t_(std::move(t)) {}

  Contexts& contexts_;
  AttentionShape shape_;
  DenseTensors t_;                      // owns the storage the views below share
  Tensor q_, kt_, v_, o_;               // [B, Hkv, G | 1, ., .] views
  Tensor scores_, probs_;               // [B, Hkv, G, Sq, Skv]
  ops::PlanPtr qk_, softmax_, pv_;
  AlignedBuffer workspace_;
  std::optional<Stream> stream_;
};

// ------------------------------------------------------------------ decode

// K and V of the longest decode case, [L, Hkv, D], f32 and bf16 (the same
// values): every cache and contiguous copy is filled from these.
struct DecodeSource {
  Tensor k_f32, v_f32, k_bf16, v_bf16;
};

Result<DecodeSource> make_decode_source(std::int64_t len, std::int64_t kv_heads, std::int64_t head_dim) {
  DecodeSource s;
  TESSERA_ASSIGN_OR_RETURN(s.k_f32, Tensor::empty(DType::f32, {len, kv_heads, head_dim}));
  TESSERA_ASSIGN_OR_RETURN(s.v_f32, Tensor::empty(DType::f32, {len, kv_heads, head_dim}));
  TESSERA_ASSIGN_OR_RETURN(s.k_bf16, Tensor::empty(DType::bf16, {len, kv_heads, head_dim}));
  TESSERA_ASSIGN_OR_RETURN(s.v_bf16, Tensor::empty(DType::bf16, {len, kv_heads, head_dim}));
  bench::fill_tensor(s.k_f32, 21);
  bench::fill_tensor(s.v_f32, 22);
  bench::fill_tensor(s.k_bf16, 21);
  bench::fill_tensor(s.v_bf16, 22);
  return s;
}

// The query (and output) of a decode step: [B, 1, Hq, D]; bf16 with a bf16
// cache, else f32 (also with an int8 cache).
Result<Tensor> make_decode_query(const DecodeCase& c, DType kv_dtype, std::uint64_t seed) {
  TESSERA_ASSIGN_OR_RETURN(Tensor q, Tensor::empty(kv_dtype == DType::bf16 ? DType::bf16 : DType::f32,
                                                   {c.batch, 1, c.q_heads, c.head_dim}));
  bench::fill_tensor(q, seed);
  return q;
}

// Distinct copies (sets of B sequences, like the layers of a model) that
// together exceed `cold_bytes`, so each call streams its K and V from DRAM.
std::int64_t cold_sets(std::int64_t set_bytes, std::int64_t cold_bytes) {
  return cold_bytes / std::max<std::int64_t>(set_bytes, 1) + 1;
}

// PagedAttention over one KvCache (block size 16) that holds every set's
// sequences; each call reads the next set, named by its seq_ids.
class PagedDecode final : public AttentionImpl {
 public:
  static Result<std::unique_ptr<AttentionImpl>> make(Contexts& contexts, const DecodeCase& c, DType kv_dtype,
                                                     const DecodeSource& src, std::int64_t cold_bytes) {
    std::unique_ptr<PagedDecode> p(new PagedDecode(contexts, c));
    const std::int64_t sets = cold_sets(kv_bytes(kv_dtype, c.batch, c.kv_len, c.kv_heads, c.head_dim), cold_bytes);
    const std::int64_t blocks_per_seq = (c.kv_len + kBlockSize - 1) / kBlockSize;
    TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<ops::KvCache> cache,
                             ops::KvCache::create({.num_blocks = sets * c.batch * blocks_per_seq,
                                                   .block_size = kBlockSize,
                                                   .kv_heads = c.kv_heads,
                                                   .head_dim = c.head_dim,
                                                   .dtype = kv_dtype}));
    // The source in the cache's type where it has one (no rounding on the way in), else f32 (int8 quantizes it).
    const bool bf16 = kv_dtype == DType::bf16;
    TESSERA_ASSIGN_OR_RETURN(Tensor k, (bf16 ? src.k_bf16 : src.k_f32).slice(0, 0, c.kv_len));
    TESSERA_ASSIGN_OR_RETURN(Tensor v, (bf16 ? src.v_bf16 : src.v_f32).slice(0, 0, c.kv_len));
    for (std::int64_t s = 0; s < sets; ++s) {
      TESSERA_ASSIGN_OR_RETURN(Tensor ids, Tensor::empty(DType::i32, {c.batch}));
      for (std::int64_t b = 0; b < c.batch; ++b) {
        const std::int32_t seq = cache->add_sequence();
        TESSERA_RETURN_IF_ERROR(cache->append(seq, k, v));
        ids.data_as<std::int32_t>()[b] = seq;
      }
      p->seq_ids_.push_back(std::move(ids));
    }
    p->cache_ = std::move(cache);
    TESSERA_ASSIGN_OR_RETURN(p->q_, make_decode_query(c, kv_dtype, 23));
    TESSERA_ASSIGN_OR_RETURN(p->o_, Tensor::empty(p->q_.dtype(), p->q_.shape()));
    return std::unique_ptr<AttentionImpl>(std::move(p));
  }

  Status prepare(int threads) override {
    Context& ctx = contexts_.at(threads);
    // Sq = 1 sees every key, so causal would change nothing.
    TESSERA_ASSIGN_OR_RETURN(plan_, ops::PagedAttention::plan(ctx, cache_, q_.desc(), seq_ids_.front().desc(),
                                                              o_.desc(), case_.kv_len));
    TESSERA_RETURN_IF_ERROR(alloc_workspace(workspace_, plan_->workspace_bytes()));
    stream_.emplace(ctx);
    next_ = 0;
    return {};
  }

  Status run() override {
    const Tensor in[] = {q_, seq_ids_[next_]}, out[] = {o_};
    next_ = (next_ + 1) % seq_ids_.size();
    TESSERA_RETURN_IF_ERROR(plan_->run(*stream_, in, out, workspace_.get()));
    return stream_->synchronize();
  }

  std::int64_t copies() const override { return std::int64_t(seq_ids_.size()); }
  std::string kernel() const override { return plan_ ? std::string(plan_->kernel()) : std::string(); }

 private:
  PagedDecode(Contexts& contexts, const DecodeCase& c) : contexts_(contexts), case_(c) {}

  Contexts& contexts_;
  DecodeCase case_;
  std::shared_ptr<const ops::KvCache> cache_;
  std::vector<Tensor> seq_ids_;  // i32 [B] per set
  Tensor q_, o_;
  ops::PlanPtr plan_;
  AlignedBuffer workspace_;
  std::optional<Stream> stream_;
  std::size_t next_ = 0;
};

// The contiguous Attention on k and v [B, L, Hkv, D], one pair per set: views
// of head-major storage [B, Hkv, L, D], the layout LLM frameworks keep their
// caches in, where one head's keys are one run of memory. Token-major
// storage puts a head's rows a token apart (4 KiB at Hkv 8, D 128, f32), and
// reading 512 B of every 4 KiB is what memory serves worst: a read-only model
// of that pattern ran at ~10 GB/s against 21-28 sequential (AMD EPYC, Zen 4,
// 1 thread, software prefetch or not); the kernel there measured 12-16.
class ContiguousDecode final : public AttentionImpl {
 public:
  static Result<std::unique_ptr<AttentionImpl>> make(Contexts& contexts, const DecodeCase& c, DType kv_dtype,
                                                     const DecodeSource& src, std::int64_t cold_bytes) {
    if (kv_dtype != DType::f32 && kv_dtype != DType::bf16)
      return Status::unsupported("the contiguous Attention takes f32 or bf16 k and v");
    std::unique_ptr<ContiguousDecode> d(new ContiguousDecode(contexts, c));
    const std::int64_t sets = cold_sets(kv_bytes(kv_dtype, c.batch, c.kv_len, c.kv_heads, c.head_dim), cold_bytes);
    const Tensor& k_src = kv_dtype == DType::bf16 ? src.k_bf16 : src.k_f32;
    const Tensor& v_src = kv_dtype == DType::bf16 ? src.v_bf16 : src.v_f32;
    // A sequence's head h is the first L tokens of the source's head h.
    const std::size_t row_bytes = std::size_t(c.head_dim * elt_bytes(kv_dtype));
    auto head_major = [&](const Tensor& from) -> Result<Tensor> {
      TESSERA_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(kv_dtype, {c.batch, c.kv_heads, c.kv_len, c.head_dim}));
      auto* to = static_cast<std::byte*>(t.data());
      const auto* rows = static_cast<const std::byte*>(from.data());
      for (std::int64_t b = 0; b < c.batch; ++b)
        for (std::int64_t h = 0; h < c.kv_heads; ++h)
          for (std::int64_t i = 0; i < c.kv_len; ++i)
            std::memcpy(to + ((b * c.kv_heads + h) * c.kv_len + i) * row_bytes, rows + (i * c.kv_heads + h) * row_bytes, row_bytes);
      return t.permute({0, 2, 1, 3});
    };
    for (std::int64_t s = 0; s < sets; ++s) {
      TESSERA_ASSIGN_OR_RETURN(Tensor k, head_major(k_src));
      TESSERA_ASSIGN_OR_RETURN(Tensor v, head_major(v_src));
      d->kv_.emplace_back(std::move(k), std::move(v));
    }
    TESSERA_ASSIGN_OR_RETURN(d->q_, make_decode_query(c, kv_dtype, 23));
    TESSERA_ASSIGN_OR_RETURN(d->o_, Tensor::empty(d->q_.dtype(), d->q_.shape()));
    return std::unique_ptr<AttentionImpl>(std::move(d));
  }

  Status prepare(int threads) override {
    Context& ctx = contexts_.at(threads);
    const auto& [k, v] = kv_.front();
    TESSERA_ASSIGN_OR_RETURN(plan_, ops::Attention::plan(ctx, q_.desc(), k.desc(), v.desc(), o_.desc()));
    TESSERA_RETURN_IF_ERROR(alloc_workspace(workspace_, plan_->workspace_bytes()));
    stream_.emplace(ctx);
    next_ = 0;
    return {};
  }

  Status run() override {
    const auto& [k, v] = kv_[next_];
    next_ = (next_ + 1) % kv_.size();
    const Tensor in[] = {q_, k, v}, out[] = {o_};
    TESSERA_RETURN_IF_ERROR(plan_->run(*stream_, in, out, workspace_.get()));
    return stream_->synchronize();
  }

  std::int64_t copies() const override { return std::int64_t(kv_.size()); }
  std::string kernel() const override { return plan_ ? std::string(plan_->kernel()) : std::string(); }

 private:
  ContiguousDecode(Contexts& contexts, const DecodeCase& c) : contexts_(contexts), case_(c) {}

  Contexts& contexts_;
  DecodeCase case_;
  std::vector<std::pair<Tensor, Tensor>> kv_;  // per set
  Tensor q_, o_;
  ops::PlanPtr plan_;
  AlignedBuffer workspace_;
  std::optional<Stream> stream_;
  std::size_t next_ = 0;
};

// ------------------------------------------------------------------ measuring

struct Entry {
  std::string impl;
  std::unique_ptr<AttentionImpl> attention;
};

// What every case of the run shares.
struct Run {
  const AttentionBenchOptions& opt;
  bench::MeasureOptions measure;
  std::int64_t cold_bytes;          // bench::cold_bytes(): what the rotating KV copies of a decode row exceed
  std::map<int, double> read_gbps;  // by threads: the roofline of the decode rows
};

// Adds `make`'s implementation to `entries`, or says why it is absent.
void add_entry(std::vector<Entry>& entries, std::string impl, const std::string& where,
               Result<std::unique_ptr<AttentionImpl>> made) {
  if (made.ok())
    entries.push_back({std::move(impl), std::move(made).value()});
  else
    fmt::print(stderr, "{}: {} not measured: {}\n", where, impl, made.status().to_string());
}

// Prepares each entry for proto.threads, times them interleaved, and returns
// a row per implementation that ran: proto's fields, the impl, its times and
// kernel. Failures are reported on stderr and leave no row.
std::vector<Row> measure_entries(std::vector<Entry>& entries, const Row& proto, const std::string& where,
                                 const Run& run) {
  std::vector<bench::Contender> contenders;
  std::vector<const Entry*> measured;
  for (Entry& e : entries) {
    if (Status s = e.attention->prepare(proto.threads); !s.ok()) {
      fmt::print(stderr, "{}: {} skipped: {}\n", where, e.impl, s.to_string());
      continue;
    }
    contenders.push_back({.impl = e.impl,
                          .call = [a = e.attention.get()] { return a->run(); },
                          .warmup_calls = e.attention->copies()});
    measured.push_back(&e);
  }
  std::vector<Row> rows;
  if (contenders.empty()) return rows;
  bench::measure_interleaved(contenders, run.measure);
  for (std::size_t i = 0; i < contenders.size(); ++i) {
    const bench::Contender& result = contenders[i];
    if (!result.error.ok()) {
      fmt::print(stderr, "{}: {} skipped: {}\n", where, result.impl, result.error.to_string());
      continue;
    }
    Row r = proto;
    r.impl = result.impl;
    r.median_ms = bench::median(result.ms);
    r.best_ms = bench::best(result.ms);
    r.kernel = measured[i]->attention->kernel();
    rows.push_back(std::move(r));
  }
  // Tessera against the fastest other implementation; each other one against Tessera.
  bench::add_ratio(rows, "tessera", [](std::string_view) { return true; });
  for (Row& r : rows)
    if (r.impl != "tessera") bench::add_ratio(rows, r.impl, [](std::string_view impl) { return impl == "tessera"; });
  return rows;
}

void run_dense_case(Contexts& contexts, const DenseCase& c, const std::vector<DType>& dtypes, const Run& run) {
  const AttentionShape& s = c.shape;
  const bool peers = run.opt.all_peers || s.score_bytes() <= kMaxPeerScoreBytes;
  if (!peers)
    fmt::print(stderr,
               "attention {}: tessera_unfused and onednn not run: their f32 scores [{}, {}, {}, {}] would take {} MiB, "
               "over {} MiB (--all-peers runs them)\n",
               c.name, s.batch, s.q_heads, s.q_len, s.kv_len, s.score_bytes() >> 20, kMaxPeerScoreBytes >> 20);
  for (DType dtype : dtypes) {
    const std::string where = fmt::format("attention {} {}", c.name, to_string(dtype));
    std::vector<Entry> entries;
    add_entry(entries, "tessera", where, TesseraAttention::make(contexts, s, dtype));
    if (peers) {
      add_entry(entries, "tessera_unfused", where, TesseraUnfused::make(contexts, s, dtype));
#if TESSERA_HAVE_ONEDNN
      add_entry(entries, "onednn", where, bench::make_onednn_attention(s, dtype));
#endif
    }
    for (int t : run.opt.threads) {
      Row proto{.suite = "attention", .case_name = c.name, .dtype = std::string(to_string(dtype)), .threads = t};
      const std::string here = fmt::format("{} {}", where, threads_label(t));
      std::vector<Row> rows = measure_entries(entries, proto, here, run);
      for (Row& r : rows) r.gflops = s.flops() / r.median_ms / 1e6;
      bench::print_rows(fmt::format("{} | {}", here, s.causal ? "causal" : "no mask"), rows, run.opt.json);
    }
  }
}

void run_decode_case(Contexts& contexts, const DecodeCase& c, const std::vector<DType>& dtypes,
                     const DecodeSource& src, const Run& run) {
  for (DType dtype : dtypes) {
    const std::string label = dtype == DType::i8 ? std::string("int8") : std::string(to_string(dtype));
    const std::string where = fmt::format("attention {} {}", c.name, label);
    std::vector<Entry> entries;
    add_entry(entries, "tessera", where, PagedDecode::make(contexts, c, dtype, src, run.cold_bytes));
    if (dtype != DType::i8)  // the contiguous Attention has no int8 k and v
      add_entry(entries, "tessera_contiguous", where, ContiguousDecode::make(contexts, c, dtype, src, run.cold_bytes));
    if (entries.empty()) continue;
    const std::int64_t bytes = kv_bytes(dtype, c.batch, c.kv_len, c.kv_heads, c.head_dim);
    const double flops = 4.0 * double(c.batch * c.q_heads * c.head_dim * c.kv_len);
    for (int t : run.opt.threads) {
      Row proto{.suite = "attention", .case_name = c.name, .dtype = label, .threads = t};
      proto.weights = "cold";
      const std::string here = fmt::format("{} {}", where, threads_label(t));
      std::vector<Row> rows = measure_entries(entries, proto, here, run);
      for (Row& r : rows) {
        r.gflops = flops / r.median_ms / 1e6;
        r.gbps = double(bytes) / r.median_ms / 1e6;
        if (const auto bw = run.read_gbps.find(t); bw != run.read_gbps.end()) r.pct_read_bw = 100.0 * *r.gbps / bw->second;
      }
      bench::print_rows(fmt::format("{} | cold KV ({} copies of {:.1f} MiB, > {} MiB)", here,
                                    entries.front().attention->copies(), double(bytes) / (1 << 20), run.cold_bytes >> 20),
                        rows, run.opt.json);
    }
  }
}

// ------------------------------------------------------------------ the cases

bool selected(const std::string& name, const AttentionBenchOptions& opt) {
  if (opt.cases.empty()) return true;
  return std::ranges::any_of(opt.cases, [&](const std::string& part) { return name.find(part) != std::string::npos; });
}

std::vector<DenseCase> prefill_cases(const AttentionBenchOptions& opt) {
  std::vector<DenseCase> cases;
  const std::vector<std::int64_t> lens = opt.quick ? std::vector<std::int64_t>{512} : std::vector<std::int64_t>{512, 1024, 4096};
  const std::vector<std::int64_t> kv_heads = opt.quick ? std::vector<std::int64_t>{8} : std::vector<std::int64_t>{8, 32};
  for (std::int64_t s : lens)
    for (std::int64_t hkv : kv_heads)
      cases.push_back({fmt::format("prefill_s{}_hq32_hkv{}_d128", s, hkv),
                       {.batch = 1, .q_len = s, .kv_len = s, .q_heads = 32, .kv_heads = hkv, .head_dim = 128, .causal = true}});
  return cases;
}

std::vector<DenseCase> cross_cases() {
  // Text-conditioned diffusion: 4096 latent positions attend to 77 text tokens.
  return {{"cross_sq4096_skv77_h8_d64",
           {.batch = 1, .q_len = 4096, .kv_len = 77, .q_heads = 8, .kv_heads = 8, .head_dim = 64, .causal = false}}};
}

std::vector<DecodeCase> decode_cases(const AttentionBenchOptions& opt) {
  std::vector<DecodeCase> cases;
  const std::vector<std::int64_t> lens =
      opt.quick ? std::vector<std::int64_t>{4096} : std::vector<std::int64_t>{1024, 4096, 16384};
  for (std::int64_t b : {1, 8})
    for (std::int64_t len : lens)
      cases.push_back({fmt::format("decode_b{}_kv{}_hq32_hkv8_d128", b, len), b, len, 32, 8, 128});
  return cases;
}

void print_header(const Run& run, Context& ctx) {
  const hw::Info& hw = hw::info();
  fmt::print("tessera bench attention: {}, {} cores, L3 {} MiB, isa {}\n", hw.cpu_name, hw.cores, hw.l3_bytes >> 20,
             hw::to_string(ctx.isa()));
  fmt::print("tessera: the fused Attention; tessera_unfused: Tessera's Matmul + Softmax (causal) + Matmul, the "
             "[B, Hq, Sq, Skv] f32 scores in memory\n");
#if TESSERA_HAVE_ONEDNN
  fmt::print("peer: {}: matmul + binary add (causal mask) + softmax + matmul, the scores in memory; given q, k, v, o "
             "as [B, H, S, D]\n",
             bench::onednn_version());
#endif
  fmt::print("median and best of {} repeats (each >= {:.0f} ms of back-to-back calls) after warm-up, implementations "
             "interleaved\n",
             run.measure.repeats, run.measure.repeat_ms);
  fmt::print("prefill, cross: warm; GFLOP/s = 4 B Hq D x the visible (query, key) pairs (causal: S (S + 1) / 2), the "
             "same count for every implementation; the unfused ones are not run where their scores exceed {} MiB "
             "(--all-peers)\n",
             kMaxPeerScoreBytes >> 20);
  fmt::print("decode: tessera = PagedAttention over a KvCache (block {}), tessera_contiguous = Attention on "
             "[B, L, Hkv, D] views of head-major [B, Hkv, L, D]; KV cold (rotating copies > 2x L3, at least 128 MiB); GB/s of K and V read (int8: with their scales) "
             "as % of the read bandwidth\n",
             kBlockSize);
  fmt::print("vs best peer: the other implementation's median / this row's (> 1: this row is faster); tessera "
             "against the fastest other, the others against tessera\n");
}

void run_bench_attention(AttentionBenchOptions opt) {
  std::ranges::sort(opt.threads);
  opt.threads.erase(std::unique(opt.threads.begin(), opt.threads.end()), opt.threads.end());
  std::vector<DType> dense_types, decode_types;
  for (const std::string& name : opt.dtypes) {
    const DType t = name == "f32" ? DType::f32 : name == "bf16" ? DType::bf16 : DType::i8;
    if (std::ranges::find(decode_types, t) != decode_types.end()) continue;
    decode_types.push_back(t);
    if (t != DType::i8) dense_types.push_back(t);  // int8: only as a KV cache
  }
  std::vector<DenseCase> prefill = prefill_cases(opt), cross = cross_cases();
  std::vector<DecodeCase> decode = decode_cases(opt);
  std::erase_if(prefill, [&](const DenseCase& c) { return !selected(c.name, opt); });
  std::erase_if(cross, [&](const DenseCase& c) { return !selected(c.name, opt); });
  std::erase_if(decode, [&](const DecodeCase& c) { return !selected(c.name, opt); });
  if (prefill.empty() && cross.empty() && decode.empty()) {
    fmt::print(stderr, "no case matches --case\n");
    return;
  }

  const auto start = std::chrono::steady_clock::now();
  Contexts contexts(opt.threads);
  Run run{.opt = opt, .measure = {.repeats = opt.repeats}, .cold_bytes = bench::cold_bytes(), .read_gbps = {}};
  if (!opt.json) print_header(run, contexts.at(opt.threads.front()));

  if (!decode.empty() && !decode_types.empty()) {
    // The roofline first: the decode rows report their share of the read bandwidth.
    for (int t : opt.threads) {
      Result<bench::Roofline> read = bench::stream_roofline(contexts.at(t), "attention", run.cold_bytes, run.measure, opt.json);
      if (read.ok())
        run.read_gbps[t] = read->read_gbps;
      else
        fmt::print(stderr, "stream {}: skipped: {}\n", threads_label(t), read.status().to_string());
    }
    const DecodeCase& longest = *std::ranges::max_element(decode, {}, &DecodeCase::kv_len);
    Result<DecodeSource> src = make_decode_source(longest.kv_len, longest.kv_heads, longest.head_dim);
    if (!src.ok())
      fmt::print(stderr, "attention decode: skipped: {}\n", src.status().to_string());
    else
      for (const DecodeCase& c : decode) run_decode_case(contexts, c, decode_types, *src, run);
  }
  for (const DenseCase& c : prefill) run_dense_case(contexts, c, dense_types, run);
  for (const DenseCase& c : cross) run_dense_case(contexts, c, dense_types, run);
  if (!opt.json)
    fmt::print("\ndone in {:.0f} s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace

void add_bench_attention_command(CLI::App& bench) {
  static AttentionBenchOptions opt;
  CLI::App* attention = bench.add_subcommand(
      "attention",
      "Attention: fused against unfused (Tessera's ops, oneDNN) on prefill and cross-attention; paged against "
      "contiguous on decode, cold, with the memory-bandwidth roofline");
  attention->add_option("--threads", opt.threads, "thread counts")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  attention->add_option("--dtype", opt.dtypes, "q / k / v types; int8: an int8 KV cache (decode only)")
      ->delimiter(',')
      ->check(CLI::IsMember({"f32", "bf16", "int8"}))
      ->capture_default_str();
  attention->add_option("--case", opt.cases, "run only the cases whose name contains one of these, e.g. prefill,kv4096")
      ->delimiter(',');
  attention->add_option("--repeats", opt.repeats, "timed repeats per implementation and case")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  attention->add_flag("--quick", opt.quick, "only prefill S = 512 with Hkv = 8, decode L = 4096, and cross");
  attention->add_flag("--all-peers", opt.all_peers,
                      "also run the unfused implementations where their scores exceed 1 GiB (prefill S = 4096: "
                      "2 GiB each, minutes per case on 2 cores)");
  attention->add_flag("--json", opt.json, "one JSON object per line (DESIGN.md, Benchmarks) instead of tables");
  attention->callback([] { run_bench_attention(opt); });
}

}  // namespace tessera::app
