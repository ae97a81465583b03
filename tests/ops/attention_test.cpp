// Attention (flash-style, split-KV decode, variable lengths), the paged KV
// cache and PagedAttention, each against a naive fp64 reference written here:
// logits in double, softmax with the row maximum subtracted, a row that sees
// no finite logit gives zeros and log-sum-exp -inf. Every ISA level the
// machine has (IsaTest), f32 and bf16, GQA, causal, masks, strided views.
#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/element.hpp"
#include "support/harness.hpp"
#include "tessera/ops/attention.hpp"
#include "tessera/ops/kv_cache.hpp"

namespace tessera::testing {
namespace {

using ops::AttentionAttrs;
using ops::AttentionOptions;
using ops::KvCache;
using ops::KvCacheConfig;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// ------------------------------------------------------------------ tolerances

// From compare.hpp's per-dtype table. f32: the longest sum at f32 precision
// behind an element is the D-term dot product of a logit; the P·V sum is a
// convex combination (its weights sum to 1), so its rounding does not grow
// with Skv. Through bf16 (bf16 inputs, or a bf16 o): bf16 operands are exact
// in f32 and every sum is still f32; the only bf16 roundings are of the
// probabilities on their way into bf16 dot products (each weight off by at
// most 2^-9 relative, weights summing to 1: at most 2^-9 · max|v| in o) and
// of o itself (2^-9 relative) — so no growth term (reduction 1).
Tolerance attention_tolerance(DType in, DType out, std::int64_t head_dim) {
  if (in == DType::bf16 || out == DType::bf16) return tolerance_for(DType::bf16);
  return tolerance_for(DType::f32, head_dim);
}


// ------------------------------------------------------------- fp64 reference

// A strided 4-D view: element (i0, i1, i2, i3) at offset + Σ i·stride, read
// from any float dtype and widened to double.
struct View4 {
  const void* data = nullptr;
  DType dtype = DType::f32;
  std::int64_t offset = 0;
  std::array<std::int64_t, 4> shape{}, stride{};
  double at(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) const {
    return detail::load(data, dtype, offset + a * stride[0] + b * stride[1] + c * stride[2] + d * stride[3]);
  }
};

View4 view4(const Tensor& t) {
  View4 v{t.data(), t.dtype()};
  for (int i = 0; i < 4; ++i) v.shape[i] = t.dim(i), v.stride[i] = t.strides()[i];
  return v;
}

// Rows [start, start + len) of a rank-3 [T, H, D] tensor as a [1, len, H, D] view.
View4 rows(const Tensor& t, std::int64_t start, std::int64_t len) {
  View4 v{t.data(), t.dtype(), start * t.strides()[0]};
  v.shape = {1, len, t.dim(1), t.dim(2)};
  v.stride = {0, t.strides()[0], t.strides()[1], t.strides()[2]};
  return v;
}

// Batch element b of a rank-4 view, as a batch of one.
View4 batch(View4 v, std::int64_t b) {
  v.offset += b * v.stride[0];
  v.shape[0] = 1;
  return v;
}

// Where the reference writes: f32, element (i0, i1, i2, i3) at offset + Σ i·stride.
struct Sink {
  float* data = nullptr;
  std::int64_t offset = 0;
  std::array<std::int64_t, 4> stride{};
  float& at(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) const {
    return data[offset + a * stride[0] + b * stride[1] + c * stride[2] + d * stride[3]];
  }
};

// An f32 tensor of rank 3 or 4 (rank 3: the fourth index is ignored), from batch element b on.
Sink sink(const Tensor& t, std::int64_t b = 0) {
  Sink s{t.data_as<float>()};
  for (int i = 0; i < t.rank(); ++i) s.stride[i] = t.strides()[i];
  s.offset = b * s.stride[0];
  return s;
}

double scale_of(const AttentionAttrs& attrs, std::int64_t head_dim) {
  return attrs.scale == 0.0f ? 1.0 / std::sqrt(double(head_dim)) : double(attrs.scale);
}

// q [B, Sq, Hq, D], k and v [B, Skv, Hkv, D], mask (if any) [B, Hq, Sq, Skv]
// (broadcast strides allowed); writes o [B, Sq, Hq, D] and lse [B, Hq, Sq].
// From attrs: the scale, softcap (each scaled logit s to c tanh(s / c)), causal; the window (with causal: query i sees keys j
// in (i + Skv - Sq - window, i + Skv - Sq]); ALiBi (Hq slopes, or none:
// -slope * |i + Skv - Sq - j| added to each logit); sinks (Hq logits, or
// none: e^sink joins each row's denominator, and lse is its log).
void reference(const View4& q, const View4& k, const View4& v, const View4* mask, const AttentionAttrs& attrs, const Sink& o,
               const Sink* lse) {
  constexpr double kNegInfD = -std::numeric_limits<double>::infinity();
  const std::int64_t nb = q.shape[0], sq = q.shape[1], hq = q.shape[2], d = q.shape[3];
  const std::int64_t skv = k.shape[1], hkv = k.shape[2], group = hq / hkv, window = attrs.window;
  const double scale = scale_of(attrs, d);
  std::vector<double> kk(skv * d), vv(skv * d), qq(d), logit(skv), acc(d);
  for (std::int64_t b = 0; b < nb; ++b)
    for (std::int64_t h = 0; h < hq; ++h) {
      const std::int64_t kvh = h / group;
      const double sink_logit = attrs.sinks.empty() ? kNegInfD : double(attrs.sinks[std::size_t(h)]);
      for (std::int64_t j = 0; j < skv; ++j)
        for (std::int64_t e = 0; e < d; ++e) kk[j * d + e] = k.at(b, j, kvh, e), vv[j * d + e] = v.at(b, j, kvh, e);
      for (std::int64_t i = 0; i < sq; ++i) {
        for (std::int64_t e = 0; e < d; ++e) qq[e] = q.at(b, i, h, e);
        double m = kNegInfD;
        for (std::int64_t j = 0; j < skv; ++j) {
          if (attrs.causal && (j > i + skv - sq || (window > 0 && j <= i + skv - sq - window))) {
            logit[j] = kNegInfD;
            continue;
          }
          double s = 0;
          for (std::int64_t e = 0; e < d; ++e) s += qq[e] * kk[j * d + e];
          s *= scale;
          if (attrs.softcap > 0.0f) s = double(attrs.softcap) * std::tanh(s / double(attrs.softcap));
          if (mask) s += mask->at(b, h, i, j);
          if (!attrs.alibi_slopes.empty()) s -= double(attrs.alibi_slopes[std::size_t(h)]) * double(std::abs(i + skv - sq - j));
          logit[j] = s;
          m = std::max(m, s);
        }
        if (m == kNegInfD) {  // sees no key: zeros, lse -inf (the sink)
          for (std::int64_t e = 0; e < d; ++e) o.at(b, i, h, e) = 0.0f;
          if (lse) lse->at(b, h, i, 0) = float(sink_logit);
          continue;
        }
        m = std::max(m, sink_logit);
        double sum = std::exp(sink_logit - m);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (std::int64_t j = 0; j < skv; ++j) {
          const double p = std::exp(logit[j] - m);
          if (p == 0.0) continue;
          sum += p;
          for (std::int64_t e = 0; e < d; ++e) acc[e] += p * vv[j * d + e];
        }
        for (std::int64_t e = 0; e < d; ++e) o.at(b, i, h, e) = float(acc[e] / sum);
        if (lse) lse->at(b, h, i, 0) = float(m + std::log(sum));
      }
    }
}

// The reference for [B, S, H, D] operands: o f32 [B, Sq, Hq, D] and lse f32 [B, Hq, Sq].
std::pair<Tensor, Tensor> reference_bshd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask,
                                         const AttentionAttrs& attrs) {
  const std::int64_t nb = q.dim(0), sq = q.dim(1), hq = q.dim(2), d = q.dim(3), skv = k.dim(1);
  Tensor o = zeros(DType::f32, {nb, sq, hq, d}), lse = zeros(DType::f32, {nb, hq, sq});
  Tensor expanded;
  View4 mv;
  if (mask) {
    expanded = value_or_die(mask->expand({nb, hq, sq, skv}));
    mv = view4(expanded);
  }
  const Sink lse_sink = sink(lse);
  reference(view4(q), view4(k), view4(v), mask ? &mv : nullptr, attrs, sink(o), &lse_sink);
  return {o, lse};
}

// ------------------------------------------------------------------- helpers

void fill_nan(const Tensor& contiguous) {
  for (std::int64_t i = 0; i < contiguous.numel(); ++i) detail::store(contiguous.data(), contiguous.dtype(), i, kNaN);
}

// An output that the op must overwrite everywhere: NaN until then.
Tensor nan_tensor(DType dt, const Shape& shape) {
  Tensor t = value_or_die(Tensor::empty(dt, shape));
  fill_nan(t);
  return t;
}

// [B, S, H, D]; with `bhsd`, a [B, H, S, D] tensor viewed as [B, S, H, D].
Tensor bshd(DType dt, std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d, bool bhsd, std::uint64_t seed,
            float lo = -1.0f, float hi = 1.0f) {
  if (!bhsd) return random_tensor(dt, {b, s, h, d}, seed, lo, hi);
  return value_or_die(random_tensor(dt, {b, h, s, d}, seed, lo, hi).permute({0, 2, 1, 3}));
}

Tensor nan_bshd(DType dt, std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d, bool bhsd) {
  if (!bhsd) return nan_tensor(dt, {b, s, h, d});
  return value_or_die(nan_tensor(dt, {b, h, s, d}).permute({0, 2, 1, 3}));
}

Tensor i32_tensor(const std::vector<std::int32_t>& values) {
  Tensor t = zeros(DType::i32, {std::int64_t(values.size())});
  std::copy(values.begin(), values.end(), t.data_as<std::int32_t>());
  return t;
}

Tensor rows_of(const Tensor& t, std::int64_t start, std::int64_t end) { return value_or_die(t.slice(0, start, end)); }

// Runs a plan, giving it the workspace it asks for from the context's pool.
Status run_plan(Context& ctx, Stream& stream, const ops::Plan& plan, const std::vector<Tensor>& inputs,
                const std::vector<Tensor>& outputs) {
  MemoryPool::Block workspace;
  if (plan.workspace_bytes() > 0) {
    Result<MemoryPool::Block> block = ctx.memory().allocate(plan.workspace_bytes());
    if (!block.ok()) return block.status();
    workspace = std::move(block).value();
  }
  return plan.run(stream, std::span<const Tensor>(inputs), std::span<const Tensor>(outputs), workspace.data());
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// An error whose message contains `word` (any case).
::testing::AssertionResult fails_mentioning(const Status& s, std::string_view word) {
  if (s.ok()) return ::testing::AssertionFailure() << "expected an error mentioning '" << word << "', got ok";
  if (lower(s.message()).find(lower(std::string(word))) == std::string::npos)
    return ::testing::AssertionFailure() << "error does not mention '" << word << "': " << s.to_string();
  return ::testing::AssertionSuccess();
}
template <class T>
::testing::AssertionResult fails_mentioning(const Result<T>& r, std::string_view word) {
  return fails_mentioning(r.status(), word);
}

// An error naming one of `names` (where either argument may fairly be blamed).
template <class T>
::testing::AssertionResult fails_naming_one_of(const Result<T>& r, std::initializer_list<std::string_view> names) {
  for (std::string_view n : names)
    if (fails_naming(r, n)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "error names none of the expected arguments: "
                                       << (r.ok() ? std::string("ok") : r.status().to_string());
}

// ------------------------------------------------------------ Attention op

enum class MaskKind { none, full, padding, rows_cols_bf16 };

struct Case {
  std::int64_t b = 1, sq = 1, skv = 1, hq = 1, hkv = 1, d = 64;
  DType in = DType::f32, out = DType::f32;
  std::optional<DType> kv;  // k and v's dtype when not `in`
  bool causal = false;
  std::int64_t window = 0;
  float scale = 0.0f;
  MaskKind mask = MaskKind::none;
  bool bhsd = false;       // q, k, v and o are [B, H, S, D] tensors passed as permuted views
  bool padded_kv = false;  // k and v with gaps between rows
  bool lse = true;
  std::uint64_t seed = 1;
  bool alibi = false;  // ALiBi with alibi_slopes(hq)
  bool sinks = false;  // sinks sink_logits(hq)
  float softcap = 0.0f;

  std::string name() const {
    return fmt::format("B={} Sq={} Skv={} Hq={} Hkv={} D={} in={} kv={} out={} causal={} window={} scale={} mask={} bhsd={} "
                       "padded_kv={} lse={} seed={} alibi={} sinks={} softcap={}",
                       b, sq, skv, hq, hkv, d, to_string(in), to_string(kv.value_or(in)), to_string(out), causal, window, scale,
                       int(mask), bhsd, padded_kv, lse, seed, alibi, sinks, softcap);
  }
};

// Sink logits for n heads, from well below a row's logits (the logits of
// these tests' q and k lie within about ±8) to well above them: -6, -1, 4, 6, -5, 0, 2, 7, ...
std::vector<float> sink_logits(std::int64_t n) {
  std::vector<float> s;
  for (std::int64_t h = 0; h < n; ++h) s.push_back(float(h % 4) * 4.0f - 6.0f + float(h % 3));
  return s;
}

// ALiBi's slopes for n heads (a power of two, as in the paper and BLOOM): 2^(-8 (h + 1) / n).
std::vector<float> alibi_slopes(std::int64_t n) {
  std::vector<float> s;
  for (std::int64_t h = 0; h < n; ++h) s.push_back(std::exp2(-8.0f * float(h + 1) / float(n)));
  return s;
}

// Additive f32 [B, Hq, Sq, Skv]: values in [-3, 0) and a scatter of -inf.
Tensor full_mask(std::int64_t b, std::int64_t hq, std::int64_t sq, std::int64_t skv, std::uint64_t seed) {
  Tensor m = random_tensor(DType::f32, {b, hq, sq, skv}, seed, -3.0f, 0.0f);
  float* p = m.data_as<float>();
  for (std::int64_t n = 0; n < b * hq; ++n)
    for (std::int64_t i = 0; i < sq; ++i)
      for (std::int64_t j = 0; j < skv; ++j)
        if ((i * 7 + j * 3 + n) % 11 == 0) p[(n * sq + i) * skv + j] = -kInf;
  return m;
}

// Key padding [B, 1, 1, Skv]: batch element n keeps its first max(1, Skv - 5 (n + 1)) keys.
Tensor padding_mask(std::int64_t b, std::int64_t skv) {
  Tensor m = zeros(DType::f32, {b, 1, 1, skv});
  for (std::int64_t n = 0; n < b; ++n)
    for (std::int64_t j = std::max<std::int64_t>(1, skv - 5 * (n + 1)); j < skv; ++j) m.data_as<float>()[n * skv + j] = -kInf;
  return m;
}

class AttentionTest : public IsaTest {
 protected:
  // Plans and runs Attention, then compares o (and lse) with the fp64
  // reference. References are memoized by `memo_key` (when given) across ISA
  // levels: the inputs are the same, only the kernel changes.
  void run_and_compare(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask, const Tensor& o,
                       const Tensor* lse, const AttentionAttrs& attrs, const std::string& memo_key = {}) {
    AttentionOptions options;
    if (mask) options.mask = mask->desc();
    if (lse) options.lse = lse->desc();
    Result<ops::PlanPtr> plan = ops::Attention::plan(ctx_, q.desc(), k.desc(), v.desc(), o.desc(), attrs, options);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    SCOPED_TRACE(fmt::format("kernel {}", (*plan)->kernel()));
    std::vector<Tensor> inputs = {q, k, v}, outputs = {o};
    if (mask) inputs.push_back(*mask);
    if (lse) outputs.push_back(*lse);
    const Status s = run_plan(ctx_, stream_, **plan, inputs, outputs);
    ASSERT_TRUE(s.ok()) << s.to_string();

    static std::map<std::string, std::pair<Tensor, Tensor>> memo;
    std::pair<Tensor, Tensor> ref;
    if (auto it = memo.find(memo_key); !memo_key.empty() && it != memo.end()) {
      ref = it->second;
    } else {
      ref = reference_bshd(q, k, v, mask, attrs);
      if (!memo_key.empty()) memo.emplace(memo_key, ref);
    }
    const Tolerance tol = attention_tolerance(q.dtype(), o.dtype(), q.dim(3));
    EXPECT_TRUE(close(o, ref.first, tol)) << "o";
    if (lse) {
      EXPECT_TRUE(close(*lse, ref.second, tol)) << "lse";
    }
  }

  void check(const Case& c) {
    SCOPED_TRACE(c.name());
    const Tensor q = bshd(c.in, c.b, c.sq, c.hq, c.d, c.bhsd, c.seed, -2.0f, 2.0f);
    Tensor k = bshd(c.kv.value_or(c.in), c.b, c.skv, c.hkv, c.d, c.bhsd, c.seed + 1, -2.0f, 2.0f);
    Tensor v = bshd(c.kv.value_or(c.in), c.b, c.skv, c.hkv, c.d, c.bhsd, c.seed + 2);
    if (c.padded_kv) k = padded_copy(k), v = padded_copy(v);
    const Tensor o = nan_bshd(c.out, c.b, c.sq, c.hq, c.d, c.bhsd);
    const Tensor lse = nan_tensor(DType::f32, {c.b, c.hq, c.sq});
    Tensor mask;
    switch (c.mask) {
      case MaskKind::none: break;
      case MaskKind::full: mask = full_mask(c.b, c.hq, c.sq, c.skv, c.seed + 3); break;
      case MaskKind::padding: mask = padding_mask(c.b, c.skv); break;
      case MaskKind::rows_cols_bf16: mask = random_tensor(DType::bf16, {c.sq, c.skv}, c.seed + 3, -2.0f, 2.0f); break;
    }
    AttentionAttrs attrs{.scale = c.scale, .causal = c.causal, .window = c.window, .softcap = c.softcap};
    if (c.alibi) attrs.alibi_slopes = alibi_slopes(c.hq);
    if (c.sinks) attrs.sinks = sink_logits(c.hq);
    run_and_compare(q, k, v, mask.defined() ? &mask : nullptr, o, c.lse ? &lse : nullptr, attrs, c.name());
  }
};

TEST_P(AttentionTest, HeadDimsShapesAndDtypes) {
  // GQA ratios 1, 4, 8; Sq = 1; lengths that are no multiple of any block;
  // Sq < Skv. Every head dim meets every shape and every (dtype, causal)
  // combination, cycling so that the cost stays small.
  struct Dims5 {
    std::int64_t b, sq, skv, hq, hkv;
  };
  const Dims5 shapes[] = {{1, 1, 37, 4, 4}, {2, 37, 37, 8, 2}, {1, 131, 131, 8, 1}, {2, 17, 131, 4, 4}};
  const std::int64_t head_dims[] = {8, 33, 40, 56, 64, 80, 96, 128, 256, 512};  // 8, 40, 56: a half-vector tail; 512: SD's VAE
  struct Combo {
    DType in, out;
    bool causal;
  };
  const Combo combos[] = {{DType::f32, DType::f32, false},
                          {DType::f32, DType::f32, true},
                          {DType::bf16, DType::bf16, true},
                          {DType::bf16, DType::f32, false}};
  for (std::size_t di = 0; di < std::size(head_dims); ++di)
    for (std::size_t si = 0; si < std::size(shapes); ++si) {
      const Dims5& s = shapes[si];
      const Combo& m = combos[(di + si) % std::size(combos)];
      check({.b = s.b, .sq = s.sq, .skv = s.skv, .hq = s.hq, .hkv = s.hkv, .d = head_dims[di], .in = m.in, .out = m.out,
             .causal = m.causal, .seed = 10 + di * 8 + si});
    }
}

TEST_P(AttentionTest, QueriesAndKvOfDifferentDtypes) {
  // f32 queries against a bf16 KV cache held contiguously (and the other way
  // round): decode (split KV), prefill and SD's cross-attention shapes.
  struct Mix {
    DType q, kv, o;
  };
  std::uint64_t seed = 700;
  for (const Mix m : {Mix{DType::f32, DType::bf16, DType::f32}, Mix{DType::f32, DType::bf16, DType::bf16}, Mix{DType::bf16, DType::f32, DType::bf16}}) {
    check({.b = 1, .sq = 1, .skv = 2048, .hq = 8, .hkv = 2, .d = 128, .in = m.q, .out = m.o, .kv = m.kv, .causal = true, .seed = ++seed});
    check({.b = 2, .sq = 37, .skv = 37, .hq = 8, .hkv = 2, .d = 64, .in = m.q, .out = m.o, .kv = m.kv, .causal = true, .seed = ++seed});
    check({.b = 1, .sq = 100, .skv = 77, .hq = 2, .hkv = 2, .d = 40, .in = m.q, .out = m.o, .kv = m.kv, .seed = ++seed});
  }
}

TEST_P(AttentionTest, DecodeShapesSplitKv) {
  // Sq <= 8 against short and long Skv: the split-KV kernel where Skv is long,
  // with a single sequence (B = 1) so that the keys must be split across cores.
  for (DType dt : {DType::f32, DType::bf16})
    for (std::int64_t sq : {1, 4, 8})
      for (std::int64_t skv : {1, 100, 2048})
        check({.b = skv == 2048 ? 1 : 2, .sq = sq, .skv = skv, .hq = 8, .hkv = 2, .d = 128, .in = dt, .out = dt,
               .causal = true, .seed = std::uint64_t(100 + sq * 10 + skv)});
  // Not causal; 32 query heads on 4 kv heads at D = 64 with a bf16 o from f32 inputs; B = 3, GQA 8, D = 80.
  check({.b = 1, .sq = 4, .skv = 2048, .hq = 8, .hkv = 2, .d = 128, .seed = 200});
  check({.b = 1, .sq = 1, .skv = 2048, .hq = 32, .hkv = 4, .d = 64, .out = DType::bf16, .causal = true, .seed = 201});
  check({.b = 3, .sq = 1, .skv = 1000, .hq = 8, .hkv = 1, .d = 80, .causal = true, .lse = false, .seed = 202});
  // bf16 at every head dim of the decode rows (the bf16 dot-product row takes those of whole 64-byte rows).
  for (std::int64_t d : {64, 80, 96, 256})
    check({.b = 1, .sq = 2, .skv = 700, .hq = 8, .hkv = 2, .d = d, .in = DType::bf16, .out = DType::bf16, .causal = true,
           .seed = std::uint64_t(203 + d)});
  // bf16 with 1 to 15 rows per kv head (the dot-product row's P V takes rows 4, 2 and 1 at a time).
  for (std::int64_t hq : {1, 2, 3, 5, 7})
    for (std::int64_t sq : {1, 2})
      check({.b = 1, .sq = sq, .skv = 300, .hq = hq, .hkv = 1, .d = 128, .in = DType::bf16, .out = DType::bf16, .causal = true,
             .seed = std::uint64_t(470 + 2 * hq + sq)});
}

TEST_P(AttentionTest, AdditiveMasks) {
  // Full [B, Hq, Sq, Skv] f32 with -inf entries, key padding [B, 1, 1, Skv]
  // with -inf, and a bf16 [Sq, Skv] mask broadcast over batch and heads; with
  // and without causal, Sq == Skv and Sq < Skv (77: cross-attention to text
  // tokens, keys in one block of three 32-key chunks in the f32 kernel).
  std::uint64_t seed = 300;
  for (DType dt : {DType::f32, DType::bf16})
    for (bool causal : {false, true})
      for (auto [sq, skv] : {std::pair<std::int64_t, std::int64_t>{19, 19}, {7, 45}, {33, 77}})
        for (MaskKind m : {MaskKind::full, MaskKind::padding, MaskKind::rows_cols_bf16})
          check({.b = 2, .sq = sq, .skv = skv, .hq = 4, .hkv = 2, .d = 64, .in = dt, .out = dt, .causal = causal, .mask = m,
                 .seed = seed++});
  // A decode shape with key padding (split-KV with a mask).
  check({.b = 2, .sq = 1, .skv = 1500, .hq = 8, .hkv = 2, .d = 128, .mask = MaskKind::padding, .seed = 340});
}

TEST_P(AttentionTest, FullyMaskedRowBesideInfiniteValues) {
  // A row whose mask hides every key gives zeros (lse -inf), even where the
  // rows beside it see a value that is infinite (their own outputs are then
  // not finite, as in the reference): its weights are 0, and 0 · inf is NaN.
  for (DType dt : {DType::f32, DType::bf16})
    for (std::int64_t sq : {1, 6}) {
      SCOPED_TRACE(fmt::format("{} Sq={}", to_string(dt), sq));
      const Tensor q = random_tensor(dt, {1, sq, 2, 64}, 360), k = random_tensor(dt, {1, 40, 1, 64}, 361);
      Tensor v = random_tensor(dt, {1, 40, 1, 64}, 362);
      detail::store(v.data(), dt, 5 * 64 + 3, kInf);
      Tensor mask = zeros(DType::f32, {1, 1, sq, 40});
      for (std::int64_t j = 0; j < 40; ++j) mask.data_as<float>()[j] = -kInf;  // query 0 sees nothing
      const Tensor o = nan_tensor(dt, {1, sq, 2, 64}), lse = nan_tensor(DType::f32, {1, 2, sq});
      AttentionOptions options;
      options.mask = mask.desc();
      options.lse = lse.desc();
      const ops::PlanPtr plan = value_or_die(ops::Attention::plan(ctx_, q.desc(), k.desc(), v.desc(), o.desc(), {}, options));
      ASSERT_TRUE(run_plan(ctx_, stream_, *plan, {q, k, v, mask}, {o, lse}).ok());
      for (std::int64_t h = 0; h < 2; ++h) {
        for (std::int64_t e = 0; e < 64; ++e) EXPECT_EQ(detail::load(o.data(), dt, h * 64 + e), 0.0f) << plan->kernel() << " head " << h;
        EXPECT_EQ(lse.data_as<float>()[h * sq], -kInf);
      }
    }
}

TEST_P(AttentionTest, SlidingWindow) {
  // Windows of 1 key, shorter than a key block, a few blocks, the whole
  // sequence and longer: prefill (Sq == Skv, Sq < Skv), decode with its keys
  // split across cores (the split starting at the window), GQA 4, f32 and bf16.
  std::uint64_t seed = 350;
  for (DType dt : {DType::f32, DType::bf16}) {
    for (std::int64_t window : {1, 17, 64, 299, 1000})
      check({.b = 2, .sq = 300, .skv = 300, .hq = 8, .hkv = 2, .d = 64, .in = dt, .out = dt, .causal = true, .window = window, .seed = seed++});
    check({.b = 1, .sq = 37, .skv = 200, .hq = 4, .hkv = 1, .d = 128, .in = dt, .out = dt, .causal = true, .window = 50, .seed = seed++});
    // More queries than keys: the first 15 rows see none (zeros, lse -inf), the band read past its center.
    check({.b = 2, .sq = 40, .skv = 25, .hq = 4, .hkv = 2, .d = 64, .in = dt, .out = dt, .causal = true, .window = 7, .seed = seed++});
    for (std::int64_t sq : {1, 4})
      for (std::int64_t window : {100, 1500})
        check({.b = 1, .sq = sq, .skv = 2048, .hq = 8, .hkv = 2, .d = 128, .in = dt, .out = dt, .causal = true, .window = window,
               .seed = seed++});
  }
}

TEST_P(AttentionTest, Alibi) {
  // ALiBi's per-head biases: causal prefill (Sq == Skv, Sq < Skv), no
  // causal mask (cross-attention, |distance| both ways), with a window,
  // decode with the keys split across cores, GQA 4 and 1, head dims 64 and
  // 128, f32 and bf16; o and lse against the fp64 reference.
  std::uint64_t seed = 380;
  for (DType dt : {DType::f32, DType::bf16}) {
    check({.b = 2, .sq = 300, .skv = 300, .hq = 8, .hkv = 2, .d = 64, .in = dt, .out = dt, .causal = true, .seed = seed++, .alibi = true});
    check({.b = 1, .sq = 37, .skv = 200, .hq = 4, .hkv = 1, .d = 128, .in = dt, .out = dt, .causal = true, .seed = seed++, .alibi = true});
    check({.b = 2, .sq = 33, .skv = 77, .hq = 4, .hkv = 4, .d = 64, .in = dt, .out = dt, .seed = seed++, .alibi = true});
    check({.b = 2, .sq = 300, .skv = 300, .hq = 8, .hkv = 2, .d = 64, .in = dt, .out = dt, .causal = true, .window = 50, .seed = seed++,
           .alibi = true});
    for (std::int64_t sq : {1, 4})
      check({.b = 1, .sq = sq, .skv = 2048, .hq = 8, .hkv = 2, .d = 128, .in = dt, .out = dt, .causal = true, .seed = seed++, .alibi = true});
  }
  // The biases change the result (slopes of 0 would leave it as without).
  const Tensor q = bshd(DType::f32, 1, 16, 2, 64, false, 390, -2.0f, 2.0f), k = bshd(DType::f32, 1, 16, 2, 64, false, 391, -2.0f, 2.0f);
  const Tensor v = bshd(DType::f32, 1, 16, 2, 64, false, 392), plain = zeros(DType::f32, {1, 16, 2, 64}), biased = zeros(DType::f32, {1, 16, 2, 64});
  ASSERT_TRUE(ops::attention(stream_, q, k, v, plain, {.causal = true}).ok());
  ASSERT_TRUE(ops::attention(stream_, q, k, v, biased, {.causal = true, .alibi_slopes = {0.5f, 0.25f}}).ok());
  EXPECT_FALSE(close(plain, biased, tolerance_for(DType::f32, 64)));
  // The one-shot's plans are keyed by the slopes' values: the same shapes
  // with the slopes swapped take a plan of their own.
  for (const std::vector<float>& slopes : {std::vector{0.5f, 0.25f}, std::vector{0.25f, 0.5f}}) {
    const AttentionAttrs attrs{.causal = true, .alibi_slopes = slopes};
    ASSERT_TRUE(ops::attention(stream_, q, k, v, biased, attrs).ok());
    EXPECT_TRUE(close(biased, reference_bshd(q, k, v, nullptr, attrs).first, tolerance_for(DType::f32, 64))) << slopes[0];
  }
}

TEST_P(AttentionTest, FullyMaskedRowsGiveZerosAndMinusInfinity) {
  const std::int64_t nb = 2, sq = 6, skv = 9, hq = 4, hkv = 2, d = 64;
  const Tensor q = random_tensor(DType::f32, {nb, sq, hq, d}, 400, -2.0f, 2.0f);
  const Tensor k = random_tensor(DType::f32, {nb, skv, hkv, d}, 401, -2.0f, 2.0f);
  const Tensor v = random_tensor(DType::f32, {nb, skv, hkv, d}, 402);
  auto expect_empty_row = [&](const Tensor& o, const Tensor& lse, std::int64_t b, std::int64_t h, std::int64_t i) {
    for (std::int64_t e = 0; e < d; ++e) EXPECT_EQ(o.data_as<float>()[((b * o.dim(1) + i) * hq + h) * d + e], 0.0f);
    EXPECT_EQ(lse.data_as<float>()[(b * hq + h) * lse.dim(2) + i], -kInf) << b << "," << h << "," << i;
  };
  {
    // Full mask: one query row of (b 0, head 1) and one of (b 1, head 3) all -inf.
    Tensor mask = random_tensor(DType::f32, {nb, hq, sq, skv}, 403, -1.0f, 0.0f);
    for (std::int64_t j = 0; j < skv; ++j) {
      mask.data_as<float>()[((0 * hq + 1) * sq + 2) * skv + j] = -kInf;
      mask.data_as<float>()[((1 * hq + 3) * sq + 5) * skv + j] = -kInf;
    }
    for (bool causal : {false, true}) {
      SCOPED_TRACE(fmt::format("full mask causal={}", causal));
      const Tensor o = nan_tensor(DType::f32, {nb, sq, hq, d}), lse = nan_tensor(DType::f32, {nb, hq, sq});
      run_and_compare(q, k, v, &mask, o, &lse, {.causal = causal});
      expect_empty_row(o, lse, 0, 1, 2);
      expect_empty_row(o, lse, 1, 3, 5);
    }
  }
  {
    // Key padding that masks every key of batch element 1.
    Tensor mask = zeros(DType::f32, {nb, 1, 1, skv});
    for (std::int64_t j = 0; j < skv; ++j) mask.data_as<float>()[skv + j] = -kInf;
    SCOPED_TRACE("batch element fully padded");
    const Tensor o = nan_tensor(DType::f32, {nb, sq, hq, d}), lse = nan_tensor(DType::f32, {nb, hq, sq});
    run_and_compare(q, k, v, &mask, o, &lse, {});
    for (std::int64_t h = 0; h < hq; ++h)
      for (std::int64_t i = 0; i < sq; ++i) expect_empty_row(o, lse, 1, h, i);
  }
  {
    // Causal with more queries than keys: query i sees keys j <= i + Skv - Sq,
    // so the first Sq - Skv queries see none.
    const std::int64_t few = 3;
    const Tensor kf = value_or_die(k.slice(1, 0, few)), vf = value_or_die(v.slice(1, 0, few));
    for (DType out : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(fmt::format("causal Sq={} > Skv={} o {}", sq, few, to_string(out)));
      const Tensor o = nan_tensor(out, {nb, sq, hq, d}), lse = nan_tensor(DType::f32, {nb, hq, sq});
      run_and_compare(q, kf, vf, nullptr, o, &lse, {.causal = true});
      if (out == DType::f32)
        for (std::int64_t b = 0; b < nb; ++b)
          for (std::int64_t h = 0; h < hq; ++h)
            for (std::int64_t i = 0; i < sq - few; ++i) expect_empty_row(o, lse, b, h, i);
    }
  }
}

TEST_P(AttentionTest, PermutedAndStridedViews) {
  // [B, H, S, D] storage passed as permuted views (q, k, v and o), K/V with
  // gaps between rows, and a bf16 o from f32 inputs.
  std::uint64_t seed = 500;
  for (DType dt : {DType::f32, DType::bf16})
    for (bool causal : {false, true}) {
      check({.b = 2, .sq = 33, .skv = 33, .hq = 8, .hkv = 2, .d = 64, .in = dt, .out = dt, .causal = causal, .bhsd = true,
             .seed = seed++});
      check({.b = 1, .sq = 5, .skv = 70, .hq = 4, .hkv = 4, .d = 128, .in = dt, .out = DType::f32, .causal = causal,
             .bhsd = true, .padded_kv = true, .seed = seed++});
      check({.b = 2, .sq = 20, .skv = 29, .hq = 4, .hkv = 1, .d = 96, .in = dt, .out = dt, .causal = causal,
             .mask = MaskKind::padding, .padded_kv = true, .seed = seed++});
    }
  check({.b = 2, .sq = 21, .skv = 21, .hq = 4, .hkv = 2, .d = 64, .out = DType::bf16, .causal = true, .seed = seed++});
  check({.b = 1, .sq = 1, .skv = 300, .hq = 8, .hkv = 2, .d = 128, .out = DType::bf16, .bhsd = true, .seed = seed++});
}

TEST_P(AttentionTest, Sinks) {
  // gpt-oss's sinks: causal prefill, cross-attention, sliding windows (rows
  // that see no key: zeros, lse = the sink), ALiBi, a full mask with -inf
  // entries, decode with the keys split across cores (the merge adds the
  // sink) and without the lse output; GQA 4 and 1, f32 and bf16.
  std::uint64_t seed = 480;
  for (DType dt : {DType::f32, DType::bf16}) {
    check({.b = 2, .sq = 130, .skv = 130, .hq = 8, .hkv = 2, .d = 64, .in = dt, .out = dt, .causal = true, .seed = seed++, .sinks = true});
    check({.b = 2, .sq = 33, .skv = 77, .hq = 4, .hkv = 4, .d = 64, .in = dt, .out = dt, .seed = seed++, .sinks = true});
    check({.b = 2, .sq = 40, .skv = 25, .hq = 4, .hkv = 2, .d = 64, .in = dt, .out = dt, .causal = true, .window = 7, .seed = seed++,
           .sinks = true});
    check({.b = 1, .sq = 37, .skv = 200, .hq = 4, .hkv = 1, .d = 128, .in = dt, .out = dt, .causal = true, .seed = seed++, .alibi = true,
           .sinks = true});
    check({.b = 2, .sq = 19, .skv = 45, .hq = 4, .hkv = 2, .d = 64, .in = dt, .out = dt, .mask = MaskKind::full, .seed = seed++,
           .sinks = true});
    for (std::int64_t sq : {1, 4}) {
      check({.b = 1, .sq = sq, .skv = 2048, .hq = 8, .hkv = 2, .d = 128, .in = dt, .out = dt, .causal = true, .lse = sq == 4, .seed = seed++,
             .sinks = true});
      check({.b = 1, .sq = sq, .skv = 2048, .hq = 8, .hkv = 2, .d = 128, .in = dt, .out = dt, .causal = true, .window = 100, .lse = false,
             .seed = seed++, .sinks = true});
    }
  }
  // By hand: one key whose logit is 0 (q zero) and a value of ones; a sink
  // of 0 takes half of the row, a sink of ln 3 three quarters.
  const Tensor q = zeros(DType::f32, {1, 1, 2, 64}), k = random_tensor(DType::f32, {1, 1, 1, 64}, 490);
  Tensor v = zeros(DType::f32, {1, 1, 1, 64});
  std::fill_n(v.data_as<float>(), 64, 1.0f);
  const Tensor o = nan_tensor(DType::f32, {1, 1, 2, 64}), lse = nan_tensor(DType::f32, {1, 2, 1});
  AttentionOptions options;
  options.lse = lse.desc();
  const ops::PlanPtr plan = value_or_die(ops::Attention::plan(ctx_, q.desc(), k.desc(), v.desc(), o.desc(), {.sinks = {0.0f, std::log(3.0f)}}, options));
  ASSERT_TRUE(run_plan(ctx_, stream_, *plan, {q, k, v}, {o, lse}).ok());
  for (std::int64_t e = 0; e < 64; ++e) {
    EXPECT_NEAR(o.data_as<float>()[e], 0.5f, 1e-6f);
    EXPECT_NEAR(o.data_as<float>()[64 + e], 0.25f, 1e-6f);
  }
  EXPECT_NEAR(lse.data_as<float>()[0], std::log(2.0f), 1e-6f);
  EXPECT_NEAR(lse.data_as<float>()[1], std::log(4.0f), 1e-6f);
  // The one-shot's plans are keyed by the sinks' values.
  for (const std::vector<float>& sinks : {std::vector{0.0f, 1.0f}, std::vector{1.0f, 0.0f}}) {
    const AttentionAttrs attrs{.causal = true, .sinks = sinks};
    ASSERT_TRUE(ops::attention(stream_, q, k, v, o, attrs).ok());
    EXPECT_TRUE(close(o, reference_bshd(q, k, v, nullptr, attrs).first, tolerance_for(DType::f32, 64))) << sinks[0];
  }
}

TEST_P(AttentionTest, Softcap) {
  // Gemma 2's logit soft-capping, at caps of 1.5 and 4 against logits of up
  // to ~8 (q and k in [-2, 2]), so that tanh bends them: causal prefill (the
  // kernels' key blocks, ragged ends), cross-attention, a window, an
  // additive mask with -inf entries (added after the cap), ALiBi and sinks,
  // decode with the keys split across cores, a custom scale, GQA 4 and 1,
  // f32 and bf16, with and without lse.
  std::uint64_t seed = 500;
  for (DType dt : {DType::f32, DType::bf16})
    for (float cap : {1.5f, 4.0f}) {
      check({.b = 2, .sq = 150, .skv = 150, .hq = 8, .hkv = 2, .d = 64, .in = dt, .out = dt, .causal = true, .seed = seed++, .softcap = cap});
      check({.b = 2, .sq = 33, .skv = 77, .hq = 4, .hkv = 4, .d = 40, .in = dt, .out = dt, .seed = seed++, .softcap = cap});
      check({.b = 1, .sq = 100, .skv = 100, .hq = 4, .hkv = 1, .d = 128, .in = dt, .out = dt, .causal = true, .window = 30, .scale = 0.3f,
             .seed = seed++, .softcap = cap});
      check({.b = 2, .sq = 19, .skv = 45, .hq = 4, .hkv = 2, .d = 64, .in = dt, .out = dt, .mask = MaskKind::full, .seed = seed++,
             .softcap = cap});
      check({.b = 1, .sq = 37, .skv = 200, .hq = 4, .hkv = 1, .d = 128, .in = dt, .out = dt, .causal = true, .seed = seed++, .alibi = true,
             .sinks = true, .softcap = cap});
      for (std::int64_t sq : {1, 4})
        check({.b = 1, .sq = sq, .skv = 2048, .hq = 8, .hkv = 2, .d = 128, .in = dt, .out = dt, .causal = true, .lse = sq == 1,
               .seed = seed++, .softcap = cap});
    }
  // The cap changes the result; the one-shot's plans are keyed by it.
  const Tensor q = bshd(DType::f32, 1, 16, 2, 64, false, 520, -2.0f, 2.0f), k = bshd(DType::f32, 1, 16, 2, 64, false, 521, -2.0f, 2.0f);
  const Tensor v = bshd(DType::f32, 1, 16, 2, 64, false, 522), o = zeros(DType::f32, {1, 16, 2, 64});
  const Tensor plain = reference_bshd(q, k, v, nullptr, {.causal = true}).first;
  for (float cap : {1.0f, 3.0f}) {
    const AttentionAttrs attrs{.causal = true, .softcap = cap};
    ASSERT_TRUE(ops::attention(stream_, q, k, v, o, attrs).ok());
    EXPECT_TRUE(close(o, reference_bshd(q, k, v, nullptr, attrs).first, tolerance_for(DType::f32, 64))) << cap;
    EXPECT_FALSE(close(o, plain, tolerance_for(DType::f32, 64))) << cap;
  }
}

TEST_P(AttentionTest, CustomScaleAndOptionalLse) {
  std::uint64_t seed = 600;
  for (float scale : {0.3f, 0.02f, 1.0f})
    for (DType dt : {DType::f32, DType::bf16})
      check({.b = 2, .sq = 13, .skv = 40, .hq = 4, .hkv = 2, .d = 64, .in = dt, .out = dt, .causal = true, .scale = scale,
             .seed = seed++});
  // Without the lse output, prefill and decode.
  check({.b = 2, .sq = 37, .skv = 37, .hq = 8, .hkv = 2, .d = 128, .causal = true, .lse = false, .seed = seed++});
  check({.b = 1, .sq = 1, .skv = 777, .hq = 8, .hkv = 8, .d = 64, .scale = 0.5f, .lse = false, .seed = seed++});
}

TEST_P(AttentionTest, VariableLengths) {
  // (q length, kv length) per sequence, back to back: a zero-length
  // sequence, Sq < Skv (bottom-right aligned when causal), and queries with
  // no keys at all (zeros, lse -inf).
  const std::vector<std::pair<std::int32_t, std::int32_t>> seqs = {{5, 5}, {0, 0}, {3, 40}, {17, 17}, {2, 0}, {1, 9}, {33, 70}};
  const std::int64_t hq = 8, hkv = 2, d = 64, n = std::int64_t(seqs.size());
  std::vector<std::int32_t> cu_q = {0}, cu_kv = {0};
  for (auto [lq, lkv] : seqs) cu_q.push_back(cu_q.back() + lq), cu_kv.push_back(cu_kv.back() + lkv);
  const std::int64_t total_q = cu_q.back(), total_kv = cu_kv.back();
  const Tensor cu_q_t = i32_tensor(cu_q), cu_kv_t = i32_tensor(cu_kv);
  std::uint64_t seed = 700;
  for (DType dt : {DType::f32, DType::bf16})
    for (const AttentionAttrs& attrs : {AttentionAttrs{}, AttentionAttrs{.causal = true}, AttentionAttrs{.causal = true, .window = 7},
                                        AttentionAttrs{.causal = true, .alibi_slopes = alibi_slopes(hq)},
                                        AttentionAttrs{.alibi_slopes = alibi_slopes(hq)},
                                        AttentionAttrs{.causal = true, .sinks = sink_logits(hq), .softcap = 2.0f}}) {
      const bool causal = attrs.causal;
      SCOPED_TRACE(fmt::format("{} causal={} window={} alibi={} sinks={} softcap={}", to_string(dt), causal, attrs.window,
                               !attrs.alibi_slopes.empty(), !attrs.sinks.empty(), attrs.softcap));
      const Tensor q = random_tensor(dt, {total_q, hq, d}, seed++, -2.0f, 2.0f);
      const Tensor k = random_tensor(dt, {total_kv, hkv, d}, seed++, -2.0f, 2.0f);
      const Tensor v = random_tensor(dt, {total_kv, hkv, d}, seed++);
      const Tensor o = nan_tensor(dt, {total_q, hq, d}), lse = nan_tensor(DType::f32, {hq, total_q});
      AttentionOptions options;
      options.varlen_batch = n;
      options.lse = lse.desc();
      Result<ops::PlanPtr> plan = ops::Attention::plan(ctx_, q.desc(), k.desc(), v.desc(), o.desc(), attrs, options);
      ASSERT_TRUE(plan.ok()) << plan.status().to_string();
      SCOPED_TRACE(fmt::format("kernel {}", (*plan)->kernel()));
      const Status s = run_plan(ctx_, stream_, **plan, {q, k, v, cu_q_t, cu_kv_t}, {o, lse});
      ASSERT_TRUE(s.ok()) << s.to_string();

      Tensor o_ref = zeros(DType::f32, {total_q, hq, d}), lse_ref = zeros(DType::f32, {hq, total_q});
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t q0 = cu_q[i], lq = cu_q[i + 1] - q0, k0 = cu_kv[i], lkv = cu_kv[i + 1] - k0;
        const Sink os{o_ref.data_as<float>(), q0 * hq * d, {0, hq * d, d, 1}};
        const Sink ls{lse_ref.data_as<float>(), q0, {0, total_q, 1, 0}};  // (0, h, i) -> h * total_q + q0 + i
        reference(rows(q, q0, lq), rows(k, k0, lkv), rows(v, k0, lkv), nullptr, attrs, os, &ls);
      }
      const Tolerance tol = attention_tolerance(dt, dt, d);
      EXPECT_TRUE(close(o, o_ref, tol)) << "o";
      EXPECT_TRUE(close(lse, lse_ref, tol)) << "lse";
      // The queries of the sequence with no keys: zeros and -inf (the sink).
      const std::int64_t empty_q0 = cu_q[4];
      for (std::int64_t h = 0; h < hq; ++h)
        EXPECT_EQ(lse.data_as<float>()[h * total_q + empty_q0], attrs.sinks.empty() ? -kInf : attrs.sinks[std::size_t(h)]);
    }
}

TEST_P(AttentionTest, OneShotFunctions) {
  std::uint64_t seed = 800;
  // Without a mask: prefill (causal, GQA) and a decode shape (split-KV,
  // workspace from the pool); each shape twice with new values, the second
  // time through the context's plan cache.
  for (auto [sq, skv] : {std::pair<std::int64_t, std::int64_t>{33, 33}, {1, 1000}, {4, 50}})
    for (int repeat = 0; repeat < 2; ++repeat)
      for (DType dt : {DType::f32, DType::bf16}) {
        SCOPED_TRACE(fmt::format("{} Sq={} Skv={} repeat {}", to_string(dt), sq, skv, repeat));
        const Tensor q = random_tensor(dt, {2, sq, 8, 64}, seed++, -2.0f, 2.0f);
        const Tensor k = random_tensor(dt, {2, skv, 2, 64}, seed++, -2.0f, 2.0f);
        const Tensor v = random_tensor(dt, {2, skv, 2, 64}, seed++);
        const Tensor o = nan_tensor(dt, {2, sq, 8, 64});
        const AttentionAttrs attrs{.causal = true};
        const Status s = ops::attention(stream_, q, k, v, o, attrs);
        ASSERT_TRUE(s.ok()) << s.to_string();
        EXPECT_TRUE(close(o, reference_bshd(q, k, v, nullptr, attrs).first, attention_tolerance(dt, dt, 64)));
      }
  // With a mask, on [B, H, S, D] views, custom scale.
  for (MaskKind kind : {MaskKind::full, MaskKind::padding}) {
    SCOPED_TRACE(fmt::format("mask {}", int(kind)));
    const Tensor q = bshd(DType::f32, 2, 11, 4, 80, true, seed++, -2.0f, 2.0f);
    const Tensor k = bshd(DType::f32, 2, 23, 2, 80, true, seed++, -2.0f, 2.0f);
    const Tensor v = bshd(DType::f32, 2, 23, 2, 80, true, seed++);
    const Tensor mask = kind == MaskKind::full ? full_mask(2, 4, 11, 23, seed++) : padding_mask(2, 23);
    const Tensor o = nan_bshd(DType::f32, 2, 11, 4, 80, true);
    const AttentionAttrs attrs{.scale = 0.2f, .causal = kind == MaskKind::padding};
    const Status s = ops::attention(stream_, q, k, v, mask, o, attrs);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_TRUE(close(o, reference_bshd(q, k, v, &mask, attrs).first, attention_tolerance(DType::f32, DType::f32, 80)));
  }
}

TEST_P(AttentionTest, LargePrefill) {
  // One larger case: a 300-token causal prefill (many key blocks, a ragged
  // last one), 8 query heads on 2 kv heads, D = 128, f32 and bf16.
  check({.b = 1, .sq = 300, .skv = 300, .hq = 8, .hkv = 2, .d = 128, .causal = true, .seed = 900});
  check({.b = 1, .sq = 300, .skv = 300, .hq = 8, .hkv = 2, .d = 128, .in = DType::bf16, .out = DType::bf16, .causal = true,
         .seed = 901});
}

TEST_P(AttentionTest, PlanWithWorkspaceRunsWithoutOne) {
  // A split-KV plan that asks for a workspace, run without one, takes one
  // from the context's pool: the same result as with the caller's.
  const Tensor q = random_tensor(DType::f32, {1, 1, 8, 128}, 950), k = random_tensor(DType::f32, {1, 4096, 2, 128}, 951);
  const Tensor o = zeros(DType::f32, {1, 1, 8, 128}), given = zeros(DType::f32, {1, 1, 8, 128});
  const ops::PlanPtr plan = value_or_die(ops::Attention::plan(ctx_, q.desc(), k.desc(), k.desc(), o.desc()));
  if (plan->workspace_bytes() == 0) GTEST_SKIP() << plan->kernel() << " needs no workspace";
  ASSERT_TRUE(plan->run(stream_, {q, k, k}, {o}).ok());
  std::vector<std::byte> workspace(std::size_t(plan->workspace_bytes()));
  ASSERT_TRUE(plan->run(stream_, {q, k, k}, {given}, workspace.data()).ok());
  EXPECT_TRUE(close(o, given, {.atol = 0, .rtol = 0, .min_cosine = 1}));
}

INSTANTIATE_TEST_SUITE_P(Isa, AttentionTest, ::testing::ValuesIn(isa_levels()), isa_name);

// ------------------------------------------------------------------ KvCache

// Token t, head h, feature e of a sequence with block table `table` as stored
// in the K (or V) pool, at the documented offsets; int8 dequantized with its scale.
float stored(const KvCache& cache, bool value_pool, const std::vector<std::int32_t>& table, std::int64_t t, std::int64_t h,
             std::int64_t e) {
  const KvCacheConfig& c = cache.config();
  const std::int64_t row = (h * c.num_blocks + table[t / c.block_size]) * c.block_size + t % c.block_size;
  const void* pool = value_pool ? cache.v_pool() : cache.k_pool();
  if (c.dtype == DType::i8) {
    const float* scales = value_pool ? cache.v_scales() : cache.k_scales();
    return float(static_cast<const std::int8_t*>(pool)[row * c.head_dim + e]) * scales[row];
  }
  return detail::load(pool, c.dtype, row * c.head_dim + e);
}

float element3(const Tensor& t, std::int64_t i, std::int64_t j, std::int64_t e) {
  return detail::load(t.data(), t.dtype(), i * t.strides()[0] + j * t.strides()[1] + e * t.strides()[2]);
}

std::vector<std::int32_t> table_of(const KvCache& cache, std::int32_t seq) {
  const std::span<const std::int32_t> t = value_or_die(cache.block_table(seq));
  return {t.begin(), t.end()};
}

// Checks that the pool holds `src` (k or v, [L, Hkv, D]) for the sequence:
// f32 exactly, bf16 rounded to nearest even, int8 within half a step of a
// per-token-and-head scale max|x| / 127.
void expect_stored(const KvCache& cache, std::int32_t seq, bool value_pool, const Tensor& src) {
  const KvCacheConfig& c = cache.config();
  const std::vector<std::int32_t> table = table_of(cache, seq);
  ASSERT_EQ(value_or_die(cache.length(seq)), src.dim(0));
  std::int64_t mismatches = 0;
  std::string first;
  for (std::int64_t t = 0; t < src.dim(0); ++t)
    for (std::int64_t h = 0; h < c.kv_heads; ++h) {
      float max_abs = 0;
      for (std::int64_t e = 0; e < c.head_dim; ++e) max_abs = std::max(max_abs, std::fabs(element3(src, t, h, e)));
      for (std::int64_t e = 0; e < c.head_dim; ++e) {
        const float x = element3(src, t, h, e), got = stored(cache, value_pool, table, t, h, e);
        bool ok;
        if (c.dtype == DType::f32) {
          ok = got == x;
        } else if (c.dtype == DType::bf16) {
          ok = got == bf16_to_f32(f32_to_bf16(x));
        } else {
          const float step = max_abs / 127.0f;
          ok = std::fabs(got - x) <= 0.5f * step * 1.0001f + 1e-7f;
        }
        if (!ok && mismatches++ == 0) first = fmt::format("token {} head {} feature {}: stored {} for {}", t, h, e, got, x);
      }
      if (c.dtype == DType::i8) {
        const float* scales = value_pool ? cache.v_scales() : cache.k_scales();
        const std::int64_t row = (h * c.num_blocks + table[t / c.block_size]) * c.block_size + t % c.block_size;
        if (std::fabs(scales[row] - max_abs / 127.0f) > 1e-6f * max_abs && mismatches++ == 0)
          first = fmt::format("token {} head {}: scale {} for max|x| {}", t, h, scales[row], max_abs);
      }
    }
  EXPECT_EQ(mismatches, 0) << (value_pool ? "v: " : "k: ") << first;
}

TEST(KvCacheTest, AppendGrowsLengthAndBlockTable) {
  for (DType dt : {DType::f32, DType::bf16, DType::i8})
    for (std::int64_t bs : {16, 32}) {
      SCOPED_TRACE(fmt::format("{} block_size {}", to_string(dt), bs));
      const std::int64_t blocks = 10;
      auto cache = value_or_die(
          KvCache::create({.num_blocks = blocks, .block_size = bs, .kv_heads = 2, .head_dim = 64, .dtype = dt}));
      EXPECT_EQ(cache->config().block_size, bs);
      EXPECT_EQ(cache->config().dtype, dt);
      EXPECT_EQ(cache->free_blocks(), blocks);
      const std::int32_t a = cache->add_sequence(), other = cache->add_sequence();
      EXPECT_NE(a, other);
      EXPECT_EQ(value_or_die(cache->length(a)), 0);
      EXPECT_TRUE(table_of(*cache, a).empty());
      const Tensor k = random_tensor(DType::f32, {80, 2, 64}, 1), v = random_tensor(DType::f32, {80, 2, 64}, 2);
      std::int64_t len = 0;
      // 5, 6, 7, 16, 17, 33, 34, 64, 80: on and across block boundaries.
      for (std::int64_t t : {5, 1, 1, 9, 1, 16, 1, 30, 16}) {
        const Status s = cache->append(a, rows_of(k, len, len + t), rows_of(v, len, len + t));
        ASSERT_TRUE(s.ok()) << s.to_string();
        len += t;
        EXPECT_EQ(value_or_die(cache->length(a)), len);
        const std::vector<std::int32_t> table = table_of(*cache, a);
        EXPECT_EQ(std::int64_t(table.size()), (len + bs - 1) / bs) << "len " << len;
        EXPECT_EQ(std::set<std::int32_t>(table.begin(), table.end()).size(), table.size()) << "blocks repeat";
        for (std::int32_t b : table) EXPECT_TRUE(b >= 0 && b < blocks) << b;
        EXPECT_EQ(cache->free_blocks(), blocks - std::int64_t(table.size()));
      }
      EXPECT_EQ(value_or_die(cache->length(other)), 0);
      expect_stored(*cache, a, false, k);
      expect_stored(*cache, a, true, v);
    }
}

TEST(KvCacheTest, StoresTokensInTheDocumentedLayout) {
  // Two sequences appended alternately (their blocks interleave in the pool),
  // K/V given as [H, T, D] tensors viewed as [T, H, D] (any strides), f32 and bf16 sources.
  for (DType dt : {DType::f32, DType::bf16, DType::i8})
    for (DType src : {DType::f32, DType::bf16})
      for (std::int64_t bs : {16, 32}) {
        SCOPED_TRACE(fmt::format("cache {} source {} block_size {}", to_string(dt), to_string(src), bs));
        auto cache = value_or_die(
            KvCache::create({.num_blocks = 12, .block_size = bs, .kv_heads = 3, .head_dim = 40, .dtype = dt}));
        const std::int64_t len[2] = {45, 21};
        std::int32_t id[2];
        Tensor k[2], v[2];
        for (int s = 0; s < 2; ++s) {
          id[s] = cache->add_sequence();
          k[s] = value_or_die(random_tensor(src, {3, len[s], 40}, 10 + s, -1.5f, 1.5f).permute({1, 0, 2}));
          v[s] = value_or_die(random_tensor(src, {3, len[s], 40}, 20 + s, -0.5f, 0.5f).permute({1, 0, 2}));
        }
        std::int64_t done[2] = {0, 0};
        while (done[0] < len[0] || done[1] < len[1])
          for (int s = 0; s < 2; ++s) {
            const std::int64_t t = std::min<std::int64_t>(len[s] - done[s], s == 0 ? 7 : 5);
            if (t == 0) continue;
            const Status st = cache->append(id[s], rows_of(k[s], done[s], done[s] + t), rows_of(v[s], done[s], done[s] + t));
            ASSERT_TRUE(st.ok()) << st.to_string();
            done[s] += t;
          }
        for (int s = 0; s < 2; ++s) {
          expect_stored(*cache, id[s], false, k[s]);
          expect_stored(*cache, id[s], true, v[s]);
        }
      }
}

TEST(KvCacheTest, ReleaseReturnsBlocksForReuse) {
  auto cache = value_or_die(KvCache::create({.num_blocks = 8, .block_size = 16, .kv_heads = 2, .head_dim = 32}));
  const Tensor ka = random_tensor(DType::f32, {40, 2, 32}, 1), kb = random_tensor(DType::f32, {20, 2, 32}, 2);
  const Tensor kc = random_tensor(DType::f32, {48, 2, 32}, 3);
  const std::int32_t a = cache->add_sequence(), b = cache->add_sequence();
  ASSERT_TRUE(cache->append(a, ka, ka).ok());
  ASSERT_TRUE(cache->append(b, kb, kb).ok());
  EXPECT_EQ(cache->free_blocks(), 8 - 3 - 2);
  const std::vector<std::int32_t> a_blocks = table_of(*cache, a);

  ASSERT_TRUE(cache->release(a).ok());
  EXPECT_EQ(cache->free_blocks(), 6);
  EXPECT_TRUE(fails_naming(cache->length(a), "seq"));
  EXPECT_TRUE(fails_naming(cache->block_table(a), "seq"));

  // A new sequence gets a new id and, the free list being a stack, A's blocks.
  const std::int32_t c = cache->add_sequence();
  EXPECT_NE(c, a);
  ASSERT_TRUE(cache->append(c, kc, kc).ok());
  EXPECT_EQ(cache->free_blocks(), 3);
  const std::vector<std::int32_t> c_blocks = table_of(*cache, c);
  EXPECT_EQ(std::set<std::int32_t>(c_blocks.begin(), c_blocks.end()), std::set<std::int32_t>(a_blocks.begin(), a_blocks.end()));
  // B is untouched, C reads back what it was given.
  expect_stored(*cache, b, false, kb);
  expect_stored(*cache, c, true, kc);
  // Releasing everything frees every block.
  ASSERT_TRUE(cache->release(b).ok());
  ASSERT_TRUE(cache->release(c).ok());
  EXPECT_EQ(cache->free_blocks(), 8);
}

TEST(KvCacheTest, AppendOutOfBlocksChangesNothing) {
  auto cache = value_or_die(KvCache::create({.num_blocks = 4, .block_size = 16, .kv_heads = 1, .head_dim = 8}));
  const Tensor k = random_tensor(DType::f32, {70, 1, 8}, 1);
  const std::int32_t a = cache->add_sequence(), b = cache->add_sequence();
  ASSERT_TRUE(cache->append(a, rows_of(k, 0, 50), rows_of(k, 0, 50)).ok());
  EXPECT_EQ(cache->free_blocks(), 0);
  const std::vector<std::int32_t> before = table_of(*cache, a);
  // 50 + 15 tokens need a fifth block: refused, nothing appended.
  const Status s = cache->append(a, rows_of(k, 50, 65), rows_of(k, 50, 65));
  EXPECT_TRUE(fails_mentioning(s, "block"));
  EXPECT_EQ(value_or_die(cache->length(a)), 50);
  EXPECT_EQ(table_of(*cache, a), before);
  EXPECT_EQ(cache->free_blocks(), 0);
  EXPECT_TRUE(fails_mentioning(cache->append(b, rows_of(k, 0, 1), rows_of(k, 0, 1)), "block"));
  EXPECT_EQ(value_or_die(cache->length(b)), 0);
  // Exactly filling the last block still fits.
  ASSERT_TRUE(cache->append(a, rows_of(k, 50, 64), rows_of(k, 50, 64)).ok());
  EXPECT_EQ(value_or_die(cache->length(a)), 64);
  EXPECT_TRUE(fails_mentioning(cache->append(a, rows_of(k, 64, 65), rows_of(k, 64, 65)), "block"));
  expect_stored(*cache, a, false, rows_of(k, 0, 64));
  // After a release the other sequence can grow.
  ASSERT_TRUE(cache->release(a).ok());
  EXPECT_EQ(cache->free_blocks(), 4);
  ASSERT_TRUE(cache->append(b, rows_of(k, 0, 1), rows_of(k, 0, 1)).ok());
  EXPECT_EQ(value_or_die(cache->length(b)), 1);
}

TEST(KvCacheTest, UnknownAndReleasedIdsAreErrors) {
  auto cache = value_or_die(KvCache::create({.num_blocks = 4, .block_size = 16, .kv_heads = 1, .head_dim = 8}));
  const Tensor k = random_tensor(DType::f32, {3, 1, 8}, 1);
  for (std::int32_t bad : {0, 7, -1}) {
    SCOPED_TRACE(bad);
    EXPECT_TRUE(fails_naming(cache->length(bad), "seq"));
    EXPECT_TRUE(fails_naming(cache->block_table(bad), "seq"));
    EXPECT_TRUE(fails_naming(cache->append(bad, k, k), "seq"));
    EXPECT_TRUE(fails_naming(cache->release(bad), "seq"));
  }
  const std::int32_t a = cache->add_sequence();
  ASSERT_TRUE(cache->append(a, k, k).ok());
  ASSERT_TRUE(cache->release(a).ok());
  EXPECT_TRUE(fails_naming(cache->length(a), "seq"));
  EXPECT_TRUE(fails_naming(cache->block_table(a), "seq"));
  EXPECT_TRUE(fails_naming(cache->append(a, k, k), "seq"));
  EXPECT_TRUE(fails_naming(cache->release(a), "seq"));
  EXPECT_EQ(cache->free_blocks(), 4);
}

TEST(KvCacheTest, TruncateReturnsTrailingBlocks) {
  // Speculative decoding's rollback: draft tokens appended, the rejected ones dropped.
  auto cache = value_or_die(KvCache::create({.num_blocks = 6, .block_size = 16, .kv_heads = 2, .head_dim = 32}));
  const Tensor k = random_tensor(DType::f32, {40, 2, 32}, 1), v = random_tensor(DType::f32, {40, 2, 32}, 2);
  const Tensor k2 = random_tensor(DType::f32, {10, 2, 32}, 3), v2 = random_tensor(DType::f32, {10, 2, 32}, 4);
  const std::int32_t a = cache->add_sequence();
  ASSERT_TRUE(cache->append(a, k, v).ok());
  const std::vector<std::int32_t> before = table_of(*cache, a);
  ASSERT_TRUE(cache->truncate(a, 40).ok());  // its own length: nothing changes
  EXPECT_EQ(table_of(*cache, a), before);
  ASSERT_TRUE(cache->truncate(a, 17).ok());  // 17 tokens keep 2 blocks of 16
  EXPECT_EQ(value_or_die(cache->length(a)), 17);
  EXPECT_EQ(table_of(*cache, a), std::vector<std::int32_t>(before.begin(), before.begin() + 2));
  EXPECT_EQ(cache->free_blocks(), 6 - 2);
  // Appending goes on from token 17, in the second block's free slots and a reused block.
  ASSERT_TRUE(cache->append(a, k2, v2).ok());
  EXPECT_EQ(table_of(*cache, a), std::vector<std::int32_t>(before.begin(), before.begin() + 2));  // 27 tokens: still 2 blocks
  const auto joined = [](const Tensor& x, const Tensor& y) {
    Tensor t = zeros(DType::f32, {17 + y.dim(0), 2, 32});
    std::memcpy(t.data(), x.data(), 17 * 2 * 32 * sizeof(float));
    std::memcpy(t.data_as<float>() + 17 * 2 * 32, y.data(), std::size_t(y.numel()) * sizeof(float));
    return t;
  };
  expect_stored(*cache, a, false, joined(k, k2));
  expect_stored(*cache, a, true, joined(v, v2));
  ASSERT_TRUE(cache->truncate(a, 0).ok());
  EXPECT_EQ(cache->free_blocks(), 6);
  EXPECT_TRUE(table_of(*cache, a).empty());
  EXPECT_TRUE(fails_naming(cache->truncate(a, 1), "length"));
  EXPECT_TRUE(fails_naming(cache->truncate(a, -1), "length"));
  EXPECT_TRUE(fails_naming(cache->truncate(7, 0), "seq"));
}

TEST(KvCacheTest, BadConfigNamesTheField) {
  const KvCacheConfig good{.num_blocks = 4, .block_size = 16, .kv_heads = 2, .head_dim = 64};
  ASSERT_TRUE(KvCache::create(good).ok());
  auto with = [&](auto edit) {
    KvCacheConfig c = good;
    edit(c);
    return KvCache::create(c);
  };
  EXPECT_TRUE(fails_naming(with([](KvCacheConfig& c) { c.block_size = 8; }), "block_size"));
  EXPECT_TRUE(fails_naming(with([](KvCacheConfig& c) { c.block_size = 64; }), "block_size"));
  EXPECT_TRUE(fails_naming(with([](KvCacheConfig& c) { c.block_size = 0; }), "block_size"));
  EXPECT_TRUE(fails_naming(with([](KvCacheConfig& c) { c.kv_heads = 0; }), "kv_heads"));
  EXPECT_TRUE(fails_naming(with([](KvCacheConfig& c) { c.kv_heads = -2; }), "kv_heads"));
  EXPECT_TRUE(fails_naming(with([](KvCacheConfig& c) { c.head_dim = 0; }), "head_dim"));
  EXPECT_TRUE(fails_naming(with([](KvCacheConfig& c) { c.num_blocks = -1; }), "num_blocks"));
  EXPECT_TRUE(fails_naming(with([](KvCacheConfig& c) { c.dtype = DType::i4; }), "dtype"));
  EXPECT_TRUE(fails_naming(with([](KvCacheConfig& c) { c.dtype = DType::i32; }), "dtype"));
  // The pool's size overflowing is an error, not a wrap-around.
  EXPECT_FALSE(with([](KvCacheConfig& c) { c.num_blocks = std::int64_t(1) << 60; }).ok());
}

TEST(KvCacheTest, AppendChecksShapesAndTypes) {
  auto cache = value_or_die(KvCache::create({.num_blocks = 4, .block_size = 16, .kv_heads = 2, .head_dim = 16}));
  const std::int32_t a = cache->add_sequence();
  const Tensor k = random_tensor(DType::f32, {3, 2, 16}, 1);
  EXPECT_TRUE(fails_naming(cache->append(a, random_tensor(DType::f32, {3, 2, 15}, 2), k), "k"));
  EXPECT_TRUE(fails_naming(cache->append(a, random_tensor(DType::f32, {3, 3, 16}, 2), k), "k"));
  EXPECT_TRUE(fails_naming(cache->append(a, random_tensor(DType::f32, {6, 16}, 2), k), "k"));
  EXPECT_TRUE(fails_naming(cache->append(a, zeros(DType::i32, {3, 2, 16}), k), "k"));
  EXPECT_TRUE(fails_naming(cache->append(a, k, random_tensor(DType::f32, {4, 2, 16}, 2)), "v"));
  EXPECT_TRUE(fails_naming(cache->append(a, k, random_tensor(DType::f32, {3, 2, 8}, 2)), "v"));
  EXPECT_TRUE(fails_naming(cache->append(a, k, zeros(DType::i8, {3, 2, 16})), "v"));
  EXPECT_EQ(value_or_die(cache->length(a)), 0);
  EXPECT_EQ(cache->free_blocks(), 4);
}

// ----------------------------------------------------------- PagedAttention

struct Seq {
  std::int32_t id = 0;
  Tensor k, v;  // [L, Hkv, D]: what was appended
};

// New sequences of these lengths, appended in random chunk sizes (1 to 37
// tokens, so one append may cross several blocks), the sequences taking turns
// so that their blocks interleave in the pool. K/V values in [-1, 1).
std::vector<Seq> fill(KvCache& cache, DType src, const std::vector<std::int64_t>& lengths, std::uint64_t seed) {
  const KvCacheConfig& c = cache.config();
  std::vector<Seq> seqs;
  for (std::size_t i = 0; i < lengths.size(); ++i)
    seqs.push_back({cache.add_sequence(), random_tensor(src, {lengths[i], c.kv_heads, c.head_dim}, seed + 2 * i),
                    random_tensor(src, {lengths[i], c.kv_heads, c.head_dim}, seed + 2 * i + 1)});
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> chunk(1, 37);
  std::vector<std::int64_t> done(lengths.size(), 0);
  for (bool more = true; more;) {
    more = false;
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      if (done[i] == lengths[i]) continue;
      const std::int64_t t = std::min(lengths[i] - done[i], chunk(rng));
      const Status s =
          cache.append(seqs[i].id, rows_of(seqs[i].k, done[i], done[i] + t), rows_of(seqs[i].v, done[i], done[i] + t));
      EXPECT_TRUE(s.ok()) << s.to_string();
      if (!s.ok()) return seqs;
      done[i] += t;
      more = more || done[i] < lengths[i];
    }
  }
  return seqs;
}

std::int64_t blocks_for(const std::vector<std::int64_t>& lengths, std::int64_t block_size) {
  std::int64_t n = 0;
  for (std::int64_t l : lengths) n += (l + block_size - 1) / block_size;
  return n;
}

// The reference for row b of q attending to the sequence rows[b]: o f32 [B, Sq, Hq, D], lse f32 [B, Hq, Sq];
// with a mask broadcasting to [B, Hq, Sq, keys], its columns 0 .. L - 1 for a sequence of L tokens.
std::pair<Tensor, Tensor> paged_reference(const Tensor& q, const std::vector<const Seq*>& row_seqs, const AttentionAttrs& attrs,
                                          const Tensor* mask = nullptr) {
  const std::int64_t nb = q.dim(0), sq = q.dim(1), hq = q.dim(2), d = q.dim(3);
  Tensor o = zeros(DType::f32, {nb, sq, hq, d}), lse = zeros(DType::f32, {nb, hq, sq});
  std::int64_t longest = 0;
  for (const Seq* s : row_seqs) longest = std::max(longest, s->k.dim(0));
  Tensor full;
  if (mask) {
    const std::int64_t keys = mask->dim(mask->rank() - 1);
    full = value_or_die(mask->expand({nb, hq, sq, keys == 1 ? longest : keys}));
  }
  for (std::int64_t b = 0; b < nb; ++b) {
    const Seq& s = *row_seqs[b];
    const std::int64_t len = s.k.dim(0);
    const Sink lse_sink = sink(lse, b);
    View4 mv;
    if (mask) mv = view4(value_or_die(value_or_die(full.slice(0, b, b + 1)).slice(3, 0, len)));
    reference(batch(view4(q), b), rows(s.k, 0, len), rows(s.v, 0, len), mask ? &mv : nullptr, attrs, sink(o, b), &lse_sink);
  }
  return {o, lse};
}

class PagedAttentionTest : public IsaTest {
 protected:
  // Sequences of lengths {Sq, 17, 300} (Sq: the shortest a sequence can be
  // that holds its Sq new tokens) in a cache of `cache_dt`; q rows name them
  // out of order. Compares o and lse with the reference on the K/V that were
  // appended; for an f32 cache also with the contiguous Attention op.
  void check(DType cache_dt, std::int64_t block_size, std::int64_t sq, DType q_dt, bool causal, std::uint64_t seed,
             std::int64_t hq = 8, ops::FpMath fpmath = ops::FpMath::strict) {
    SCOPED_TRACE(fmt::format("cache {} block_size {} Sq={} q {} causal={} Hq={} fpmath {}", to_string(cache_dt), block_size, sq,
                             to_string(q_dt), causal, hq, fpmath == ops::FpMath::bf16 ? "bf16" : "strict"));
    const std::int64_t hkv = 2, d = 64;
    const std::vector<std::int64_t> lengths = {sq, 17, 300};
    auto cache = value_or_die(KvCache::create({.num_blocks = blocks_for(lengths, block_size) + 2, .block_size = block_size,
                                               .kv_heads = hkv, .head_dim = d, .dtype = cache_dt}));
    // bf16 cache: append bf16 K/V, so that the cache holds exactly the reference's values.
    const std::vector<Seq> seqs = fill(*cache, cache_dt == DType::bf16 ? DType::bf16 : DType::f32, lengths, seed);
    const std::vector<const Seq*> row_seqs = {&seqs[2], &seqs[0], &seqs[1]};
    const Tensor ids = i32_tensor({seqs[2].id, seqs[0].id, seqs[1].id});
    const std::int64_t nb = 3;
    const Tensor q = random_tensor(q_dt, {nb, sq, hq, d}, seed + 50, -2.0f, 2.0f);
    const Tensor o = nan_tensor(q_dt, {nb, sq, hq, d}), lse = nan_tensor(DType::f32, {nb, hq, sq});
    const AttentionAttrs attrs{.causal = causal, .fpmath = fpmath};
    Result<ops::PlanPtr> plan = ops::PagedAttention::plan(ctx_, cache, q.desc(), ids.desc(), o.desc(), 512, attrs, lse.desc());
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    SCOPED_TRACE(fmt::format("kernel {}", (*plan)->kernel()));
    if (q_dt == DType::f32 && cache_dt == DType::bf16) {  // f32 q is rounded to bf16 only when allowed, by the flash rows at bf16 levels
      const bool bf16_row = (*plan)->kernel().find("bf16") != std::string_view::npos;
      EXPECT_EQ(bf16_row, fpmath == ops::FpMath::bf16 && sq > 8 && ctx_.isa() >= hw::Isa::avx512_bf16);
    }
    const Status s = run_plan(ctx_, stream_, **plan, {q, ids}, {o, lse});
    ASSERT_TRUE(s.ok()) << s.to_string();

    const auto [o_ref, lse_ref] = paged_reference(q, row_seqs, attrs);
    const Tolerance tol = cache_dt == DType::i8 ? tolerance_for_int8_kv_cache()
                                                : attention_tolerance(cache_dt == DType::bf16 ? DType::bf16 : q_dt, q_dt, d);
    EXPECT_TRUE(close(o, o_ref, tol)) << "o";
    EXPECT_TRUE(close(lse, lse_ref, tol)) << "lse";

    if (cache_dt != DType::f32 || q_dt != DType::f32) return;
    // The same data through the contiguous Attention op, one row at a time.
    const Tensor o_cont = nan_tensor(DType::f32, {nb, sq, hq, d});
    for (std::int64_t b = 0; b < nb; ++b) {
      const std::int64_t len = row_seqs[b]->k.dim(0);
      const Status sc = ops::attention(stream_, rows_of(q, b, b + 1), value_or_die(row_seqs[b]->k.reshape({1, len, hkv, d})),
                                       value_or_die(row_seqs[b]->v.reshape({1, len, hkv, d})), rows_of(o_cont, b, b + 1), attrs);
      ASSERT_TRUE(sc.ok()) << sc.to_string();
    }
    EXPECT_TRUE(close(o, o_cont, tolerance_for(DType::f32, d))) << "paged vs contiguous";
  }

  void check_long_sequences(const std::vector<AttentionAttrs>& fixed, const AttentionAttrs& varlen, std::uint64_t seed);
};

TEST_P(PagedAttentionTest, EveryCacheTypeAgainstReference) {
  std::uint64_t seed = 1000;
  for (DType cache_dt : {DType::f32, DType::bf16, DType::i8})
    for (std::int64_t bs : {16, 32})
      for (std::int64_t sq : {1, 4}) check(cache_dt, bs, sq, DType::f32, true, seed += 10);
  // bf16 queries (and o) with a bf16 cache; not causal.
  check(DType::bf16, 16, 4, DType::bf16, true, seed += 10);
  check(DType::f32, 16, 4, DType::f32, false, seed += 10);
  check(DType::i8, 32, 4, DType::f32, false, seed += 10);
  // 1 to 6 rows per kv head: the VNNI and bf16 dot-product rows' P V takes rows 4, 2 and 1 at a time.
  for (DType cache_dt : {DType::bf16, DType::i8})
    for (std::int64_t hq : {2, 6})
      for (std::int64_t sq : {1, 2}) check(cache_dt, 16, sq, DType::f32, true, seed += 10, hq);
  // Prefill, Sq 12 (48 rows a kv head, past the decode rows' 16): the flash
  // rows read the paged layout, every cache type; f32 also against the
  // contiguous op.
  for (DType cache_dt : {DType::f32, DType::bf16, DType::i8})
    for (bool causal : {true, false}) check(cache_dt, causal ? 16 : 32, 12, DType::f32, causal, seed += 10);
}

TEST_P(PagedAttentionTest, FpMathBf16RoundsF32Queries) {
  // f32 q against a bf16 cache: strict keeps the f32 rows; FpMath::bf16 lets
  // the bf16 flash rows take Sq > 8 (decode, Sq <= 8, stays on the f32 row).
  std::uint64_t seed = 1600;
  for (std::int64_t sq : {1, 12})
    for (ops::FpMath fpmath : {ops::FpMath::strict, ops::FpMath::bf16})
      check(DType::bf16, 16, sq, DType::f32, true, seed += 10, 8, fpmath);
}

TEST_P(PagedAttentionTest, LongSequenceDecode) {
  // One larger case: a single 2000-token sequence, Sq = 1, 32 query heads on
  // 8 kv heads, D = 128 (int8 also 256: the VNNI row's widest rows).
  const std::int64_t hq = 32, hkv = 8;
  using Case = std::pair<DType, std::int64_t>;
  for (auto [cache_dt, d] : {Case{DType::f32, 128}, Case{DType::bf16, 128}, Case{DType::i8, 128}, Case{DType::i8, 256}}) {
    SCOPED_TRACE(fmt::format("{} D={}", to_string(cache_dt), d));
    auto cache = value_or_die(
        KvCache::create({.num_blocks = 64, .block_size = 32, .kv_heads = hkv, .head_dim = d, .dtype = cache_dt}));
    const std::vector<Seq> seqs = fill(*cache, cache_dt == DType::i8 ? DType::f32 : cache_dt, {2000}, 1100);
    const Tensor ids = i32_tensor({seqs[0].id});
    const Tensor q = random_tensor(DType::f32, {1, 1, hq, d}, 1101, -2.0f, 2.0f);
    const Tensor o = nan_tensor(DType::f32, {1, 1, hq, d}), lse = nan_tensor(DType::f32, {1, hq, 1});
    const ops::PlanPtr plan = value_or_die(
        ops::PagedAttention::plan(ctx_, cache, q.desc(), ids.desc(), o.desc(), 4096, {.causal = true}, lse.desc()));
    const Status s = run_plan(ctx_, stream_, *plan, {q, ids}, {o, lse});
    ASSERT_TRUE(s.ok()) << s.to_string();
    const auto [o_ref, lse_ref] = paged_reference(q, {&seqs[0]}, {.causal = true});
    const Tolerance tol = cache_dt == DType::i8 ? tolerance_for_int8_kv_cache() : attention_tolerance(cache_dt, DType::f32, d);
    EXPECT_TRUE(close(o, o_ref, tol)) << plan->kernel();
    EXPECT_TRUE(close(lse, lse_ref, tol)) << plan->kernel();
  }
}

TEST_P(PagedAttentionTest, SpeculativeDecodingRollback) {
  // 46 tokens, 4 drafts appended (past the block boundary at 48) and
  // verified with Sq 4; 1 accepted, the rest truncated away, 3 corrected
  // tokens appended and attended with Sq 3, against the reference on the
  // sequence's final tokens.
  const std::int64_t hq = 8, hkv = 2, d = 64;
  auto cache = value_or_die(KvCache::create({.num_blocks = 5, .block_size = 16, .kv_heads = hkv, .head_dim = d}));
  Seq s{cache->add_sequence(), random_tensor(DType::f32, {50, hkv, d}, 1400), random_tensor(DType::f32, {50, hkv, d}, 1401)};
  const Tensor draft_k = random_tensor(DType::f32, {4, hkv, d}, 1402), draft_v = random_tensor(DType::f32, {4, hkv, d}, 1403);
  ASSERT_TRUE(cache->append(s.id, rows_of(s.k, 0, 46), rows_of(s.v, 0, 46)).ok());
  ASSERT_TRUE(cache->append(s.id, draft_k, draft_v).ok());
  const Tensor ids = i32_tensor({s.id});
  const Tensor q4 = random_tensor(DType::f32, {1, 4, hq, d}, 1404, -2.0f, 2.0f), o4 = nan_tensor(DType::f32, {1, 4, hq, d});
  ASSERT_TRUE(ops::paged_attention(stream_, cache, q4, ids, o4, {.causal = true}).ok());
  ASSERT_TRUE(cache->truncate(s.id, 47).ok());
  EXPECT_EQ(cache->free_blocks(), 5 - 3);
  // The accepted draft token is the sequence's token 46.
  std::memcpy(s.k.data_as<float>() + 46 * hkv * d, draft_k.data(), std::size_t(hkv * d) * sizeof(float));
  std::memcpy(s.v.data_as<float>() + 46 * hkv * d, draft_v.data(), std::size_t(hkv * d) * sizeof(float));
  ASSERT_TRUE(cache->append(s.id, rows_of(s.k, 47, 50), rows_of(s.v, 47, 50)).ok());
  const Tensor q3 = random_tensor(DType::f32, {1, 3, hq, d}, 1405, -2.0f, 2.0f), o3 = nan_tensor(DType::f32, {1, 3, hq, d});
  const Status st = ops::paged_attention(stream_, cache, q3, ids, o3, {.causal = true});
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(close(o3, paged_reference(q3, {&s}, {.causal = true}).first, tolerance_for(DType::f32, d)));
}

TEST_P(PagedAttentionTest, VariableLengthsMixPrefillAndDecode) {
  // Continuous batching: one call with a decode token, a prefill chunk of 12
  // (of a 2000-token sequence), a draft of 4, a sequence without new queries
  // and a decode token of a sequence listed again; then the long sequence's
  // chunk and token alone, few enough units that the decode row splits its
  // keys across cores beside the flash row's chunk. Every cache type; each
  // sequence's rows against the reference and, for f32, against the
  // fixed-length op on its own.
  const std::int64_t hq = 8, hkv = 2, d = 64;
  const std::vector<std::int64_t> lengths = {2000, 17, 40, 5};
  std::uint64_t seed = 1500;
  for (DType cache_dt : {DType::f32, DType::bf16, DType::i8})
    for (bool causal : {true, false}) {
      SCOPED_TRACE(fmt::format("cache {} causal {}", to_string(cache_dt), causal));
      auto cache = value_or_die(KvCache::create({.num_blocks = blocks_for(lengths, 16) + 1, .block_size = 16, .kv_heads = hkv,
                                                 .head_dim = d, .dtype = cache_dt}));
      const std::vector<Seq> seqs = fill(*cache, cache_dt == DType::bf16 ? DType::bf16 : DType::f32, lengths, seed += 10);
      const AttentionAttrs attrs{.causal = causal};
      const Tolerance tol = cache_dt == DType::i8 ? tolerance_for_int8_kv_cache() : attention_tolerance(cache_dt, DType::f32, d);
      for (const auto& [pick, news] : {std::pair{std::vector<std::int32_t>{1, 0, 2, 3, 0}, std::vector<std::int32_t>{1, 12, 4, 0, 1}},
                                       std::pair{std::vector<std::int32_t>{0, 0}, std::vector<std::int32_t>{12, 1}}}) {
        std::vector<std::int32_t> ids, cu = {0};
        for (std::size_t b = 0; b < pick.size(); ++b) ids.push_back(seqs[std::size_t(pick[b])].id), cu.push_back(cu.back() + news[b]);
        const std::int64_t total = cu.back();
        const Tensor q = random_tensor(DType::f32, {total, hq, d}, seed + total, -2.0f, 2.0f);
        const Tensor o = nan_tensor(DType::f32, {total, hq, d}), lse = nan_tensor(DType::f32, {hq, total});
        const ops::PlanPtr plan = value_or_die(
            ops::PagedAttention::plan(ctx_, cache, q.desc(), i32_tensor(ids).desc(), o.desc(), 2048, attrs, lse.desc()));
        const Status st = run_plan(ctx_, stream_, *plan, {q, i32_tensor(ids), i32_tensor(cu)}, {o, lse});
        ASSERT_TRUE(st.ok()) << st.to_string();
        for (std::size_t b = 0; b < pick.size(); ++b) {
          if (news[b] == 0) continue;
          SCOPED_TRACE(fmt::format("row {} of {}: {} new queries", b, pick.size(), news[b]));
          const Tensor q_b = value_or_die(rows_of(q, cu[b], cu[b + 1]).reshape({1, news[b], hq, d}));
          const auto [o_ref, lse_ref] = paged_reference(q_b, {&seqs[std::size_t(pick[b])]}, attrs);
          EXPECT_TRUE(close(rows_of(o, cu[b], cu[b + 1]), value_or_die(o_ref.reshape({news[b], hq, d})), tol)) << "o";
          EXPECT_TRUE(close(value_or_die(lse.slice(1, cu[b], cu[b + 1])), value_or_die(lse_ref.reshape({hq, news[b]})), tol)) << "lse";
          if (cache_dt != DType::f32) continue;
          const Tensor o_b = nan_tensor(DType::f32, {1, news[b], hq, d});
          ASSERT_TRUE(ops::paged_attention(stream_, cache, q_b, i32_tensor({ids[b]}), o_b, attrs).ok());
          EXPECT_TRUE(close(rows_of(o, cu[b], cu[b + 1]), value_or_die(o_b.reshape({news[b], hq, d})), tolerance_for(DType::f32, d)))
              << "against the fixed-length op";
        }
      }
    }
  // The one-shot form, and the run-time checks of cu_seqlens_q.
  auto cache = value_or_die(KvCache::create({.num_blocks = 4, .block_size = 16, .kv_heads = hkv, .head_dim = d}));
  const std::vector<Seq> seqs = fill(*cache, DType::f32, {20, 9}, 1590);
  const Tensor ids = i32_tensor({seqs[0].id, seqs[1].id});
  const Tensor q = random_tensor(DType::f32, {5, hq, d}, 1591), o = nan_tensor(DType::f32, {5, hq, d});
  ASSERT_TRUE(ops::paged_attention_varlen(stream_, cache, q, ids, i32_tensor({0, 3, 5}), o, {.causal = true}).ok());
  const Tensor q_1 = value_or_die(rows_of(q, 3, 5).reshape({1, 2, hq, d}));
  EXPECT_TRUE(close(rows_of(o, 3, 5), value_or_die(paged_reference(q_1, {&seqs[1]}, {.causal = true}).first.reshape({2, hq, d})),
                    tolerance_for(DType::f32, d)));
  for (const std::vector<std::int32_t>& bad : {std::vector<std::int32_t>{1, 3, 5}, {0, 4, 3}, {0, 3, 4}})
    EXPECT_TRUE(fails_naming(ops::paged_attention_varlen(stream_, cache, q, ids, i32_tensor(bad), o), "cu_seqlens_q"));
  // More new queries than a sequence holds (9 tokens, 10 queries).
  const Tensor q_long = random_tensor(DType::f32, {11, hq, d}, 1592), o_long = nan_tensor(DType::f32, {11, hq, d});
  EXPECT_TRUE(fails_mentioning(ops::paged_attention_varlen(stream_, cache, q_long, ids, i32_tensor({0, 1, 11}), o_long), "seq_ids[1]"));
  // The fixed-length one-shot still takes `{}` for its attributes (an overload taking cu_seqlens_q made that ambiguous).
  const Tensor o_1 = nan_tensor(DType::f32, {1, 2, hq, d});
  EXPECT_TRUE(ops::paged_attention(stream_, cache, q_1, i32_tensor({seqs[1].id}), o_1, {}).ok());
}

TEST_P(PagedAttentionTest, AdditiveMasks) {
  // Masks over the sequences' keys, every cache type, decode (Sq 1, 4) and
  // a prefill chunk (Sq 12): a full f32 mask [B, Hq, Sq, 320] with -inf
  // scattered (some rows wholly masked), ALiBi-like biases [1, Hq, 1, 300] in
  // bf16 (the longest sequence's 300 keys), [Sq, 1] broadcast over any number
  // of keys; against the reference.
  const std::int64_t hq = 8, hkv = 2, d = 64;
  std::uint64_t seed = 1700;
  for (DType cache_dt : {DType::f32, DType::bf16, DType::i8})
    for (std::int64_t sq : {1, 4, 12}) {
      const std::vector<std::int64_t> lengths = {sq, 17, 300};
      auto cache = value_or_die(KvCache::create({.num_blocks = blocks_for(lengths, 16) + 1, .block_size = 16, .kv_heads = hkv,
                                                 .head_dim = d, .dtype = cache_dt}));
      const std::vector<Seq> seqs = fill(*cache, cache_dt == DType::bf16 ? DType::bf16 : DType::f32, lengths, seed += 10);
      const Tensor ids = i32_tensor({seqs[2].id, seqs[0].id, seqs[1].id});
      const Tensor q = random_tensor(DType::f32, {3, sq, hq, d}, seed + 1, -2.0f, 2.0f);
      const Tolerance tol = cache_dt == DType::i8 ? tolerance_for_int8_kv_cache() : attention_tolerance(cache_dt, DType::f32, d);
      for (const Tensor& mask : {full_mask(3, hq, sq, 320, seed + 2), random_tensor(DType::bf16, {1, hq, 1, 300}, seed + 3, -4.0f, 0.0f),
                                 random_tensor(DType::f32, {sq, 1}, seed + 4, -1.0f, 1.0f)})
        for (bool causal : {true, false}) {
          SCOPED_TRACE(fmt::format("cache {} Sq={} mask {} {} causal {}", to_string(cache_dt), sq, to_string(mask.dtype()),
                                   mask.shape().to_string(), causal));
          const Tensor o = nan_tensor(DType::f32, {3, sq, hq, d}), lse = nan_tensor(DType::f32, {3, hq, sq});
          const ops::PlanPtr plan = value_or_die(ops::PagedAttention::plan(ctx_, cache, q.desc(), ids.desc(), o.desc(), 512,
                                                                           {.causal = causal}, lse.desc(), mask.desc()));
          const Status st = run_plan(ctx_, stream_, *plan, {q, ids, mask}, {o, lse});
          ASSERT_TRUE(st.ok()) << st.to_string();
          const auto [o_ref, lse_ref] = paged_reference(q, {&seqs[2], &seqs[0], &seqs[1]}, {.causal = causal}, &mask);
          EXPECT_TRUE(close(o, o_ref, tol)) << "o, kernel " << plan->kernel();
          EXPECT_TRUE(close(lse, lse_ref, tol)) << "lse, kernel " << plan->kernel();
        }
    }
  // A mask that covers fewer keys than a sequence holds is a run-time error; the plan checks its shape.
  auto cache = value_or_die(KvCache::create({.num_blocks = 4, .block_size = 16, .kv_heads = hkv, .head_dim = d}));
  const std::vector<Seq> seqs = fill(*cache, DType::f32, {20}, 1790);
  const Tensor ids = i32_tensor({seqs[0].id});
  const Tensor q = random_tensor(DType::f32, {1, 1, hq, d}, 1791), o = nan_tensor(DType::f32, {1, 1, hq, d});
  const Tensor short_mask = zeros(DType::f32, {1, 1, 1, 19});
  const ops::PlanPtr plan = value_or_die(ops::PagedAttention::plan(ctx_, cache, q.desc(), ids.desc(), o.desc(), 64, {}, {}, short_mask.desc()));
  EXPECT_TRUE(fails_mentioning(run_plan(ctx_, stream_, *plan, {q, ids, short_mask}, {o}), "mask: covers 19 keys"));
  EXPECT_TRUE(fails_naming(ops::PagedAttention::plan(ctx_, cache, q.desc(), ids.desc(), o.desc(), 64, {}, {}, zeros(DType::f32, {2, 1, 1, 20}).desc()), "mask"));
  EXPECT_TRUE(fails_naming(ops::PagedAttention::plan(ctx_, cache, q.desc(), ids.desc(), o.desc(), 64, {}, {}, zeros(DType::i32, {1, 20}).desc()), "mask"));
  const Tensor packed = random_tensor(DType::f32, {1, hq, d}, 1792);
  EXPECT_TRUE(fails_naming(ops::PagedAttention::plan(ctx_, cache, packed.desc(), ids.desc(), packed.desc(), 64, {}, {}, short_mask.desc()), "mask"));
}

// Sequences of 2000, 17 and 40 tokens in a cache of each type: fixed
// lengths at Sq 1, 4 (decode rows; the 2000-token sequence's keys split
// across cores) and 12 (flash rows) under each of `fixed`, then variable
// lengths mixing a decode token, a 12-query chunk of the long sequence and a
// draft of 4 under `varlen`; against the reference.
void PagedAttentionTest::check_long_sequences(const std::vector<AttentionAttrs>& fixed, const AttentionAttrs& varlen, std::uint64_t seed) {
  const std::int64_t hq = 8, hkv = 2, d = 64;
  for (DType cache_dt : {DType::f32, DType::bf16, DType::i8}) {
    const std::vector<std::int64_t> lengths = {2000, 17, 40};
    auto cache = value_or_die(KvCache::create({.num_blocks = blocks_for(lengths, 16) + 1, .block_size = 16, .kv_heads = hkv,
                                               .head_dim = d, .dtype = cache_dt}));
    const std::vector<Seq> seqs = fill(*cache, cache_dt == DType::bf16 ? DType::bf16 : DType::f32, lengths, seed += 10);
    const Tensor ids = i32_tensor({seqs[1].id, seqs[0].id, seqs[2].id});
    const Tolerance tol = cache_dt == DType::i8 ? tolerance_for_int8_kv_cache() : attention_tolerance(cache_dt, DType::f32, d);
    for (const AttentionAttrs& attrs : fixed)
      for (std::int64_t sq : {1, 4, 12}) {
        SCOPED_TRACE(fmt::format("cache {} causal {} window {} alibi {} sinks {} softcap {} Sq={}", to_string(cache_dt), attrs.causal,
                                 attrs.window, !attrs.alibi_slopes.empty(), !attrs.sinks.empty(), attrs.softcap, sq));
        const Tensor q = random_tensor(DType::f32, {3, sq, hq, d}, seed + sq, -2.0f, 2.0f);
        const Tensor o = nan_tensor(DType::f32, {3, sq, hq, d}), lse = nan_tensor(DType::f32, {3, hq, sq});
        const ops::PlanPtr plan = value_or_die(ops::PagedAttention::plan(ctx_, cache, q.desc(), ids.desc(), o.desc(), 2048, attrs, lse.desc()));
        const Status st = run_plan(ctx_, stream_, *plan, {q, ids}, {o, lse});
        ASSERT_TRUE(st.ok()) << st.to_string();
        const auto [o_ref, lse_ref] = paged_reference(q, {&seqs[1], &seqs[0], &seqs[2]}, attrs);
        EXPECT_TRUE(close(o, o_ref, tol)) << "o, kernel " << plan->kernel();
        EXPECT_TRUE(close(lse, lse_ref, tol)) << "lse, kernel " << plan->kernel();
      }
    const std::vector<std::int32_t> news = {1, 12, 4}, cu = {0, 1, 13, 17};
    const Tensor q = random_tensor(DType::f32, {17, hq, d}, seed + 20, -2.0f, 2.0f), o = nan_tensor(DType::f32, {17, hq, d});
    ASSERT_TRUE(ops::paged_attention_varlen(stream_, cache, q, ids, i32_tensor(cu), o, varlen).ok());
    const Seq* row_seqs[] = {&seqs[1], &seqs[0], &seqs[2]};
    for (std::size_t b = 0; b < 3; ++b) {
      SCOPED_TRACE(fmt::format("cache {} varlen row {}", to_string(cache_dt), b));
      const Tensor q_b = value_or_die(rows_of(q, cu[b], cu[b + 1]).reshape({1, news[b], hq, d}));
      EXPECT_TRUE(close(rows_of(o, cu[b], cu[b + 1]), value_or_die(paged_reference(q_b, {row_seqs[b]}, varlen).first.reshape({news[b], hq, d})), tol));
    }
  }
}

TEST_P(PagedAttentionTest, SlidingWindow) {
  // Windows of 5 and 100 keys (the split of the long sequence starting at its window).
  check_long_sequences({{.causal = true, .window = 5}, {.causal = true, .window = 100}}, {.causal = true, .window = 30}, 1800);
}

TEST_P(PagedAttentionTest, Alibi) {
  // ALiBi, causal and not, with a window.
  const std::vector<float> slopes = alibi_slopes(8);
  check_long_sequences({{.causal = true, .alibi_slopes = slopes}, {.alibi_slopes = slopes}, {.causal = true, .window = 100, .alibi_slopes = slopes}},
                       {.causal = true, .alibi_slopes = slopes}, 1900);
}

TEST_P(PagedAttentionTest, Sinks) {
  // Sinks with causal and cross-attention shapes, a window and ALiBi.
  const std::vector<float> sinks = sink_logits(8);
  check_long_sequences({{.causal = true, .sinks = sinks}, {.sinks = sinks}, {.causal = true, .window = 100, .alibi_slopes = alibi_slopes(8), .sinks = sinks}},
                       {.causal = true, .sinks = sinks}, 1950);
}

TEST_P(PagedAttentionTest, Softcap) {
  // Gemma 2's soft-capped logits (a cap of 2 against logits of up to ~8), causal and not, with a window (its local layers).
  check_long_sequences({{.causal = true, .softcap = 2.0f}, {.softcap = 2.0f}, {.causal = true, .window = 100, .softcap = 2.0f}},
                       {.causal = true, .softcap = 2.0f}, 2000);
}

// An engine's own block manager: sequences of these lengths get blocks of
// the pool in a scattered order (the last first, every other one), their
// K / V written by KvCache::write in chunks with padding slots (-1) between;
// returns each sequence's blocks as rows of a block table [B, width].
std::vector<Seq> write_with_own_blocks(KvCache& cache, DType src, const std::vector<std::int64_t>& lengths, std::int64_t width,
                                       Tensor& block_tables, std::uint64_t seed) {
  const KvCacheConfig& c = cache.config();
  std::vector<std::int32_t> order;  // blocks handed out: odd ones from the top, then even ones
  for (std::int64_t b = c.num_blocks - 1; b >= 0; b -= 2) order.push_back(std::int32_t(b));
  for (std::int64_t b = c.num_blocks - 2; b >= 0; b -= 2) order.push_back(std::int32_t(b));
  block_tables = zeros(DType::i32, {std::int64_t(lengths.size()), width});
  std::vector<Seq> seqs;
  std::size_t next = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const std::int64_t len = lengths[i], blocks = (len + c.block_size - 1) / c.block_size;
    for (std::int64_t j = 0; j < blocks; ++j) block_tables.data_as<std::int32_t>()[std::int64_t(i) * width + j] = order[next++];
    Seq s{-1, random_tensor(src, {len, c.kv_heads, c.head_dim}, seed + 2 * i), random_tensor(src, {len, c.kv_heads, c.head_dim}, seed + 2 * i + 1)};
    for (std::int64_t t0 = 0; t0 < len; t0 += 23) {  // chunks of 23 tokens and one padding token, i64 slots
      const std::int64_t n = std::min<std::int64_t>(23, len - t0);
      Tensor slots = zeros(DType::i64, {n + 1});
      Tensor k = zeros(src, {n + 1, c.kv_heads, c.head_dim}), v = zeros(src, {n + 1, c.kv_heads, c.head_dim});
      for (std::int64_t t = 0; t < n; ++t) {
        const std::int64_t pos = t0 + t;
        slots.data_as<std::int64_t>()[t] = std::int64_t(block_tables.data_as<std::int32_t>()[std::int64_t(i) * width + pos / c.block_size]) * c.block_size + pos % c.block_size;
      }
      slots.data_as<std::int64_t>()[n] = -1;
      const std::size_t bytes = std::size_t(n * c.kv_heads * c.head_dim) * bytes_of(src);
      std::memcpy(k.data(), rows_of(s.k, t0, t0 + n).data(), bytes);  // both contiguous
      std::memcpy(v.data(), rows_of(s.v, t0, t0 + n).data(), bytes);
      const Status st = cache.write(slots, k, v);
      EXPECT_TRUE(st.ok()) << st.to_string();
    }
    seqs.push_back(std::move(s));
  }
  return seqs;
}

TEST_P(PagedAttentionTest, CallerOwnedBlockTables) {
  // Blocks the caller hands out and writes by slot, read through block
  // tables: every cache type, decode (Sq 1, 4) and a prefill chunk (12),
  // causal and a window; variable lengths; against the reference.
  const std::int64_t hq = 8, hkv = 2, d = 64, width = 24;
  std::uint64_t seed = 1900;
  for (DType cache_dt : {DType::f32, DType::bf16, DType::i8}) {
    const std::vector<std::int64_t> lengths = {300, 17, 40};
    auto cache = value_or_die(KvCache::create({.num_blocks = blocks_for(lengths, 16) + 5, .block_size = 16, .kv_heads = hkv,
                                               .head_dim = d, .dtype = cache_dt}));
    Tensor tables;
    const std::vector<Seq> seqs = write_with_own_blocks(*cache, cache_dt == DType::bf16 ? DType::bf16 : DType::f32, lengths, width, tables, seed += 10);
    EXPECT_EQ(cache->free_blocks(), cache->config().num_blocks);  // the cache's own allocator is untouched
    const Tensor lens = i32_tensor({300, 17, 40});
    const Tolerance tol = cache_dt == DType::i8 ? tolerance_for_int8_kv_cache() : attention_tolerance(cache_dt, DType::f32, d);
    for (const AttentionAttrs& attrs : {AttentionAttrs{.causal = true}, AttentionAttrs{}, AttentionAttrs{.causal = true, .window = 20},
                                        AttentionAttrs{.causal = true, .alibi_slopes = alibi_slopes(hq)}})
      for (std::int64_t sq : {1, 4, 12}) {
        SCOPED_TRACE(fmt::format("cache {} Sq={} causal {} window {} alibi {}", to_string(cache_dt), sq, attrs.causal, attrs.window,
                                 !attrs.alibi_slopes.empty()));
        const Tensor q = random_tensor(DType::f32, {3, sq, hq, d}, seed + sq, -2.0f, 2.0f);
        const Tensor o = nan_tensor(DType::f32, {3, sq, hq, d}), lse = nan_tensor(DType::f32, {3, hq, sq});
        const ops::PlanPtr plan =
            value_or_die(ops::PagedAttention::plan_block_tables(ctx_, cache, q.desc(), tables.desc(), lens.desc(), o.desc(), 512, attrs, lse.desc()));
        const Status st = run_plan(ctx_, stream_, *plan, {q, tables, lens}, {o, lse});
        ASSERT_TRUE(st.ok()) << st.to_string();
        const auto [o_ref, lse_ref] = paged_reference(q, {&seqs[0], &seqs[1], &seqs[2]}, attrs);
        EXPECT_TRUE(close(o, o_ref, tol)) << "o, kernel " << plan->kernel();
        EXPECT_TRUE(close(lse, lse_ref, tol)) << "lse, kernel " << plan->kernel();
      }
    // Under a window, blocks before the first query's window are not read: an
    // engine may have freed them (-1 here for the 300-token sequence's first 17).
    {
      Tensor freed = clone(tables);
      std::fill_n(freed.data_as<std::int32_t>(), 17, -1);
      const AttentionAttrs attrs{.causal = true, .window = 20};
      const Tensor q = random_tensor(DType::f32, {3, 1, hq, d}, seed + 20, -2.0f, 2.0f), o = nan_tensor(DType::f32, {3, 1, hq, d});
      const ops::PlanPtr plan = value_or_die(ops::PagedAttention::plan_block_tables(ctx_, cache, q.desc(), freed.desc(), lens.desc(), o.desc(), 512, attrs));
      const Status st = run_plan(ctx_, stream_, *plan, {q, freed, lens}, {o});
      ASSERT_TRUE(st.ok()) << st.to_string();
      EXPECT_TRUE(close(o, paged_reference(q, {&seqs[0], &seqs[1], &seqs[2]}, attrs).first, tol)) << "freed blocks before the window";
      std::fill_n(freed.data_as<std::int32_t>(), 18, -1);  // block 17 holds key 280, the window's first
      EXPECT_TRUE(fails_mentioning(run_plan(ctx_, stream_, *plan, {q, freed, lens}, {o}), "block_tables[0, 17]"));
    }
    // Variable lengths: 1, 12 and 4 new queries; and the one-shot form.
    const std::vector<std::int32_t> news = {1, 12, 4}, cu = {0, 1, 13, 17};
    const Tensor q = random_tensor(DType::f32, {17, hq, d}, seed + 30, -2.0f, 2.0f), o = nan_tensor(DType::f32, {17, hq, d});
    const ops::PlanPtr plan = value_or_die(
        ops::PagedAttention::plan_block_tables(ctx_, cache, q.desc(), tables.desc(), lens.desc(), o.desc(), 512, {.causal = true}));
    ASSERT_TRUE(run_plan(ctx_, stream_, *plan, {q, tables, lens, i32_tensor(cu)}, {o}).ok());
    for (std::size_t b = 0; b < 3; ++b) {
      const Tensor q_b = value_or_die(rows_of(q, cu[b], cu[b + 1]).reshape({1, news[b], hq, d}));
      EXPECT_TRUE(close(rows_of(o, cu[b], cu[b + 1]),
                        value_or_die(paged_reference(q_b, {&seqs[b]}, {.causal = true}).first.reshape({news[b], hq, d})), tol))
          << "varlen row " << b;
    }
    // The same with a window of 30 and the long sequence's blocks before it freed.
    {
      Tensor freed = clone(tables);
      std::fill_n(freed.data_as<std::int32_t>(), 16, -1);  // its 12 queries' first window starts at key 259, block 16
      const ops::PlanPtr windowed = value_or_die(ops::PagedAttention::plan_block_tables(ctx_, cache, q.desc(), freed.desc(), lens.desc(), o.desc(),
                                                                                        512, {.causal = true, .window = 30}));
      const Status st = run_plan(ctx_, stream_, *windowed, {q, freed, lens, i32_tensor({0, 12, 13, 17})}, {o});
      ASSERT_TRUE(st.ok()) << st.to_string();
      const std::vector<std::int32_t> n2 = {12, 1, 4}, cu2 = {0, 12, 13, 17};
      for (std::size_t b = 0; b < 3; ++b) {
        const Tensor q_b = value_or_die(rows_of(q, cu2[b], cu2[b + 1]).reshape({1, n2[b], hq, d}));
        EXPECT_TRUE(close(rows_of(o, cu2[b], cu2[b + 1]),
                          value_or_die(paged_reference(q_b, {&seqs[b]}, {.causal = true, .window = 30}).first.reshape({n2[b], hq, d})), tol))
            << "varlen window row " << b;
      }
    }
    const Tensor q1 = random_tensor(DType::f32, {3, 1, hq, d}, seed + 40, -2.0f, 2.0f), o1 = nan_tensor(DType::f32, {3, 1, hq, d});
    ASSERT_TRUE(ops::paged_attention_block_tables(stream_, cache, q1, tables, lens, o1, {.causal = true}).ok());
    EXPECT_TRUE(close(o1, paged_reference(q1, {&seqs[0], &seqs[1], &seqs[2]}, {.causal = true}).first, tol)) << "one-shot";
    ASSERT_TRUE(ops::paged_attention_block_tables(stream_, cache, q1, tables, lens, o1, {.causal = true, .window = 9}).ok());
    EXPECT_TRUE(close(o1, paged_reference(q1, {&seqs[0], &seqs[1], &seqs[2]}, {.causal = true, .window = 9}).first, tol)) << "one-shot window";
    // A length far past the tables (garbage in a padding row) is named, without a plan sized for it first.
    EXPECT_TRUE(fails_mentioning(ops::paged_attention_block_tables(stream_, cache, q1, tables, i32_tensor({300, 2147483647, 40}), o1,
                                                                   {.causal = true, .window = 9}),
                                 "seq_lens[1]"));
  }
}

TEST(PagedAttentionErrors, BlockTablesAndSlots) {
  Context ctx;
  Stream stream(ctx);
  const std::int64_t hq = 4, hkv = 2, d = 16;
  auto cache = value_or_die(KvCache::create({.num_blocks = 4, .block_size = 16, .kv_heads = hkv, .head_dim = d}));
  const Tensor k = random_tensor(DType::f32, {3, hkv, d}, 1);
  // write: slots past the pool (64 slots), of the wrong type or count; nothing is written then.
  const std::size_t pool_bytes = std::size_t(hkv * 4 * 16 * d) * sizeof(float);
  std::vector<char> before(pool_bytes);
  std::memcpy(before.data(), cache->k_pool(), pool_bytes);
  EXPECT_TRUE(fails_naming(cache->write(i32_tensor({0, 64, 1}), k, k), "slots[1]"));
  EXPECT_TRUE(fails_naming(cache->write(i32_tensor({0, 1}), k, k), "slots"));
  EXPECT_TRUE(fails_naming(cache->write(zeros(DType::f32, {3}), k, k), "slots"));
  EXPECT_TRUE(fails_naming(cache->write(i32_tensor({0, 1, 2}), k, zeros(DType::f32, {2, hkv, d})), "v"));
  EXPECT_EQ(std::memcmp(before.data(), cache->k_pool(), pool_bytes), 0);
  ASSERT_TRUE(cache->write(i32_tensor({63, -1, 0}), k, k).ok());
  // Plan: block_tables i32 [B, W] with unit row stride, seq_lens i32 [B].
  auto d4 = [](DType t, Shape s) { return TensorDesc::contiguous(t, s); };
  const TensorDesc q = d4(DType::f32, {2, 1, hq, d}), tables = d4(DType::i32, {2, 3}), lens = d4(DType::i32, {2});
  using ops::PagedAttention;
  EXPECT_TRUE(PagedAttention::plan_block_tables(ctx, cache, q, tables, lens, q, 48).ok());
  EXPECT_TRUE(fails_naming(PagedAttention::plan_block_tables(ctx, cache, q, d4(DType::i64, {2, 3}), lens, q, 48), "block_tables"));
  EXPECT_TRUE(fails_naming(PagedAttention::plan_block_tables(ctx, cache, q, d4(DType::i32, {2}), lens, q, 48), "block_tables"));
  EXPECT_TRUE(fails_naming(PagedAttention::plan_block_tables(ctx, cache, q, d4(DType::i32, {3, 3}), lens, q, 48), "block_tables"));
  EXPECT_TRUE(fails_naming(PagedAttention::plan_block_tables(ctx, cache, q, TensorDesc{DType::i32, {2, 3}, {1, 2}}, lens, q, 48), "block_tables"));
  EXPECT_TRUE(fails_naming(PagedAttention::plan_block_tables(ctx, cache, q, tables, d4(DType::i32, {3}), q, 48), "seq_lens"));
  EXPECT_TRUE(fails_naming(PagedAttention::plan_block_tables(ctx, cache, q, tables, d4(DType::i64, {2}), q, 48), "seq_lens"));
  // Run: a block out of the pool, a length the table cannot hold, past max_kv_len, negative, fewer than the queries.
  const ops::PlanPtr plan = value_or_die(PagedAttention::plan_block_tables(ctx, cache, q, tables, lens, q, 40));
  const Tensor qt = random_tensor(DType::f32, {2, 1, hq, d}, 2), o = zeros(DType::f32, {2, 1, hq, d});
  auto table2 = [](std::vector<std::int32_t> v) { return value_or_die(i32_tensor(v).reshape({2, 3})); };
  EXPECT_TRUE(run_plan(ctx, stream, *plan, {qt, table2({0, 1, 2, 3, 0, 0}), i32_tensor({33, 5})}, {o}).ok());
  EXPECT_TRUE(fails_mentioning(run_plan(ctx, stream, *plan, {qt, table2({0, 1, 4, 3, 0, 0}), i32_tensor({33, 5})}, {o}), "block_tables[0, 2]"));
  EXPECT_TRUE(fails_mentioning(run_plan(ctx, stream, *plan, {qt, table2({0, 1, 2, -1, 0, 0}), i32_tensor({33, 5})}, {o}), "block_tables[1, 0]"));
  EXPECT_TRUE(fails_mentioning(run_plan(ctx, stream, *plan, {qt, table2({0, 1, 2, 3, 0, 0}), i32_tensor({5, 49})}, {o}), "seq_lens[1]"));
  EXPECT_TRUE(fails_mentioning(run_plan(ctx, stream, *plan, {qt, table2({0, 1, 2, 3, 0, 0}), i32_tensor({41, 5})}, {o}), "seq_lens[0]"));
  EXPECT_TRUE(fails_mentioning(run_plan(ctx, stream, *plan, {qt, table2({0, 1, 2, 3, 0, 0}), i32_tensor({-3, 5})}, {o}), "seq_lens[0]"));
  EXPECT_TRUE(fails_mentioning(run_plan(ctx, stream, *plan, {qt, table2({0, 1, 2, 3, 0, 0}), i32_tensor({0, 5})}, {o}), "seq_lens[0]"));
  // A block past a sequence's length is not read, so not checked: 5 tokens take one block.
  EXPECT_TRUE(run_plan(ctx, stream, *plan, {qt, table2({0, 1, 2, 3, 99, -7}), i32_tensor({33, 5})}, {o}).ok());
}

TEST_P(PagedAttentionTest, OneShotGrowingSequence) {
  // A sequence grows token by token from 61 to 67 tokens, across the
  // power-of-two boundary at 64 (the one-shot function re-plans for the next
  // bucket; 64 rather than 32 in case the smallest bucket is 64) and the block
  // boundary at 64; another sequence stays at 9. Checked at every step.
  const std::int64_t hq = 4, hkv = 2, d = 64, first = 61, last = 67;
  auto cache = value_or_die(KvCache::create({.num_blocks = 8, .block_size = 32, .kv_heads = hkv, .head_dim = d}));
  std::vector<Seq> seqs = fill(*cache, DType::f32, {9}, 1200);
  Seq grow{cache->add_sequence(), random_tensor(DType::f32, {last, hkv, d}, 1201),
           random_tensor(DType::f32, {last, hkv, d}, 1202)};
  ASSERT_TRUE(cache->append(grow.id, rows_of(grow.k, 0, first - 1), rows_of(grow.v, 0, first - 1)).ok());
  for (std::int64_t len = first; len <= last; ++len) {
    SCOPED_TRACE(fmt::format("length {}", len));
    ASSERT_TRUE(cache->append(grow.id, rows_of(grow.k, len - 1, len), rows_of(grow.v, len - 1, len)).ok());
    ASSERT_EQ(value_or_die(cache->length(grow.id)), len);
    const Seq now{grow.id, rows_of(grow.k, 0, len), rows_of(grow.v, 0, len)};
    const Tensor ids = i32_tensor({grow.id, seqs[0].id});
    const Tensor q = random_tensor(DType::f32, {2, 1, hq, d}, 1300 + len, -2.0f, 2.0f);
    const Tensor o = nan_tensor(DType::f32, {2, 1, hq, d});
    const Status s = ops::paged_attention(stream_, cache, q, ids, o, {.causal = true});
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_TRUE(close(o, paged_reference(q, {&now, &seqs[0]}, {.causal = true}).first, tolerance_for(DType::f32, d)));
  }
}

TEST_P(PagedAttentionTest, OneShotKeepsCachesApart) {
  // Two caches alike in config and in every desc, different in content: the
  // one-shot function must not serve one from a plan made for the other.
  const std::int64_t hq = 4, hkv = 2, d = 64;
  const KvCacheConfig config{.num_blocks = 4, .block_size = 16, .kv_heads = hkv, .head_dim = d};
  auto c1 = value_or_die(KvCache::create(config)), c2 = value_or_die(KvCache::create(config));
  const std::vector<Seq> s1 = fill(*c1, DType::f32, {20}, 1400), s2 = fill(*c2, DType::f32, {20}, 1500);
  const Tensor q = random_tensor(DType::f32, {1, 1, hq, d}, 1401, -2.0f, 2.0f);
  const Tensor o1 = nan_tensor(DType::f32, {1, 1, hq, d}), o2 = nan_tensor(DType::f32, {1, 1, hq, d});
  ASSERT_TRUE(ops::paged_attention(stream_, c1, q, i32_tensor({s1[0].id}), o1).ok());
  ASSERT_TRUE(ops::paged_attention(stream_, c2, q, i32_tensor({s2[0].id}), o2).ok());
  EXPECT_TRUE(close(o1, paged_reference(q, {&s1[0]}, {}).first, tolerance_for(DType::f32, d)));
  EXPECT_TRUE(close(o2, paged_reference(q, {&s2[0]}, {}).first, tolerance_for(DType::f32, d)));
}

TEST_P(PagedAttentionTest, PlanKeepsCacheAlive) {
  const std::int64_t hq = 8, hkv = 2, d = 64;
  std::weak_ptr<KvCache> weak;
  ops::PlanPtr plan;
  std::vector<Seq> seqs;
  const Tensor q = random_tensor(DType::f32, {2, 1, hq, d}, 1600, -2.0f, 2.0f);
  const Tensor o = nan_tensor(DType::f32, {2, 1, hq, d});
  Tensor ids;
  {
    auto cache = value_or_die(KvCache::create({.num_blocks = 8, .block_size = 32, .kv_heads = hkv, .head_dim = d}));
    weak = cache;
    seqs = fill(*cache, DType::f32, {70, 3}, 1601);
    ids = i32_tensor({seqs[0].id, seqs[1].id});
    plan = value_or_die(ops::PagedAttention::plan(ctx_, cache, q.desc(), ids.desc(), o.desc(), 128));
  }
  ASSERT_FALSE(weak.expired());
  const Status s = run_plan(ctx_, stream_, *plan, {q, ids}, {o});
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(close(o, paged_reference(q, {&seqs[0], &seqs[1]}, {}).first, tolerance_for(DType::f32, d)));
  plan.reset();
  EXPECT_TRUE(weak.expired()) << "the plan held the cache after it was destroyed";
}

INSTANTIATE_TEST_SUITE_P(Isa, PagedAttentionTest, ::testing::ValuesIn(isa_levels()), isa_name);

// ------------------------------------------------------------------- errors

TEST(AttentionErrors, PlanNamesTheArgument) {
  Context ctx;
  auto d = [](DType t, Shape s) { return TensorDesc::contiguous(t, s); };
  const TensorDesc q = d(DType::f32, {2, 5, 8, 64}), k = d(DType::f32, {2, 7, 2, 64}), o = q;
  using ops::Attention;
  ASSERT_TRUE(Attention::plan(ctx, q, k, k, o).ok());
  // Head dims of q and k differ.
  EXPECT_TRUE(fails_naming(Attention::plan(ctx, q, d(DType::f32, {2, 7, 2, 32}), d(DType::f32, {2, 7, 2, 32}), o), "k"));
  // Hq = 8 is not a multiple of Hkv = 3.
  const TensorDesc k3 = d(DType::f32, {2, 7, 3, 64});
  EXPECT_TRUE(fails_naming_one_of(Attention::plan(ctx, q, k3, k3, o), {"k", "q"}));
  EXPECT_TRUE(fails_mentioning(Attention::plan(ctx, q, k3, k3, o), "head"));
  // k and v differ; batch of k differs from q's.
  EXPECT_TRUE(fails_naming(Attention::plan(ctx, q, k, d(DType::f32, {2, 6, 2, 64}), o), "v"));
  EXPECT_TRUE(fails_naming(Attention::plan(ctx, q, k, d(DType::f32, {2, 7, 2, 80}), o), "v"));
  EXPECT_TRUE(fails_naming(Attention::plan(ctx, q, d(DType::f32, {3, 7, 2, 64}), d(DType::f32, {3, 7, 2, 64}), o), "k"));
  // o differs from q.
  EXPECT_TRUE(fails_naming(Attention::plan(ctx, q, k, k, d(DType::f32, {2, 5, 8, 32})), "o"));
  EXPECT_TRUE(fails_naming(Attention::plan(ctx, q, k, k, d(DType::f32, {2, 5, 4, 64})), "o"));
  EXPECT_TRUE(fails_naming(Attention::plan(ctx, q, k, k, d(DType::f16, {2, 5, 8, 64})), "o"));
  // Dtypes: k and v apart (q may differ from both), and types q, k and v may not have.
  EXPECT_TRUE(Attention::plan(ctx, q, d(DType::bf16, {2, 7, 2, 64}), d(DType::bf16, {2, 7, 2, 64}), o).ok());
  EXPECT_TRUE(fails_naming(Attention::plan(ctx, q, k, d(DType::bf16, {2, 7, 2, 64}), o), "v"));
  EXPECT_TRUE(fails_naming(Attention::plan(ctx, q, d(DType::i8, {2, 7, 2, 64}), d(DType::i8, {2, 7, 2, 64}), o), "k"));
  EXPECT_TRUE(fails_naming(Attention::plan(ctx, q, d(DType::f16, {2, 7, 2, 64}), d(DType::f16, {2, 7, 2, 64}), o), "k"));
  for (DType bad : {DType::f16, DType::i8}) {
    const TensorDesc kb = d(bad, {2, 7, 2, 64});
    EXPECT_TRUE(fails_naming(Attention::plan(ctx, d(bad, {2, 5, 8, 64}), kb, kb, o), "q")) << to_string(bad);
  }
  // Ranks, and a stride along D that is not 1.
  EXPECT_TRUE(fails_naming(Attention::plan(ctx, d(DType::f32, {5, 8, 64}), k, k, d(DType::f32, {5, 8, 64})), "q"));
  const TensorDesc k_strided{DType::f32, {2, 7, 2, 64}, {7 * 2 * 128, 2 * 128, 128, 2}};
  EXPECT_TRUE(fails_naming(Attention::plan(ctx, q, k_strided, k, o), "k"));
  // Scale.
  EXPECT_TRUE(fails_naming(Attention::plan(ctx, q, k, k, o, {.scale = kNaN}), "scale"));
  EXPECT_TRUE(fails_naming(Attention::plan(ctx, q, k, k, o, {.scale = kInf}), "scale"));
  // A window: negative, without causal, with a mask.
  EXPECT_TRUE(Attention::plan(ctx, q, k, k, o, {.causal = true, .window = 3}).ok());
  EXPECT_TRUE(fails_naming(Attention::plan(ctx, q, k, k, o, {.causal = true, .window = -1}), "attrs.window"));
  EXPECT_TRUE(fails_naming(Attention::plan(ctx, q, k, k, o, {.window = 3}), "attrs.window"));
  {
    AttentionOptions options;
    options.mask = d(DType::f32, {7});
    EXPECT_TRUE(fails_naming(Attention::plan(ctx, q, k, k, o, {.causal = true, .window = 3}, options), "mask"));
    // ALiBi: one finite slope per query head, not with a mask.
    EXPECT_TRUE(fails_naming(Attention::plan(ctx, q, k, k, o, {.alibi_slopes = alibi_slopes(8)}, options), "mask"));
  }
  EXPECT_TRUE(Attention::plan(ctx, q, k, k, o, {.alibi_slopes = alibi_slopes(8)}).ok());
  EXPECT_TRUE(fails_naming(Attention::plan(ctx, q, k, k, o, {.alibi_slopes = alibi_slopes(2)}), "attrs.alibi_slopes"));
  EXPECT_TRUE(fails_naming(Attention::plan(ctx, q, k, k, o, {.alibi_slopes = {1, 1, 1, kNaN, 1, 1, 1, 1}}), "attrs.alibi_slopes"));
  // Sinks: one finite logit per query head.
  EXPECT_TRUE(fails_naming(Attention::plan(ctx, q, k, k, o, {.sinks = sink_logits(2)}), "attrs.sinks"));
  EXPECT_TRUE(fails_naming(Attention::plan(ctx, q, k, k, o, {.sinks = {1, 1, 1, 1, 1, 1, 1, kInf}}), "attrs.sinks"));
  // softcap: 0, or within [1e-30, 1e30].
  for (float cap : {-1.0f, kInf, kNaN, 1e31f, 1e-31f})
    EXPECT_TRUE(fails_naming(Attention::plan(ctx, q, k, k, o, {.softcap = cap}), "attrs.softcap")) << cap;
  EXPECT_TRUE(Attention::plan(ctx, q, k, k, o, {.softcap = 1e30f}).ok());
  // A mask that does not broadcast to [B, Hq, Sq, Skv], or of a wrong type.
  auto with_mask = [&](TensorDesc m) {
    AttentionOptions options;
    options.mask = m;
    return Attention::plan(ctx, q, k, k, o, {}, options);
  };
  ASSERT_TRUE(with_mask(d(DType::f32, {2, 1, 1, 7})).ok());
  ASSERT_TRUE(with_mask(d(DType::bf16, {5, 7})).ok());
  EXPECT_TRUE(fails_naming(with_mask(d(DType::f32, {2, 8, 5, 6})), "mask"));
  EXPECT_TRUE(fails_naming(with_mask(d(DType::f32, {3, 1, 1, 7})), "mask"));
  EXPECT_TRUE(fails_naming(with_mask(d(DType::f32, {2, 3, 5, 7})), "mask"));
  EXPECT_TRUE(fails_naming(with_mask(d(DType::f32, {1, 2, 1, 1, 7})), "mask"));
  EXPECT_TRUE(fails_naming(with_mask(d(DType::i32, {2, 1, 1, 7})), "mask"));
  // lse: f32 [B, Hq, Sq].
  auto with_lse = [&](TensorDesc l) {
    AttentionOptions options;
    options.lse = l;
    return Attention::plan(ctx, q, k, k, o, {}, options);
  };
  ASSERT_TRUE(with_lse(d(DType::f32, {2, 8, 5})).ok());
  EXPECT_TRUE(fails_naming(with_lse(d(DType::f32, {2, 5, 8})), "lse"));
  EXPECT_TRUE(fails_naming(with_lse(d(DType::bf16, {2, 8, 5})), "lse"));

  // Variable lengths: q [total_q, Hq, D], k, v [total_kv, Hkv, D], lse [Hq, total_q], no mask.
  auto varlen = [&](TensorDesc vq, TensorDesc vk, TensorDesc vo, std::optional<TensorDesc> m = {},
                    std::optional<TensorDesc> l = {}, std::int64_t n = 3) {
    AttentionOptions options;
    options.varlen_batch = n;
    options.mask = m;
    options.lse = l;
    return Attention::plan(ctx, vq, vk, vk, vo, {.causal = true}, options);
  };
  const TensorDesc vq = d(DType::f32, {10, 8, 64}), vk = d(DType::f32, {12, 2, 64});
  ASSERT_TRUE(varlen(vq, vk, vq, {}, d(DType::f32, {8, 10})).ok());
  EXPECT_TRUE(fails_naming(varlen(q, vk, o), "q"));
  EXPECT_TRUE(fails_naming(varlen(vq, k, vq), "k"));
  EXPECT_TRUE(fails_naming(varlen(vq, vk, vq, d(DType::f32, {1, 1, 1, 12})), "mask"));
  EXPECT_TRUE(fails_naming(varlen(vq, vk, vq, {}, d(DType::f32, {2, 8, 5})), "lse"));
  EXPECT_TRUE(fails_naming(varlen(vq, vk, vq, {}, {}, -1), "varlen_batch"));
}

TEST(AttentionErrors, RunChecksCuSeqlens) {
  Context ctx;
  Stream stream(ctx);
  const Tensor q = random_tensor(DType::f32, {10, 4, 32}, 1), k = random_tensor(DType::f32, {12, 2, 32}, 2);
  const Tensor o = zeros(DType::f32, {10, 4, 32});
  AttentionOptions options;
  options.varlen_batch = 3;
  const ops::PlanPtr plan = value_or_die(ops::Attention::plan(ctx, q.desc(), k.desc(), k.desc(), o.desc(), {}, options));
  auto run = [&](const Tensor& cu_q, const Tensor& cu_kv) { return run_plan(ctx, stream, *plan, {q, k, k, cu_q, cu_kv}, {o}); };
  const Tensor good_q = i32_tensor({0, 4, 4, 10}), good_kv = i32_tensor({0, 5, 6, 12});
  const Status ok = run(good_q, good_kv);
  ASSERT_TRUE(ok.ok()) << ok.to_string();
  EXPECT_TRUE(fails_naming(run(i32_tensor({0, 4, 3, 10}), good_kv), "cu_seqlens_q"));   // decreasing
  EXPECT_TRUE(fails_naming(run(i32_tensor({1, 4, 6, 10}), good_kv), "cu_seqlens_q"));   // not from 0
  EXPECT_TRUE(fails_naming(run(good_q, i32_tensor({0, 5, 6, 11})), "cu_seqlens_kv"));  // not to the total
  EXPECT_TRUE(fails_naming(run(good_q, i32_tensor({0, 7, 6, 12})), "cu_seqlens_kv"));  // decreasing
  EXPECT_TRUE(fails_naming(run(good_q, i32_tensor({0, 5, 13, 12})), "cu_seqlens_kv"));  // past the total
  EXPECT_TRUE(fails_naming(run(good_q, i32_tensor({0, 5, 12})), "cu_seqlens_kv"));     // varlen_batch + 1 entries
  Tensor wide = zeros(DType::i64, {4});
  for (int i = 0; i < 4; ++i) wide.data_as<std::int64_t>()[i] = good_q.data_as<std::int32_t>()[i];
  EXPECT_TRUE(fails_naming(run(wide, good_kv), "cu_seqlens_q"));  // i32 only
}

TEST(PagedAttentionErrors, PlanNamesTheArgument) {
  Context ctx;
  auto d = [](DType t, Shape s) { return TensorDesc::contiguous(t, s); };
  std::shared_ptr<const KvCache> cache =
      value_or_die(KvCache::create({.num_blocks = 8, .block_size = 16, .kv_heads = 2, .head_dim = 64}));
  const TensorDesc q = d(DType::f32, {3, 1, 8, 64}), ids = d(DType::i32, {3}), o = q;
  using ops::PagedAttention;
  ASSERT_TRUE(PagedAttention::plan(ctx, cache, q, ids, o, 256).ok());
  EXPECT_TRUE(fails_naming(PagedAttention::plan(ctx, nullptr, q, ids, o, 256), "cache"));
  // q's head dim differs from the cache's; Hq = 3 is not a multiple of the cache's 2 kv heads.
  const TensorDesc q32 = d(DType::f32, {3, 1, 8, 32}), q3 = d(DType::f32, {3, 1, 3, 64});
  EXPECT_TRUE(fails_naming(PagedAttention::plan(ctx, cache, q32, ids, q32, 256), "q"));
  EXPECT_TRUE(fails_naming(PagedAttention::plan(ctx, cache, q3, ids, q3, 256), "q"));
  EXPECT_TRUE(fails_mentioning(PagedAttention::plan(ctx, cache, q3, ids, q3, 256), "head"));
  // Rank 3 is the packed variable-length form (o alike; lse [Hq, total_q]); 2 and 5 are neither.
  const TensorDesc q_rank3 = d(DType::f32, {5, 8, 64});
  EXPECT_TRUE(PagedAttention::plan(ctx, cache, q_rank3, ids, q_rank3, 256).ok());
  EXPECT_TRUE(fails_naming(PagedAttention::plan(ctx, cache, q_rank3, ids, d(DType::f32, {5, 4, 64}), 256), "o"));
  EXPECT_TRUE(fails_naming(PagedAttention::plan(ctx, cache, q_rank3, ids, q_rank3, 256, {}, d(DType::f32, {3, 8, 5})), "lse"));
  EXPECT_TRUE(fails_naming(PagedAttention::plan(ctx, cache, d(DType::f32, {8, 64}), ids, d(DType::f32, {8, 64}), 256), "q"));
  EXPECT_TRUE(fails_naming(PagedAttention::plan(ctx, cache, d(DType::f32, {1, 3, 1, 8, 64}), ids, d(DType::f32, {1, 3, 1, 8, 64}), 256), "q"));
  EXPECT_TRUE(fails_naming(PagedAttention::plan(ctx, cache, d(DType::i8, {3, 1, 8, 64}), ids, o, 256), "q"));
  // seq_ids: i32 [B].
  EXPECT_TRUE(fails_naming(PagedAttention::plan(ctx, cache, q, d(DType::i64, {3}), o, 256), "seq_ids"));
  EXPECT_TRUE(fails_naming(PagedAttention::plan(ctx, cache, q, d(DType::f32, {3}), o, 256), "seq_ids"));
  EXPECT_TRUE(fails_naming(PagedAttention::plan(ctx, cache, q, d(DType::i32, {4}), o, 256), "seq_ids"));
  EXPECT_TRUE(fails_naming(PagedAttention::plan(ctx, cache, q, d(DType::i32, {3, 1}), o, 256), "seq_ids"));
  // o, lse, max_kv_len.
  EXPECT_TRUE(fails_naming(PagedAttention::plan(ctx, cache, q, ids, d(DType::f32, {3, 1, 8, 32}), 256), "o"));
  EXPECT_TRUE(fails_naming(PagedAttention::plan(ctx, cache, q, ids, d(DType::f32, {3, 2, 8, 64}), 256), "o"));
  EXPECT_TRUE(fails_naming(PagedAttention::plan(ctx, cache, q, ids, o, -5), "max_kv_len"));
  ASSERT_TRUE(PagedAttention::plan(ctx, cache, q, ids, o, 256, {}, d(DType::f32, {3, 8, 1})).ok());
  EXPECT_TRUE(fails_naming(PagedAttention::plan(ctx, cache, q, ids, o, 256, {}, d(DType::f32, {3, 1, 8})), "lse"));
  EXPECT_TRUE(fails_naming(PagedAttention::plan(ctx, cache, q, ids, o, 256, {.scale = kNaN}), "scale"));
  EXPECT_TRUE(fails_naming(PagedAttention::plan(ctx, cache, q, ids, o, 256, {.causal = true, .window = -2}), "attrs.window"));
  EXPECT_TRUE(fails_naming(PagedAttention::plan(ctx, cache, q, ids, o, 256, {.window = 2}), "attrs.window"));
  EXPECT_TRUE(fails_naming(PagedAttention::plan(ctx, cache, q, ids, o, 256, {.causal = true, .window = 2}, {}, d(DType::f32, {1})), "mask"));
  EXPECT_TRUE(fails_naming(PagedAttention::plan(ctx, cache, q, ids, o, 256, {.alibi_slopes = alibi_slopes(8)}, {}, d(DType::f32, {1})), "mask"));
  EXPECT_TRUE(fails_naming(PagedAttention::plan(ctx, cache, q, ids, o, 256, {.alibi_slopes = alibi_slopes(4)}), "attrs.alibi_slopes"));
  EXPECT_TRUE(fails_naming(PagedAttention::plan(ctx, cache, q, ids, o, 256, {.alibi_slopes = std::vector<float>(8, kInf)}), "attrs.alibi_slopes"));
  EXPECT_TRUE(fails_naming(PagedAttention::plan(ctx, cache, q, ids, o, 256, {.sinks = sink_logits(9)}), "attrs.sinks"));
  EXPECT_TRUE(fails_naming(PagedAttention::plan(ctx, cache, q, ids, o, 256, {.sinks = std::vector<float>(8, kNaN)}), "attrs.sinks"));
  EXPECT_TRUE(fails_naming(PagedAttention::plan(ctx, cache, q, ids, o, 256, {.softcap = -2.0f}), "attrs.softcap"));
}

TEST(PagedAttentionErrors, RunChecksSequences) {
  Context ctx;
  Stream stream(ctx);
  auto cache = value_or_die(KvCache::create({.num_blocks = 8, .block_size = 16, .kv_heads = 2, .head_dim = 32}));
  const std::vector<Seq> seqs = fill(*cache, DType::f32, {10, 40, 5}, 1);
  const std::int32_t shortseq = seqs[0].id, longseq = seqs[1].id, dead = seqs[2].id;
  ASSERT_TRUE(cache->release(dead).ok());
  const Tensor q = random_tensor(DType::f32, {1, 1, 4, 32}, 2), o = zeros(DType::f32, {1, 1, 4, 32});
  const ops::PlanPtr plan =
      value_or_die(ops::PagedAttention::plan(ctx, cache, q.desc(), TensorDesc::contiguous(DType::i32, {1}), o.desc(), 32));
  auto run = [&](std::int32_t id) { return run_plan(ctx, stream, *plan, {q, i32_tensor({id})}, {o}); };
  const Status ok = run(shortseq);
  ASSERT_TRUE(ok.ok()) << ok.to_string();
  // The message names seq_ids (possibly with the row, "seq_ids[0]").
  EXPECT_TRUE(fails_mentioning(run(999), "seq_ids"));
  EXPECT_TRUE(fails_mentioning(run(-1), "seq_ids"));
  EXPECT_TRUE(fails_mentioning(run(dead), "seq_ids"));
  EXPECT_TRUE(fails_mentioning(run(longseq), "seq_ids"));  // 40 tokens, planned for max_kv_len 32
  // The one-shot function reports unknown ids too.
  EXPECT_FALSE(ops::paged_attention(stream, cache, q, i32_tensor({999}), o).ok());
  EXPECT_FALSE(ops::paged_attention(stream, cache, q, i32_tensor({dead}), o).ok());
  // q's 12 tokens cannot be the last of a sequence of 10 (they were not appended), causal or not.
  const Tensor q12 = random_tensor(DType::f32, {1, 12, 4, 32}, 3), o12 = zeros(DType::f32, {1, 12, 4, 32});
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    const Status s = ops::paged_attention(stream, cache, q12, i32_tensor({shortseq}), o12, {.causal = causal});
    EXPECT_TRUE(fails_mentioning(s, "seq_ids")) << s.to_string();
    EXPECT_NE(s.message().find("fewer than q's 12"), std::string::npos) << s.to_string();
  }
}

}  // namespace
}  // namespace tessera::testing
