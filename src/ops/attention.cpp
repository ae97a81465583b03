#include "tessera/ops/attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/element.hpp"
#include "kernels/attention.hpp"
#include "ops/common.hpp"

namespace tessera::ops {

using namespace detail;

namespace {

using Row = kernels::KernelRow<kernels::AttentionFamily>;

const void* at(const void* p, DType t, std::int64_t elements) {
  return static_cast<const char*>(p) + elements * bytes_of(t);
}
void* at(void* p, DType t, std::int64_t elements) { return static_cast<char*>(p) + elements * bytes_of(t); }

// A kernel row and its tiling, as plan() chose them for a shape of queries.
struct RowChoice {
  const Row* row;
  kernels::AttentionTiling tiling;
};

// One kernel call: a block of query positions of one (sequence, kv head)
// against keys [t0, t1).
struct Task {
  const Row* row;
  kernels::AttentionArgs args;
  kernels::AttentionOutput out;
  std::int64_t t0, t1;
};

// A unit whose keys were split: its pieces (consecutive tasks) are merged by
// their log-sum-exp into the final rows.
struct Merge {
  std::size_t first, pieces;
  std::int64_t rows, dim, group;
  kernels::AttentionOutput out;
};

// One (sequence, kv head): all its query positions against all its keys.
struct Unit {
  kernels::AttentionArgs args;  // q and mask at position 0, causal_offset for position 0
  kernels::AttentionOutput out;
  std::int64_t positions, kv_len;
  const RowChoice* kernel;
  std::int64_t window = 0;  // AttentionAttrs::window: its tasks start at their first row's window
};

// The first of kv_len keys that a query whose causal offset (its last
// visible key) is `offset` sees under a window (0 without one).
std::int64_t first_key_in_window(std::int64_t window, std::int64_t offset, std::int64_t kv_len) {
  return window > 0 ? std::clamp<std::int64_t>(offset - window + 1, 0, kv_len) : 0;
}
// The first key position p of a unit sees.
std::int64_t window_start(const Unit& u, std::int64_t p) { return first_key_in_window(u.window, u.args.causal_offset + p, u.kv_len); }

// A sliding window and ALiBi's biases as an additive mask in O(S) memory,
// with no kernel of its own. Both depend only on d = t - p - the unit's
// causal offset (key t's distance past the last key position p would see
// under causal), so a band indexed by d, read with a position stride of -1,
// serves every row and unit: (p, t) reads band[d + center]. A window keeps
// d in (-window, 0] (0 there, -inf elsewhere); ALiBi adds -slope |d|, a band
// per query head (head stride: the band's length; Hq bands of the keys plus
// the positions, which for variable lengths are the totals: 34 MB at 32
// heads and 64 sequences of 2048). center and the length keep the indices
// of units of up to max_keys keys and max_positions positions inside the
// band, with kMargin more on each side: the bf16 flash rows pad a unit's
// rows to groups of 32 and form (never read) mask addresses for positions
// past its last. A window that takes in max_keys
// hides nothing: without ALiBi, no band (the mask cost 1.1-1.2x at bf16 S
// 4096, 1 thread).
class RelativeBand {
 public:
  static constexpr std::int64_t kMargin = 64;
  RelativeBand(const AttentionAttrs& attrs, std::int64_t max_keys, std::int64_t max_positions)
      : window_(attrs.window), center_(kMargin + std::max<std::int64_t>(max_keys, 1) - 1),
        length_(center_ + std::max<std::int64_t>(max_positions, 1) + kMargin), per_head_(!attrs.alibi_slopes.empty()) {
    const bool windowed = window_ > 0 && window_ < max_keys;
    if (!windowed && !per_head_) return;
    const std::size_t bands = per_head_ ? attrs.alibi_slopes.size() : 1;
    band_.resize(bands * std::size_t(length_));
    for (std::size_t h = 0; h < bands; ++h)
      for (std::int64_t i = 0; i < length_; ++i) {
        const std::int64_t d = i - center_;
        const bool hidden = windowed && (d > 0 || d <= -window_);
        band_[h * std::size_t(length_) + std::size_t(i)] =
            hidden ? -std::numeric_limits<float>::infinity() : per_head_ ? -attrs.alibi_slopes[h] * float(std::abs(d)) : 0.0f;
      }
  }
  // The first of kv_len keys a query with causal offset `offset` sees.
  std::int64_t first_key(std::int64_t offset, std::int64_t kv_len) const {
    return band_.empty() ? 0 : first_key_in_window(window_, offset, kv_len);
  }
  // Masks a unit (its causal offset set) whose first query head is `head`.
  void apply(Unit& u, std::int64_t head) const {
    if (band_.empty() || u.positions == 0) return;
    kernels::AttentionArgs& a = u.args;
    u.window = window_;
    a.mask_dtype = DType::f32;
    a.mask = band_.data() + (per_head_ ? head * length_ : 0) + center_ - a.causal_offset;
    a.mask_pos_stride = -1, a.mask_head_stride = per_head_ ? length_ : 0, a.mask_key_stride = 1;
  }

 private:
  std::int64_t window_, center_, length_;
  bool per_head_;
  std::vector<float> band_;
};

// Workspace floats per split piece.
std::int64_t piece_floats(std::int64_t rows, std::int64_t dim) { return rows * (dim + 2); }

// Splits a unit into tasks by the tiling: key pieces (decode) or blocks of
// positions (prefill). `workspace` hands out partial-sum buffers.
void add_unit(const Unit& u, std::vector<Task>& tasks, std::vector<Merge>& merges, float*& workspace) {
  const kernels::AttentionTiling& tiling = u.kernel->tiling;
  kernels::AttentionArgs a = u.args;
  a.prefetch_l1 = tiling.prefetch_l1;
  if (tiling.keys_per_split > 0 && u.kv_len - window_start(u, 0) > tiling.keys_per_split) {
    const std::int64_t rows = u.positions * a.group, dim = a.head_dim;
    Merge m{tasks.size(), 0, rows, dim, a.group, u.out};
    for (std::int64_t t0 = window_start(u, 0); t0 < u.kv_len; t0 += tiling.keys_per_split, ++m.pieces) {
      Task t{u.kernel->row, a, {}, t0, std::min(u.kv_len, t0 + tiling.keys_per_split)};
      t.args.rows = rows;
      t.out.partial_o = workspace;
      t.out.partial_m = workspace + rows * dim;
      t.out.partial_l = t.out.partial_m + rows;
      workspace += piece_floats(rows, dim);
      tasks.push_back(t);
    }
    merges.push_back(m);
    return;
  }
  const std::int64_t block = std::max<std::int64_t>(1, tiling.positions_per_unit);
  const std::int64_t blocks = (u.positions + block - 1) / block;
  // Last blocks first: under a causal mask they see the most keys (see execute()).
  for (std::int64_t b = blocks - 1; b >= 0; --b) {
    const std::int64_t p0 = b * block, p1 = std::min(u.positions, p0 + block);
    Task t{u.kernel->row, a, u.out, window_start(u, p0), u.kv_len};
    t.args.rows = (p1 - p0) * a.group;
    t.args.q = at(a.q, a.q_dtype, p0 * a.q_pos_stride);
    if (b > 0) {  // the next task: the block before, whole
      t.args.next_q = at(a.q, a.q_dtype, (p0 - block) * a.q_pos_stride);
      t.args.next_rows = block * a.group;
    }
    if (a.mask) t.args.mask = at(a.mask, a.mask_dtype, p0 * a.mask_pos_stride);
    t.args.causal_offset = a.causal_offset + p0;
    t.out.o = at(u.out.o, u.out.o_dtype, p0 * u.out.o_pos_stride);
    if (u.out.lse) t.out.lse = u.out.lse + p0 * u.out.lse_pos_stride;
    tasks.push_back(t);
  }
}

// Final rows from the pieces: weights exp(m_i - M) with M the largest max.
void merge(const Task* pieces, const Merge& m) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  std::vector<float> sums(std::size_t(m.dim));
  for (std::int64_t r = 0; r < m.rows; ++r) {
    float mx = kNegInf;
    for (std::size_t i = 0; i < m.pieces; ++i) mx = std::max(mx, pieces[i].out.partial_m[r]);
    std::fill(sums.begin(), sums.end(), 0.0f);
    float l = 0.0f;
    if (mx != kNegInf) {
      for (std::size_t i = 0; i < m.pieces; ++i) {
        const auto& p = pieces[i].out;
        const float w = std::exp(p.partial_m[r] - mx);
        if (w == 0.0f) continue;
        l += w * p.partial_l[r];
        for (std::int64_t d = 0; d < m.dim; ++d) sums[std::size_t(d)] += w * p.partial_o[r * m.dim + d];
      }
    }
    const std::int64_t pos = r / m.group, head = r % m.group;
    const kernels::RowEnd end = kernels::row_end(mx, l, m.out.sinks ? m.out.sinks + head : nullptr);
    const std::int64_t o_off = pos * m.out.o_pos_stride + head * m.out.o_head_stride;
    for (std::int64_t d = 0; d < m.dim; ++d)
      tessera::detail::store(m.out.o, m.out.o_dtype, o_off + d, end.inv == 0.0f ? 0.0f : sums[std::size_t(d)] * end.inv);
    if (m.out.lse) m.out.lse[pos * m.out.lse_pos_stride + head * m.out.lse_head_stride] = end.lse;
  }
}

void execute(ThreadPool& pool, std::vector<Task>& tasks, const std::vector<Merge>& merges) {
  // Tasks stay in unit order, heaviest block first within a unit (add_unit):
  // consecutive tasks share a kv head, whose K and V stay in cache, and the
  // job still ends on light tasks, which evens out the cores.
  pool.parallel_for(std::int64_t(tasks.size()), 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      const Task& t = tasks[std::size_t(i)];
      t.row->run(t.args, t.t0, t.t1, t.out);
    }
  });
  pool.parallel_for(std::int64_t(merges.size()), 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) merge(&tasks[merges[std::size_t(i)].first], merges[std::size_t(i)]);
  });
}

// Splits the units into tasks and runs them on the stream; `workspace` holds the split pieces' sums.
Status run_units(Stream& stream, std::string_view op, const std::vector<Unit>& units, void* workspace) {
  return stream.submit(op, [&] {
    std::vector<Task> tasks;
    std::vector<Merge> merges;
    float* ws = static_cast<float*>(workspace);
    for (const Unit& u : units) add_unit(u, tasks, merges, ws);
    execute(stream.pool(), tasks, merges);
    return Status{};
  });
}

// The run() checks both plans share: the tensors are the plan's, the outputs
// o and lse overlap no input nor each other.
Status check_run(std::string_view op, std::span<const Tensor> in, std::span<const TensorDesc> inputs,
                 std::span<const std::string_view> in_names, std::span<const Tensor> out,
                 std::span<const TensorDesc> outputs) {
  static constexpr std::string_view kOut[] = {"o", "lse"};
  TESSERA_RETURN_IF_ERROR(check_tensors(op, in, inputs, in_names));
  TESSERA_RETURN_IF_ERROR(check_tensors(op, out, outputs, kOut));
  for (std::size_t o = 0; o < out.size(); ++o)
    for (std::size_t i = 0; i < in.size(); ++i) TESSERA_RETURN_IF_ERROR(check_overlap(out[o], kOut[o], in[i], in_names[i], false));
  if (out.size() == 2) TESSERA_RETURN_IF_ERROR(check_overlap(out[1], "lse", out[0], "o", false));
  return {};
}

float resolve_scale(float scale, std::int64_t dim) { return scale == 0.0f ? 1.0f / std::sqrt(float(dim)) : scale; }

// The query side of the unit for kv head h — its group's rows of q, o and
// lse — from the element offsets of the sequence's first position, for a
// sequence of sq queries and kv_len keys. q and o are [..., S, H, D], lse
// [..., H, S]; in[0] is q, out[0] o and out[1] lse when present. The
// window and ALiBi, if any, come as the mask; the caller adds the keys (and any other mask).
Unit query_unit(const AttentionAttrs& attrs, const RelativeBand& band, std::span<const Tensor> in, std::span<const Tensor> out,
                std::int64_t q_off, std::int64_t o_off, std::int64_t lse_off, std::int64_t h, std::int64_t group, std::int64_t sq,
                std::int64_t kv_len) {
  const TensorDesc &q = in[0].desc(), &o = out[0].desc();
  const int r = q.rank();
  Unit u{};
  kernels::AttentionArgs& a = u.args;
  a.head_dim = q.shape[r - 1];
  a.group = group;
  a.q_dtype = q.dtype;
  a.q = at(in[0].data(), q.dtype, q_off + h * group * q.strides[r - 2]);
  a.q_pos_stride = q.strides[r - 3];
  a.q_head_stride = q.strides[r - 2];
  a.scale = resolve_scale(attrs.scale, a.head_dim);
  a.softcap = attrs.softcap;
  a.causal = attrs.causal;
  a.causal_offset = kv_len - sq;
  kernels::AttentionOutput& w = u.out;
  w.o_dtype = o.dtype;
  w.o = at(out[0].data(), o.dtype, o_off + h * group * o.strides[r - 2]);
  w.o_pos_stride = o.strides[r - 3];
  w.o_head_stride = o.strides[r - 2];
  if (out.size() == 2) {
    const TensorDesc& lse = out[1].desc();
    const int lr = lse.rank();
    w.lse = static_cast<float*>(out[1].data()) + lse_off + h * group * lse.strides[lr - 2];
    w.lse_head_stride = lse.strides[lr - 2];
    w.lse_pos_stride = lse.strides[lr - 1];
  }
  if (!attrs.sinks.empty()) w.sinks = attrs.sinks.data() + h * group;
  u.positions = sq;
  u.kv_len = kv_len;
  band.apply(u, h * group);
  return u;
}

// A per-head attribute (ALiBi's slopes, the sinks): one finite value per query head (hq), or none.
Status check_per_head(const std::vector<float>& values, std::string_view name, std::int64_t hq) {
  if (values.empty()) return {};
  if (std::int64_t(values.size()) != hq)
    return Status::invalid_argument(fmt::format("{}: {} values, expected one per query head ({})", name, values.size(), hq));
  for (std::size_t h = 0; h < values.size(); ++h)
    if (!std::isfinite(values[h])) return Status::invalid_argument(fmt::format("{}: [{}] is {}, not finite", name, h, values[h]));
  return {};
}

// The scale, the soft cap, the window, ALiBi's slopes (neither with a mask) and the sinks, for hq query heads.
Status check_attrs(const AttentionAttrs& attrs, std::int64_t hq, bool mask) {
  if (!std::isfinite(attrs.scale)) return Status::invalid_argument(fmt::format("scale: {} is not finite", attrs.scale));
  // A cap and its reciprocal, in log2 units, must stay finite (the kernels' c tanh(s / c)).
  if (attrs.softcap != 0.0f && !(attrs.softcap >= 1e-30f && attrs.softcap <= 1e30f))
    return Status::invalid_argument(fmt::format("attrs.softcap: {} is outside [1e-30, 1e30] (0: none)", attrs.softcap));
  if (attrs.window < 0) return Status::invalid_argument(fmt::format("attrs.window: {} is negative", attrs.window));
  if (attrs.window > 0 && !attrs.causal) return Status::invalid_argument("attrs.window: a sliding window needs attrs.causal");
  if (attrs.window > 0 && mask) return Status::invalid_argument("mask: not supported with attrs.window (fold the window into the mask)");
  TESSERA_RETURN_IF_ERROR(check_per_head(attrs.alibi_slopes, "attrs.alibi_slopes", hq));
  if (!attrs.alibi_slopes.empty() && mask)
    return Status::invalid_argument("mask: not supported with attrs.alibi_slopes (fold the biases into the mask)");
  return check_per_head(attrs.sinks, "attrs.sinks", hq);
}

// What the one-shot functions key their plans by, past the tensors.
void add_attrs(PlanKey& key, const AttentionAttrs& attrs) {
  key.add(attrs.scale).add(attrs.softcap).add(std::int64_t(attrs.causal)).add(std::int64_t(attrs.fpmath)).add(attrs.window);
  for (const std::vector<float>* values : {&attrs.alibi_slopes, &attrs.sinks}) {
    key.add(std::int64_t(values->size()));
    for (float v : *values) key.add(v);
  }
}

// The length of [..., S, H, D]'s S: a sequence's, or the total with variable lengths.
std::int64_t sequence_dim(const TensorDesc& d) { return d.shape[d.rank() - 3]; }

Status check_head_stride(const TensorDesc& d, std::string_view name) {
  if (d.shape[d.rank() - 1] > 1 && d.strides[d.rank() - 1] != 1)
    return Status::invalid_argument(fmt::format("{}: the head dim (last) must have stride 1, got strides {}", name, d.strides.to_string()));
  return {};
}

Status check_attention_float(const TensorDesc& d, std::string_view name) {
  if (d.dtype != DType::f32 && d.dtype != DType::bf16)
    return Status::invalid_argument(fmt::format("{}: dtype {} is not f32 or bf16", name, to_string(d.dtype)));
  return {};
}

// Checks q / o against their shape and picks the output row layout; shared by both ops.
Status check_lse(const std::optional<TensorDesc>& lse, const Shape& expected) {
  if (!lse) return {};
  TESSERA_RETURN_IF_ERROR(lse->validate("lse"));
  if (lse->dtype != DType::f32) return Status::invalid_argument(fmt::format("lse: dtype {} is not f32", to_string(lse->dtype)));
  TESSERA_RETURN_IF_ERROR(check_same_shape(*lse, "lse", expected, "the expected"));
  return check_writable(*lse, "lse");
}

std::int64_t attention_flops(std::int64_t heads, std::int64_t queries, std::int64_t keys, std::int64_t dim) {
  return saturating_mul(saturating_mul(4 * heads, queries), saturating_mul(keys, dim));
}

// An additive mask: float, broadcasting (numpy rules) to `full` ([B, Hq, Sq,
// keys]); its strides over `full`.
Result<Strides> check_mask(const TensorDesc& m, const Shape& full) {
  TESSERA_RETURN_IF_ERROR(m.validate("mask"));
  TESSERA_RETURN_IF_ERROR(check_float(m, "mask"));
  return check_broadcasts_to(m, "mask", full, "[B, Hq, Sq, keys] =");
}

// Variable lengths: cu (batch + 1 starts) runs from 0 to `total` without decreasing.
Status check_cu_seqlens(const std::int32_t* cu, std::string_view name, std::int64_t batch, std::int64_t total) {
  if (cu[0] != 0) return Status::invalid_argument(fmt::format("{}: starts at {}, expected 0", name, cu[0]));
  for (std::int64_t b = 0; b < batch; ++b)
    if (cu[b + 1] < cu[b]) return Status::invalid_argument(fmt::format("{}: decreases at [{}] ({} after {})", name, b + 1, cu[b + 1], cu[b]));
  if (cu[batch] != total) return Status::invalid_argument(fmt::format("{}: ends at {}, expected the total {}", name, cu[batch], total));
  return {};
}

class AttentionPlan final : public Plan {
 public:
  AttentionPlan(std::vector<TensorDesc> inputs, std::vector<TensorDesc> outputs, const AttentionAttrs& attrs,
                const AttentionOptions& options, Strides mask_strides, const Row* row, kernels::AttentionTiling tiling,
                std::int64_t workspace, std::int64_t bytes, std::int64_t flops)
      : Plan(row->name, bytes, flops), inputs_(std::move(inputs)), outputs_(std::move(outputs)), attrs_(attrs),
        band_(attrs, sequence_dim(inputs_[1]), sequence_dim(inputs_[0])),
        has_mask_(options.mask.has_value()), varlen_batch_(options.varlen_batch), kernel_{row, tiling},
        workspace_(workspace), mask_strides_(mask_strides) {}

  std::string_view op() const override { return "attention"; }
  std::int64_t workspace_bytes() const override { return workspace_; }

  Status do_run(Stream& stream, std::span<const Tensor> in, std::span<const Tensor> out, void* workspace) const override {
    static constexpr std::string_view kMasked[] = {"q", "k", "v", "mask"}, kVarlen[] = {"q", "k", "v", "cu_seqlens_q", "cu_seqlens_kv"};
    const std::span<const std::string_view> in_names = varlen_batch_ ? std::span<const std::string_view>(kVarlen) : kMasked;
    TESSERA_RETURN_IF_ERROR(check_run(op(), in, inputs_, in_names, out, outputs_));
    std::vector<Unit> units;
    TESSERA_RETURN_IF_ERROR(make_units(in, out, units));
    return run_units(stream, op(), units, workspace);
  }

 private:
  // Element offsets of one sequence's first query / key in each tensor.
  struct SequenceOffsets {
    std::int64_t q, k, v, o, lse, mask;
  };

  // One unit per (sequence, kv head).
  Status make_units(std::span<const Tensor> in, std::span<const Tensor> out, std::vector<Unit>& units) const {
    const TensorDesc &q = inputs_[0], &k = inputs_[1], &v = inputs_[2], &o = outputs_[0];
    const int r = q.rank();
    const std::int64_t hkv = k.shape[r - 2], group = q.shape[r - 2] / hkv;
    const TensorDesc* lse = out.size() == 2 ? &outputs_[1] : nullptr;
    auto add = [&](const SequenceOffsets& off, std::int64_t sq, std::int64_t skv) {
      for (std::int64_t h = 0; h < hkv; ++h) {
        Unit u = query_unit(attrs_, band_, in, out, off.q, off.o, off.lse, h, group, sq, skv);
        kernels::AttentionArgs& a = u.args;
        if (has_mask_) {
          a.mask_dtype = inputs_[3].dtype;
          a.mask = at(in[3].data(), a.mask_dtype, off.mask + h * group * mask_strides_[1]);
          a.mask_head_stride = mask_strides_[1];
          a.mask_pos_stride = mask_strides_[2];
          a.mask_key_stride = mask_strides_[3];
        }
        a.kv = {.dtype = k.dtype,
                .k = at(in[1].data(), k.dtype, off.k + h * k.strides[r - 2]),
                .v = at(in[2].data(), v.dtype, off.v + h * v.strides[r - 2]),
                .k_token_stride = k.strides[r - 3],
                .v_token_stride = v.strides[r - 3],
                .block_table = nullptr, .block_size = 0, .block_stride = 0,
                .k_scale = nullptr, .v_scale = nullptr, .scale_block_stride = 0};
        u.kernel = &kernel_;
        units.push_back(u);
      }
    };
    if (!varlen_batch_) {
      for (std::int64_t b = 0; b < q.shape[0]; ++b)
        add({b * q.strides[0], b * k.strides[0], b * v.strides[0], b * o.strides[0], lse ? b * lse->strides[0] : 0,
             has_mask_ ? b * mask_strides_[0] : 0},
            q.shape[1], k.shape[1]);
      return {};
    }
    const auto* cu_q = in[3].data_as<const std::int32_t>();
    const auto* cu_kv = in[4].data_as<const std::int32_t>();
    TESSERA_RETURN_IF_ERROR(check_cu_seqlens(cu_q, "cu_seqlens_q", varlen_batch_, q.shape[0]));
    TESSERA_RETURN_IF_ERROR(check_cu_seqlens(cu_kv, "cu_seqlens_kv", varlen_batch_, k.shape[0]));
    for (std::int64_t b = 0; b < varlen_batch_; ++b)
      add({cu_q[b] * q.strides[0], cu_kv[b] * k.strides[0], cu_kv[b] * v.strides[0], cu_q[b] * o.strides[0],
           lse ? cu_q[b] * lse->strides[1] : 0, 0},
          cu_q[b + 1] - cu_q[b], cu_kv[b + 1] - cu_kv[b]);
    return {};
  }

  std::vector<TensorDesc> inputs_, outputs_;
  AttentionAttrs attrs_;
  RelativeBand band_;  // keys and positions: a sequence's (variable lengths: the totals)
  bool has_mask_;
  std::int64_t varlen_batch_;
  RowChoice kernel_;
  std::int64_t workspace_;
  Strides mask_strides_;  // the mask broadcast to [B, Hq, Sq, Skv]
};

// Checks shared by both ops on q and o: float dtypes, rank, head dim, unit head stride.
Status check_queries(const TensorDesc& q, const TensorDesc& o, int rank) {
  TESSERA_RETURN_IF_ERROR(q.validate("q"));
  TESSERA_RETURN_IF_ERROR(o.validate("o"));
  TESSERA_RETURN_IF_ERROR(check_attention_float(q, "q"));
  TESSERA_RETURN_IF_ERROR(check_attention_float(o, "o"));
  TESSERA_RETURN_IF_ERROR(check_rank(q, "q", rank, rank));
  TESSERA_RETURN_IF_ERROR(check_same_shape(o, "o", q.shape, "q's shape"));
  if (q.shape[rank - 1] == 0) return Status::invalid_argument("q: the head dim (last) is 0");
  TESSERA_RETURN_IF_ERROR(check_head_stride(q, "q"));
  TESSERA_RETURN_IF_ERROR(check_head_stride(o, "o"));
  return check_writable(o, "o");
}

Status check_groups(std::int64_t hq, std::int64_t hkv, std::string_view kv_name) {
  if (hkv <= 0 || hq % hkv != 0)
    return Status::invalid_argument(fmt::format("q: {} query heads is not a multiple of {}'s {} kv heads", hq, kv_name, hkv));
  return {};
}

kernels::AttentionProblem make_problem(Context& ctx, DType q, DType kv, DType o, std::int64_t dim,
                                       std::int64_t positions, std::int64_t group, std::int64_t units,
                                       std::int64_t kv_len, bool split_allowed, const AttentionAttrs& attrs) {
  return {q, kv, o, dim, positions, group, units, kv_len, split_allowed, ctx.pool().threads(), attrs.fpmath == FpMath::bf16,
          attrs.softcap > 0.0f};
}

// Workspace for the partial sums of split units: every unit at its most pieces.
std::int64_t split_workspace(const kernels::AttentionTiling& tiling, std::int64_t units, std::int64_t kv_len,
                             std::int64_t rows, std::int64_t dim) {
  if (tiling.keys_per_split == 0 || kv_len <= tiling.keys_per_split) return 0;
  const std::int64_t pieces = (kv_len + tiling.keys_per_split - 1) / tiling.keys_per_split;
  return saturating_mul(saturating_mul(units, pieces), piece_floats(rows, dim) * std::int64_t(sizeof(float)));
}

}  // namespace

Result<PlanPtr> Attention::plan(Context& ctx, const TensorDesc& q, const TensorDesc& k, const TensorDesc& v,
                                const TensorDesc& o, const AttentionAttrs& attrs, const AttentionOptions& options) {
  const bool varlen = options.varlen_batch != 0;
  if (options.varlen_batch < 0)
    return Status::invalid_argument(fmt::format("varlen_batch: {} is negative", options.varlen_batch));
  const int rank = varlen ? 3 : 4;
  TESSERA_RETURN_IF_ERROR(check_queries(q, o, rank));
  for (const auto& [d, name] : {std::pair{&k, "k"}, std::pair{&v, "v"}}) {
    TESSERA_RETURN_IF_ERROR(d->validate(name));
    TESSERA_RETURN_IF_ERROR(check_attention_float(*d, name));
    TESSERA_RETURN_IF_ERROR(check_rank(*d, name, rank, rank));
    TESSERA_RETURN_IF_ERROR(check_head_stride(*d, name));
  }
  const std::int64_t dim = q.shape[rank - 1], hq = q.shape[rank - 2], hkv = k.shape[rank - 2];
  if (k.shape[rank - 1] != dim)
    return Status::invalid_argument(fmt::format("k: head dim {} differs from q's {}", k.shape[rank - 1], dim));
  TESSERA_RETURN_IF_ERROR(check_same_shape(v, "v", k.shape, "k's shape"));
  if (v.dtype != k.dtype) return Status::invalid_argument(fmt::format("v: dtype {} differs from k's {}", to_string(v.dtype), to_string(k.dtype)));
  if (!varlen && k.shape[0] != q.shape[0])
    return Status::invalid_argument(fmt::format("k: batch {} differs from q's {}", k.shape[0], q.shape[0]));
  TESSERA_RETURN_IF_ERROR(check_groups(hq, hkv, "k"));
  TESSERA_RETURN_IF_ERROR(check_attrs(attrs, hq, options.mask.has_value()));

  const std::int64_t batch = varlen ? options.varlen_batch : q.shape[0];
  const std::int64_t sq = q.shape[rank - 3], skv = k.shape[rank - 3];  // varlen: the totals
  Strides mask_strides;
  std::vector<TensorDesc> inputs{q, k, v};
  if (options.mask) {
    const TensorDesc& m = *options.mask;
    if (varlen) return Status::invalid_argument("mask: not supported with variable lengths (varlen_batch > 0)");
    TESSERA_ASSIGN_OR_RETURN(mask_strides, check_mask(m, Shape{batch, hq, sq, skv}));
    inputs.push_back(m);
  }
  if (varlen) {
    const TensorDesc cu = TensorDesc::contiguous(DType::i32, Shape{batch + 1});
    inputs.push_back(cu);
    inputs.push_back(cu);
  }
  TESSERA_RETURN_IF_ERROR(check_lse(options.lse, varlen ? Shape{hq, sq} : Shape{batch, hq, sq}));
  std::vector<TensorDesc> outputs{o};
  if (options.lse) outputs.push_back(*options.lse);

  const std::int64_t group = hq / hkv;
  const auto problem = make_problem(ctx, q.dtype, k.dtype, o.dtype, dim, varlen ? std::max<std::int64_t>(1, sq / std::max<std::int64_t>(1, batch)) : sq,
                                    group, batch * hkv, skv, !varlen, attrs);
  const Row* row = kernels::select<kernels::AttentionFamily>(problem, ctx.isa());
  const auto tiling = row->tiling(problem, ctx.hw());
  const std::int64_t workspace = varlen ? 0 : split_workspace(tiling, batch * hkv, skv, sq * group, dim);
  std::int64_t bytes = traffic_bytes({q, k, v, o});
  if (options.mask) bytes = saturating_add(bytes, traffic_bytes({*options.mask}));
  // Causal: about half the score matrix is visible; under a shorter window, `window` keys a query.
  const std::int64_t seq_keys = varlen ? skv / std::max<std::int64_t>(1, batch) : skv;
  const bool windowed = attrs.window > 0 && attrs.window < seq_keys;
  const std::int64_t flops =
      attention_flops(hq, sq, (varlen ? 1 : batch) * (windowed ? attrs.window : seq_keys), dim) / (attrs.causal && !windowed ? 2 : 1);
  return PlanPtr(std::make_shared<AttentionPlan>(std::move(inputs), std::move(outputs), attrs, options, mask_strides, row,
                                                 tiling, workspace, bytes, flops));
}

namespace {
Status run_attention(Stream& stream, std::span<const Tensor> in, const Tensor& o, const AttentionAttrs& attrs) {
  PlanKey key("attention", stream.context().isa());
  for (const Tensor& t : in) key.add(t.desc());
  key.add(o.desc());
  add_attrs(key, attrs);
  AttentionOptions options;
  if (in.size() == 4) options.mask = in[3].desc();
  const Tensor out[] = {o};
  return run_cached(stream, key, [&] { return Attention::plan(stream.context(), in[0].desc(), in[1].desc(), in[2].desc(), o.desc(), attrs, options); },
                    in, out);
}
}  // namespace

Status attention(Stream& stream, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o, const AttentionAttrs& attrs) {
  const Tensor in[] = {q, k, v};
  return run_attention(stream, in, o, attrs);
}

Status attention(Stream& stream, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, const Tensor& o,
                 const AttentionAttrs& attrs) {
  const Tensor in[] = {q, k, v, mask};
  return run_attention(stream, in, o, attrs);
}

// ------------------------------------------------------------------ paged

namespace {

// With variable lengths a sequence's queries take the row chosen for their
// count: one choice for each count up to this (the decode rows' shapes,
// kernels/attention.cpp) and one for more.
constexpr std::int64_t kDecodePositions = 8;

// Where a paged plan's sequences come from: the cache's own (input seq_ids)
// or the caller's block tables (inputs block_tables and seq_lens).
enum class PagedSequences { cache_ids, block_tables };

class PagedAttentionPlan final : public Plan {
 public:
  // kernels: the choice for q's Sq, or with variable lengths those for 1 ..
  // kDecodePositions query positions and one for more.
  // mask_strides: the mask's over [B, Hq, Sq, keys] (none: no mask), and
  // mask_keys the keys it covers (0: broadcast over any number).
  PagedAttentionPlan(std::shared_ptr<const KvCache> cache, PagedSequences sequences, std::vector<TensorDesc> inputs,
                     std::vector<TensorDesc> outputs, const AttentionAttrs& attrs, std::int64_t max_kv_len, bool varlen,
                     std::optional<Strides> mask_strides, std::int64_t mask_keys, std::vector<RowChoice> kernels,
                     std::int64_t workspace, std::int64_t bytes, std::int64_t flops)
      : Plan(kernels[0].row->name, bytes, flops), cache_(std::move(cache)), sequences_(sequences), inputs_(std::move(inputs)),
        outputs_(std::move(outputs)), attrs_(attrs), band_(attrs, max_kv_len, sequence_dim(inputs_[0])),
        max_kv_len_(max_kv_len), varlen_(varlen), mask_strides_(std::move(mask_strides)), mask_keys_(mask_keys),
        kernels_(std::move(kernels)), workspace_(workspace) {}

  std::string_view op() const override { return "paged_attention"; }
  std::int64_t workspace_bytes() const override { return workspace_; }

  Status do_run(Stream& stream, std::span<const Tensor> in, std::span<const Tensor> out, void* workspace) const override {
    static constexpr std::string_view kIds[] = {"q", "seq_ids", "mask"}, kIdsVarlen[] = {"q", "seq_ids", "cu_seqlens_q"},
                                      kTables[] = {"q", "block_tables", "seq_lens", "mask"},
                                      kTablesVarlen[] = {"q", "block_tables", "seq_lens", "cu_seqlens_q"};
    const bool tables = sequences_ == PagedSequences::block_tables;
    using Names = std::span<const std::string_view>;
    const Names names = tables ? (varlen_ ? Names(kTablesVarlen) : Names(kTables)) : (varlen_ ? Names(kIdsVarlen) : Names(kIds));
    TESSERA_RETURN_IF_ERROR(check_run(op(), in, inputs_, names.first(inputs_.size()), out, outputs_));
    const TensorDesc &q = inputs_[0], &o = outputs_[0];
    const TensorDesc* lse = out.size() == 2 ? &outputs_[1] : nullptr;
    const KvCacheConfig& c = cache_->config();
    const int r = q.rank();
    const std::int64_t batch = inputs_[1].shape[0], dim = c.head_dim, hkv = c.kv_heads, group = q.shape[r - 2] / hkv;
    const std::size_t extra = tables ? 3 : 2;  // cu_seqlens_q or the mask
    const std::int32_t* cu = varlen_ ? in[extra].data_as<const std::int32_t>() : nullptr;
    if (varlen_) TESSERA_RETURN_IF_ERROR(check_cu_seqlens(cu, "cu_seqlens_q", batch, q.shape[0]));
    std::vector<Unit> units;
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t sq = varlen_ ? cu[b + 1] - cu[b] : q.shape[1];
      TESSERA_ASSIGN_OR_RETURN(const Sequence s, tables ? table_sequence(in, b, sq) : cache_sequence(in, b));
      // Sequence b in errors.
      const auto name = [&] { return tables ? fmt::format("seq_lens[{}]: the sequence", b) : fmt::format("seq_ids[{}]: sequence {}", b, s.id); };
      if (s.length > max_kv_len_)
        return Status::invalid_argument(fmt::format("{} holds {} tokens, the plan was made for at most {}", name(), s.length, max_kv_len_));
      if (s.length < sq)  // q's tokens are the sequence's last Sq, stored before the attention
        return Status::invalid_argument(fmt::format("{} holds {} tokens, fewer than q's {} new ones ({} them to the cache first)", name(),
                                                    s.length, sq, tables ? "write" : "append"));
      if (mask_keys_ > 0 && s.length > mask_keys_)
        return Status::invalid_argument(fmt::format("mask: covers {} keys, and {} holds {} tokens", mask_keys_, name(), s.length));
      if (sq == 0) continue;
      // Offsets of the sequence's first query: row b, or row cu[b] of the packed queries.
      const std::int64_t first = varlen_ ? cu[b] : b;
      const std::int64_t lse_off = !lse ? 0 : varlen_ ? first * lse->strides[1] : b * lse->strides[0];
      const RowChoice* kernel = &kernels_[varlen_ ? std::size_t(std::min(sq, kDecodePositions + 1) - 1) : 0];
      for (std::int64_t h = 0; h < hkv; ++h) {
        Unit u = query_unit(attrs_, band_, in, out, first * q.strides[0], first * o.strides[0], lse_off, h, group, sq, s.length);
        const std::int64_t head = h * c.num_blocks * c.block_size;  // the head's first slot
        u.args.kv = {.dtype = c.dtype,
                     .k = at(cache_->k_pool(), c.dtype, head * dim),
                     .v = at(cache_->v_pool(), c.dtype, head * dim),
                     .k_token_stride = dim,
                     .v_token_stride = dim,
                     .block_table = s.table,
                     .block_size = c.block_size,
                     .block_stride = c.block_size * dim,
                     .k_scale = cache_->k_scales() ? cache_->k_scales() + head : nullptr,
                     .v_scale = cache_->v_scales() ? cache_->v_scales() + head : nullptr,
                     .scale_block_stride = c.block_size};
        if (mask_strides_) {
          const Strides& ms = *mask_strides_;
          u.args.mask_dtype = inputs_[extra].dtype;
          u.args.mask = at(in[extra].data(), u.args.mask_dtype, b * ms[0] + h * group * ms[1]);
          u.args.mask_head_stride = ms[1];
          u.args.mask_pos_stride = ms[2];
          u.args.mask_key_stride = ms[3];
        }
        u.kernel = kernel;
        units.push_back(u);
      }
    }
    return run_units(stream, op(), units, workspace);
  }

 private:
  // Sequence b of a run: its length and block table (and the cache's id).
  struct Sequence {
    std::int64_t length;
    const std::int32_t* table;
    std::int32_t id = -1;
  };
  // The cache's sequence named by seq_ids[b].
  Result<Sequence> cache_sequence(std::span<const Tensor> in, std::int64_t b) const {
    const std::int32_t id = in[1].data_as<const std::int32_t>()[b * inputs_[1].strides[0]];
    const Result<std::int64_t> length = cache_->length(id);
    if (!length.ok()) return Status::invalid_argument(fmt::format("seq_ids[{}]: {}", b, length.status().message()));
    return Sequence{*length, cache_->block_table(id)->data(), id};
  }
  // Row b of the caller's block tables, with seq_lens[b] tokens and sq new
  // queries: the blocks it reads must be in the table and in the pool. Under
  // a window those before the first query's window are not read, and not
  // checked (an engine may have freed them).
  Result<Sequence> table_sequence(std::span<const Tensor> in, std::int64_t b, std::int64_t sq) const {
    const TensorDesc &tables = inputs_[1], &lens = inputs_[2];
    const std::int64_t length = in[2].data_as<const std::int32_t>()[b * lens.strides[0]];
    const auto* table = in[1].data_as<const std::int32_t>() + b * tables.strides[0];
    const std::int64_t bs = cache_->config().block_size, blocks = (length + bs - 1) / bs, width = tables.shape[1];
    if (length < 0) return Status::invalid_argument(fmt::format("seq_lens[{}]: {} is negative", b, length));
    if (blocks > width)
      return Status::invalid_argument(fmt::format("seq_lens[{}]: {} tokens take {} blocks of {}, and block_tables rows hold {}", b,
                                                  length, blocks, bs, width));
    for (std::int64_t j = band_.first_key(length - sq, length) / bs; j < blocks; ++j)
      if (table[j] < 0 || table[j] >= cache_->config().num_blocks)
        return Status::invalid_argument(fmt::format("block_tables[{}, {}]: block {} is not in the cache's [0, {})", b, j, table[j],
                                                    cache_->config().num_blocks));
    return Sequence{length, table};
  }

  std::shared_ptr<const KvCache> cache_;
  PagedSequences sequences_;
  std::vector<TensorDesc> inputs_, outputs_;
  AttentionAttrs attrs_;
  RelativeBand band_;  // keys: max_kv_len; positions: q's (variable lengths: the total)
  std::int64_t max_kv_len_;
  bool varlen_;
  std::optional<Strides> mask_strides_;
  std::int64_t mask_keys_;
  std::vector<RowChoice> kernels_;
  std::int64_t workspace_;
};

// Both paged plans: `sequences` are the descs that name the sequences (seq_ids, or block_tables and seq_lens).
Result<PlanPtr> plan_paged(Context& ctx, std::shared_ptr<const KvCache> cache, const TensorDesc& q, PagedSequences kind,
                           std::vector<TensorDesc> sequences, const TensorDesc& o, std::int64_t max_kv_len,
                           const AttentionAttrs& attrs, const std::optional<TensorDesc>& lse, const std::optional<TensorDesc>& mask) {
  if (!cache) return Status::invalid_argument("cache: no cache given");
  const bool varlen = q.rank() == 3;
  TESSERA_RETURN_IF_ERROR(check_queries(q, o, varlen ? 3 : 4));
  const KvCacheConfig& c = cache->config();
  const int r = q.rank();
  const std::int64_t hq = q.shape[r - 2], dim = q.shape[r - 1];
  const std::int64_t sq = q.shape[r - 3];  // variable lengths: the total
  if (dim != c.head_dim)
    return Status::invalid_argument(fmt::format("q: head dim {} differs from the cache's head_dim {}", dim, c.head_dim));
  TESSERA_RETURN_IF_ERROR(check_groups(hq, c.kv_heads, "the cache"));
  const std::int64_t batch = sequences[0].rank() >= 1 ? sequences[0].shape[0] : 0;
  const std::string b_dims = varlen ? "[B]" : fmt::format("[B = {}]", q.shape[0]);
  if (kind == PagedSequences::cache_ids) {
    const TensorDesc& ids = sequences[0];
    TESSERA_RETURN_IF_ERROR(ids.validate("seq_ids"));
    if (ids.dtype != DType::i32 || ids.rank() != 1 || (!varlen && batch != q.shape[0]))
      return Status::invalid_argument(fmt::format("seq_ids: {} is not i32 {}", ids.to_string(), b_dims));
  } else {
    const TensorDesc &tables = sequences[0], &lens = sequences[1];
    TESSERA_RETURN_IF_ERROR(tables.validate("block_tables"));
    TESSERA_RETURN_IF_ERROR(lens.validate("seq_lens"));
    if (tables.dtype != DType::i32 || tables.rank() != 2 || (!varlen && batch != q.shape[0]) ||
        (tables.shape[1] > 1 && tables.strides[1] != 1))
      return Status::invalid_argument(fmt::format("block_tables: {} is not i32 {} x max_blocks with unit stride along a row",
                                                  tables.to_string(), b_dims));
    if (lens.dtype != DType::i32 || lens.rank() != 1 || lens.shape[0] != batch)
      return Status::invalid_argument(fmt::format("seq_lens: {} is not i32 [B = {}] (block_tables' rows)", lens.to_string(), batch));
  }
  if (max_kv_len < 0) return Status::invalid_argument(fmt::format("max_kv_len: {} is negative", max_kv_len));
  TESSERA_RETURN_IF_ERROR(check_attrs(attrs, hq, mask.has_value()));
  TESSERA_RETURN_IF_ERROR(check_lse(lse, varlen ? Shape{hq, sq} : Shape{batch, hq, sq}));
  std::vector<TensorDesc> inputs{q}, outputs{o};
  inputs.insert(inputs.end(), sequences.begin(), sequences.end());
  if (varlen) inputs.push_back(TensorDesc::contiguous(DType::i32, Shape{batch + 1}));
  if (lse) outputs.push_back(*lse);
  std::optional<Strides> mask_strides;
  std::int64_t mask_keys = 0;
  if (mask) {
    if (varlen) return Status::invalid_argument("mask: not supported with variable lengths (q of rank 3)");
    // Keys: as many as the mask's last dim covers (each sequence's length is checked by run()), or any when it is 1.
    const std::int64_t keys = mask->rank() > 0 ? mask->shape[mask->rank() - 1] : 1;
    TESSERA_ASSIGN_OR_RETURN(mask_strides, check_mask(*mask, Shape{batch, hq, sq, std::max<std::int64_t>(keys, 1)}));
    mask_keys = keys > 1 ? keys : 0;
    inputs.push_back(*mask);
  }

  const std::int64_t group = hq / c.kv_heads;
  std::vector<RowChoice> kernels;
  std::int64_t workspace = 0;
  const auto choose = [&](std::int64_t positions) {
    const auto problem = make_problem(ctx, q.dtype, c.dtype, o.dtype, dim, positions, group, batch * c.kv_heads, max_kv_len, true, attrs);
    const Row* row = kernels::select<kernels::AttentionFamily>(problem, ctx.isa());
    kernels.push_back({row, row->tiling(problem, ctx.hw())});
    workspace = std::max(workspace, split_workspace(kernels.back().tiling, batch * c.kv_heads, max_kv_len, positions * group, dim));
  };
  if (!varlen) {
    choose(sq);
  } else {
    for (std::int64_t p = 1; p <= kDecodePositions; ++p) choose(p);
    choose(std::max(kDecodePositions + 1, sq));
  }
  const std::int64_t kv_bytes = saturating_mul(2 * batch * c.kv_heads * dim, saturating_mul(max_kv_len, bytes_of(c.dtype)));
  std::int64_t bytes = saturating_add(traffic_bytes({q, o}), kv_bytes);
  if (mask) bytes = saturating_add(bytes, traffic_bytes({*mask}));
  const std::int64_t flops = attention_flops(varlen ? hq : batch * hq, sq, attrs.window > 0 ? std::min(max_kv_len, attrs.window) : max_kv_len, dim);
  return PlanPtr(std::make_shared<PagedAttentionPlan>(std::move(cache), kind, std::move(inputs), std::move(outputs), attrs, max_kv_len,
                                                      varlen, std::move(mask_strides), mask_keys, std::move(kernels), workspace, bytes,
                                                      flops));
}

}  // namespace

Result<PlanPtr> PagedAttention::plan(Context& ctx, std::shared_ptr<const KvCache> cache, const TensorDesc& q,
                                     const TensorDesc& seq_ids, const TensorDesc& o, std::int64_t max_kv_len,
                                     const AttentionAttrs& attrs, const std::optional<TensorDesc>& lse,
                                     const std::optional<TensorDesc>& mask) {
  return plan_paged(ctx, std::move(cache), q, PagedSequences::cache_ids, {seq_ids}, o, max_kv_len, attrs, lse, mask);
}

Result<PlanPtr> PagedAttention::plan_block_tables(Context& ctx, std::shared_ptr<const KvCache> cache, const TensorDesc& q,
                                                  const TensorDesc& block_tables, const TensorDesc& seq_lens, const TensorDesc& o,
                                                  std::int64_t max_kv_len, const AttentionAttrs& attrs,
                                                  const std::optional<TensorDesc>& lse, const std::optional<TensorDesc>& mask) {
  return plan_paged(ctx, std::move(cache), q, PagedSequences::block_tables, {block_tables, seq_lens}, o, max_kv_len, attrs, lse, mask);
}

namespace {
// One-shot paged attention: plans per power-of-two bucket of the longest
// sequence (at least 64), so a sequence growing token by token re-plans only
// when it doubles. in: {q, seq_ids, [cu_seqlens_q]} or {q, block_tables, seq_lens}.
Status run_paged_attention(Stream& stream, const std::shared_ptr<const KvCache>& cache, PagedSequences kind,
                           std::span<const Tensor> in, const Tensor& o, const AttentionAttrs& attrs) {
  if (!cache) return Status::invalid_argument("cache: no cache given");
  const bool tables = kind == PagedSequences::block_tables;
  const Tensor& lengths = tables ? in[2] : in[1];  // seq_lens, or the ids whose lengths the cache holds
  std::int64_t longest = 0;
  if (lengths.dtype() == DType::i32 && lengths.rank() == 1 && lengths.data())
    for (std::int64_t b = 0; b < lengths.dim(0); ++b) {
      const std::int32_t v = lengths.data_as<const std::int32_t>()[b * lengths.strides()[0]];
      if (tables) longest = std::max<std::int64_t>(longest, v);
      else if (auto n = cache->length(v); n.ok()) longest = std::max(longest, *n);
    }
  // A length past what the tables hold is run()'s error; it must not size the plan first.
  if (tables && in[1].rank() == 2) longest = std::min(longest, in[1].dim(1) * cache->config().block_size);
  std::int64_t bucket = 64;
  while (bucket < longest) bucket *= 2;
  PlanKey key("paged_attention", stream.context().isa());
  key.add(std::int64_t(reinterpret_cast<std::intptr_t>(cache.get()))).add(std::int64_t(kind));
  for (const Tensor& t : in) key.add(t.desc());
  key.add(o.desc()).add(bucket);
  add_attrs(key, attrs);
  const Tensor out[] = {o};
  return run_cached(stream, key, [&] {
    Context& ctx = stream.context();
    return tables ? PagedAttention::plan_block_tables(ctx, cache, in[0].desc(), in[1].desc(), in[2].desc(), o.desc(), bucket, attrs)
                  : PagedAttention::plan(ctx, cache, in[0].desc(), in[1].desc(), o.desc(), bucket, attrs);
  }, in, out);
}
}  // namespace

Status paged_attention(Stream& stream, const std::shared_ptr<const KvCache>& cache, const Tensor& q, const Tensor& seq_ids,
                       const Tensor& o, const AttentionAttrs& attrs) {
  const Tensor in[] = {q, seq_ids};
  return run_paged_attention(stream, cache, PagedSequences::cache_ids, in, o, attrs);
}

Status paged_attention_varlen(Stream& stream, const std::shared_ptr<const KvCache>& cache, const Tensor& q, const Tensor& seq_ids,
                              const Tensor& cu_seqlens_q, const Tensor& o, const AttentionAttrs& attrs) {
  const Tensor in[] = {q, seq_ids, cu_seqlens_q};
  return run_paged_attention(stream, cache, PagedSequences::cache_ids, in, o, attrs);
}

Status paged_attention_block_tables(Stream& stream, const std::shared_ptr<const KvCache>& cache, const Tensor& q,
                                    const Tensor& block_tables, const Tensor& seq_lens, const Tensor& o, const AttentionAttrs& attrs) {
  const Tensor in[] = {q, block_tables, seq_lens};
  return run_paged_attention(stream, cache, PagedSequences::block_tables, in, o, attrs);
}

}  // namespace tessera::ops
