// MoE routing: moe_permute against the definition (a stable grouping by
// expert), moe_combine against a weighted sum in double, and a whole MoE
// layer (router, top_k, softmax, permute, gather, per-expert SwiGLU FFNs,
// combine) against the same layer computed token by token in double.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/element.hpp"
#include "support/harness.hpp"

namespace tessera::testing {
namespace {

Tensor index_tensor(DType dt, const Shape& shape, const std::vector<std::int64_t>& values) {
  Tensor t = zeros(dt, shape);
  for (std::size_t i = 0; i < values.size(); ++i) detail::store_int(t.data(), dt, std::int64_t(i), values[i]);
  return t;
}
std::int64_t at(const Tensor& t, std::int64_t i) { return detail::load_index(t.data(), t.dtype(), i); }

// Random expert ids of T tokens x k slots in [0, experts), expert 1 never chosen.
std::vector<std::int64_t> random_ids(std::int64_t tokens, std::int64_t k, std::int64_t experts, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> ids;
  for (std::int64_t i = 0; i < tokens * k; ++i) {
    std::int64_t e = std::int64_t(rng() % std::uint64_t(experts));
    ids.push_back(e == 1 ? 0 : e);
  }
  return ids;
}

class MoeTest : public IsaTest {};

TEST_P(MoeTest, PermuteGroupsPairsByExpert) {
  for (DType dt : {DType::i32, DType::i64})
    for (auto [tokens, k, experts] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{1, 1, 1}, {13, 3, 6}, {200, 8, 64}}) {
      SCOPED_TRACE(fmt::format("{} T {} k {} E {}", to_string(dt), tokens, k, experts));
      const std::vector<std::int64_t> ids = random_ids(tokens, k, experts, std::uint64_t(tokens * k));
      const Tensor experts_t = index_tensor(dt, {tokens, k}, ids);
      Tensor rows = zeros(dt, {tokens * k}), offsets = zeros(DType::i64, {experts + 1}), positions = zeros(dt, {tokens, k});
      ASSERT_TRUE(ops::moe_permute(stream_, experts_t, experts, rows, offsets, positions).ok());
      // Offsets: the prefix sums of the counts; each expert's rows: its pairs in token order.
      std::int64_t p = 0;
      for (std::int64_t e = 0; e < experts; ++e) {
        EXPECT_EQ(at(offsets, e), p) << e;
        for (std::int64_t t = 0; t < tokens; ++t)
          for (std::int64_t j = 0; j < k; ++j)
            if (ids[std::size_t(t * k + j)] == e) {
              EXPECT_EQ(at(rows, p), t) << "row " << p;
              EXPECT_EQ(at(positions, t * k + j), p) << "position of (" << t << ", " << j << ")";
              ++p;
            }
      }
      EXPECT_EQ(at(offsets, experts), tokens * k);
    }
}

// out[t] = sum_j w[t, j] y[pos[t, j]] in double.
Tensor combine_reference(const Tensor& y, const Tensor& w, const Tensor& pos) {
  const std::int64_t tokens = w.dim(0), k = w.dim(1), h = y.dim(1);
  Tensor out = zeros(DType::f32, {tokens, h});
  for (std::int64_t t = 0; t < tokens; ++t)
    for (std::int64_t c = 0; c < h; ++c) {
      double acc = 0.0;
      for (std::int64_t j = 0; j < k; ++j) {
        const std::int64_t r = detail::load_index(pos.data(), pos.dtype(), t * pos.strides()[0] + j * pos.strides()[1]);
        acc += double(detail::load(w.data(), w.dtype(), t * w.strides()[0] + j * w.strides()[1])) *
               double(detail::load(y.data(), y.dtype(), r * y.strides()[0] + c * y.strides()[1]));
      }
      out.data_as<float>()[t * h + c] = float(acc);
    }
  return out;
}

TEST_P(MoeTest, CombineAgainstReference) {
  // Hidden sizes of one, a partial vector, a whole 32-feature step and a
  // tail, a model's; k of 1, 2 and 8; positions repeated; every float type
  // of y and out, bf16 weights; a padded y (the strided row).
  std::uint64_t seed = 1;
  for (DType dt : kFloatTypes)
    for (std::int64_t h : {1, 7, 64, 100, 4096})
      for (std::int64_t k : {1, 2, 8}) {
        SCOPED_TRACE(fmt::format("{} H {} k {}", to_string(dt), h, k));
        const std::int64_t tokens = 13, rows = 40;
        const Tensor y = random_tensor(dt, {rows, h}, seed++);
        const Tensor w = random_tensor(k == 2 ? DType::bf16 : DType::f32, {tokens, k}, seed++, 0.0f, 1.0f);
        std::vector<std::int64_t> pos;
        for (std::int64_t i = 0; i < tokens * k; ++i) pos.push_back((i * 7 + 3) % rows);
        const Tensor positions = index_tensor(k == 8 ? DType::i32 : DType::i64, {tokens, k}, pos);
        // y as given, with gaps between rows, and transposed (a column
        // stride: the reference row); out as given and transposed.
        const Tensor y_t = value_or_die(clone(value_or_die(y.transpose(0, 1))).transpose(0, 1));
        for (const Tensor& y_in : {y, padded_copy(y), y_t}) {
          const bool column_stride = y_in.strides()[1] != 1;
          Tensor out = column_stride ? value_or_die(zeros(dt, {h, tokens}).transpose(0, 1)) : zeros(dt, {tokens, h});
          const ops::PlanPtr plan = value_or_die(ops::MoeCombine::plan(ctx_, y_in.desc(), w.desc(), positions.desc(), out.desc()));
          SCOPED_TRACE(fmt::format("kernel {}", plan->kernel()));
          ASSERT_TRUE(plan->run(stream_, {y_in, w, positions}, {out}).ok());
          EXPECT_TRUE(close(out, combine_reference(y_in, w, positions), tolerance_for(dt, k)));
        }
      }
}

TEST_P(MoeTest, CombineOfNoSlotsOrNoTokens) {
  // k = 0 writes zeros; no tokens writes nothing.
  const Tensor y = random_tensor(DType::f32, {4, 24}, 90);
  Tensor out = random_tensor(DType::f32, {3, 24}, 91);
  ASSERT_TRUE(ops::moe_combine(stream_, y, zeros(DType::f32, {3, 0}), zeros(DType::i64, {3, 0}), out).ok());
  ASSERT_TRUE(stream_.synchronize().ok());
  EXPECT_TRUE(identical(out, zeros(DType::f32, {3, 24})));
  Tensor none = zeros(DType::f32, {0, 24});
  EXPECT_TRUE(ops::moe_combine(stream_, y, zeros(DType::f32, {0, 2}), zeros(DType::i64, {0, 2}), none).ok());
}

// A whole MoE layer (Mixtral's form: softmax over the top-k router logits,
// SwiGLU experts) against the same layer token by token in double.
TEST_P(MoeTest, LayerMatchesTokenByTokenReference) {
  const std::int64_t tokens = 37, hidden = 64, ff = 96, experts = 8, k = 2;
  const Tensor x = random_tensor(DType::f32, {tokens, hidden}, 100);
  const Tensor router = random_tensor(DType::f32, {hidden, experts}, 101);
  std::vector<Tensor> w1, w3, w2;  // gate and up [H, FF], down [FF, H]
  for (std::int64_t e = 0; e < experts; ++e) {
    w1.push_back(random_tensor(DType::f32, {hidden, ff}, 200 + std::uint64_t(e), -0.2f, 0.2f));
    w3.push_back(random_tensor(DType::f32, {hidden, ff}, 300 + std::uint64_t(e), -0.2f, 0.2f));
    w2.push_back(random_tensor(DType::f32, {ff, hidden}, 400 + std::uint64_t(e), -0.2f, 0.2f));
  }

  // Tessera.
  Tensor logits = zeros(DType::f32, {tokens, experts}), top = zeros(DType::f32, {tokens, k}), weights = zeros(DType::f32, {tokens, k});
  Tensor ids = zeros(DType::i64, {tokens, k});
  ASSERT_TRUE(ops::matmul(stream_, x, router, logits).ok());
  ASSERT_TRUE(ops::top_k(stream_, logits, top, ids, {.k = k}).ok());
  ASSERT_TRUE(ops::softmax(stream_, top, weights).ok());
  Tensor rows = zeros(DType::i64, {tokens * k}), offsets = zeros(DType::i64, {experts + 1}), positions = zeros(DType::i64, {tokens, k});
  ASSERT_TRUE(ops::moe_permute(stream_, ids, experts, rows, offsets, positions).ok());
  Tensor x_perm = zeros(DType::f32, {tokens * k, hidden}), y = zeros(DType::f32, {tokens * k, hidden});
  ASSERT_TRUE(ops::embedding(stream_, x, rows, x_perm).ok());
  ASSERT_TRUE(stream_.synchronize().ok());
  for (std::int64_t e = 0; e < experts; ++e) {
    const std::int64_t r0 = at(offsets, e), r1 = at(offsets, e + 1);
    if (r0 == r1) continue;
    const Tensor xe = value_or_die(x_perm.slice(0, r0, r1)), ye = value_or_die(y.slice(0, r0, r1));
    Tensor gate = zeros(DType::f32, {r1 - r0, ff}), up = zeros(DType::f32, {r1 - r0, ff}), act = zeros(DType::f32, {r1 - r0, ff});
    ASSERT_TRUE(ops::matmul(stream_, xe, w1[std::size_t(e)], gate).ok());
    ASSERT_TRUE(ops::matmul(stream_, xe, w3[std::size_t(e)], up).ok());
    ASSERT_TRUE(ops::swiglu(stream_, gate, up, act).ok());
    ASSERT_TRUE(ops::matmul(stream_, act, w2[std::size_t(e)], ye).ok());
  }
  Tensor out = zeros(DType::f32, {tokens, hidden});
  ASSERT_TRUE(ops::moe_combine(stream_, y, weights, positions, out).ok());
  ASSERT_TRUE(stream_.synchronize().ok());

  // Token by token in double: logits, the top k (ties to the lower index), softmax over them, the experts' SwiGLU FFNs.
  const auto f = [](const Tensor& t, std::int64_t i, std::int64_t j) { return double(t.data_as<float>()[i * t.dim(1) + j]); };
  Tensor ref = zeros(DType::f32, {tokens, hidden});
  for (std::int64_t t = 0; t < tokens; ++t) {
    std::vector<std::pair<double, std::int64_t>> l;
    for (std::int64_t e = 0; e < experts; ++e) {
      double s = 0;
      for (std::int64_t c = 0; c < hidden; ++c) s += f(x, t, c) * f(router, c, e);
      l.push_back({-s, e});
    }
    std::stable_sort(l.begin(), l.end(), [](auto a, auto b) { return a.first < b.first; });
    double denominator = 0;
    for (std::int64_t j = 0; j < k; ++j) denominator += std::exp(-l[std::size_t(j)].first + l[0].first);
    for (std::int64_t j = 0; j < k; ++j) {
      const std::int64_t e = l[std::size_t(j)].second;
      const double w = std::exp(-l[std::size_t(j)].first + l[0].first) / denominator;
      std::vector<double> a(static_cast<std::size_t>(ff));
      for (std::int64_t i = 0; i < ff; ++i) {
        double g = 0, u = 0;
        for (std::int64_t c = 0; c < hidden; ++c) g += f(x, t, c) * f(w1[std::size_t(e)], c, i), u += f(x, t, c) * f(w3[std::size_t(e)], c, i);
        a[std::size_t(i)] = g / (1 + std::exp(-g)) * u;
      }
      for (std::int64_t c = 0; c < hidden; ++c) {
        double o = 0;
        for (std::int64_t i = 0; i < ff; ++i) o += a[std::size_t(i)] * f(w2[std::size_t(e)], i, c);
        ref.data_as<float>()[t * hidden + c] += float(w * o);
      }
    }
  }
  EXPECT_TRUE(close(out, ref, tolerance_for(DType::f32, hidden + ff)));
}

INSTANTIATE_TEST_SUITE_P(Isa, MoeTest, ::testing::ValuesIn(isa_levels()), isa_name);

TEST(MoeErrors, PermuteNamesTheArgument) {
  Context ctx;
  Stream stream(ctx);
  const TensorDesc ids = TensorDesc::contiguous(DType::i32, {4, 2}), rows = TensorDesc::contiguous(DType::i64, {8});
  const TensorDesc offsets = TensorDesc::contiguous(DType::i64, {5}), positions = TensorDesc::contiguous(DType::i64, {4, 2});
  EXPECT_TRUE(ops::MoePermute::plan(ctx, ids, 4, rows, offsets, positions).ok());
  EXPECT_TRUE(fails_naming(ops::MoePermute::plan(ctx, ids, 0, rows, offsets, positions), "num_experts"));
  EXPECT_TRUE(fails_naming(ops::MoePermute::plan(ctx, TensorDesc::contiguous(DType::f32, {4, 2}), 4, rows, offsets, positions), "experts"));
  EXPECT_TRUE(fails_naming(ops::MoePermute::plan(ctx, TensorDesc::contiguous(DType::i32, {8}), 4, rows, offsets, positions), "experts"));
  EXPECT_TRUE(fails_naming(ops::MoePermute::plan(ctx, ids, 4, TensorDesc::contiguous(DType::i64, {7}), offsets, positions), "rows"));
  EXPECT_TRUE(fails_naming(ops::MoePermute::plan(ctx, ids, 4, rows, TensorDesc::contiguous(DType::i64, {4}), positions), "offsets"));
  EXPECT_TRUE(fails_naming(ops::MoePermute::plan(ctx, ids, 4, rows, offsets, TensorDesc::contiguous(DType::f32, {4, 2})), "positions"));
  // An expert id out of range: named with its value, nothing written.
  const Tensor bad = index_tensor(DType::i32, {4, 2}, {0, 1, 2, 3, 4, 0, 1, 2});
  Tensor r = zeros(DType::i64, {8}), o = zeros(DType::i64, {5}), p = zeros(DType::i64, {4, 2});
  EXPECT_TRUE(fails_naming(ops::moe_permute(stream, bad, 4, r, o, p), "experts"));
  EXPECT_TRUE(identical(o, zeros(DType::i64, {5})));
}

TEST(MoeErrors, CombineNamesTheArgument) {
  Context ctx;
  Stream stream(ctx);
  const TensorDesc y = TensorDesc::contiguous(DType::f32, {10, 16}), w = TensorDesc::contiguous(DType::f32, {4, 2});
  const TensorDesc pos = TensorDesc::contiguous(DType::i64, {4, 2}), out = TensorDesc::contiguous(DType::f32, {4, 16});
  EXPECT_TRUE(ops::MoeCombine::plan(ctx, y, w, pos, out).ok());
  EXPECT_TRUE(fails_naming(ops::MoeCombine::plan(ctx, TensorDesc::contiguous(DType::i32, {10, 16}), w, pos, out), "y"));
  EXPECT_TRUE(fails_naming(ops::MoeCombine::plan(ctx, y, TensorDesc::contiguous(DType::f32, {4}), pos, out), "weights"));
  EXPECT_TRUE(fails_naming(ops::MoeCombine::plan(ctx, y, w, TensorDesc::contiguous(DType::i64, {4, 3}), out), "positions"));
  EXPECT_TRUE(fails_naming(ops::MoeCombine::plan(ctx, y, w, TensorDesc::contiguous(DType::f32, {4, 2}), out), "positions"));
  EXPECT_TRUE(fails_naming(ops::MoeCombine::plan(ctx, y, w, pos, TensorDesc::contiguous(DType::f32, {4, 15})), "out"));
  // A position past y's rows; out over y.
  const Tensor yt = random_tensor(DType::f32, {10, 16}, 1), wt = random_tensor(DType::f32, {4, 2}, 2);
  Tensor o = zeros(DType::f32, {4, 16});
  EXPECT_TRUE(fails_naming(ops::moe_combine(stream, yt, wt, index_tensor(DType::i64, {4, 2}, {0, 1, 2, 3, 4, 5, 6, 10}), o), "positions"));
  EXPECT_TRUE(identical(o, zeros(DType::f32, {4, 16})));
  EXPECT_TRUE(fails_naming(ops::moe_combine(stream, yt, wt, index_tensor(DType::i64, {4, 2}, {0, 1, 2, 3, 4, 5, 6, 7}),
                                            value_or_die(yt.slice(0, 0, 4))),
                           "out"));
}

}  // namespace
}  // namespace tessera::testing
