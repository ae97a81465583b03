// TopK against a reference written here: each row's (value, index) pairs
// stably sorted, in double, NaN above every number, then the first k. The
// op's values must be the chosen elements themselves (bit for bit) and its
// indices exactly the reference's, at every ISA level and float dtype.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/element.hpp"
#include "support/harness.hpp"

namespace tessera::testing {
namespace {

using ops::TopKAttrs;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// The reference: values and indices (i64) of x's top k along `axis`, contiguous.
std::pair<Tensor, Tensor> reference(const Tensor& x, const TopKAttrs& attrs) {
  const int rank = x.rank(), axis = attrs.axis < 0 ? attrs.axis + rank : attrs.axis;
  Shape out_shape = x.shape();
  out_shape[axis] = attrs.k;
  Tensor values = zeros(x.dtype(), out_shape), indices = zeros(DType::i64, out_shape);
  const std::int64_t length = x.dim(axis), es = bytes_of(x.dtype());
  // Each row: every index of the other dims, the axis's index 0.
  const std::int64_t rows = length == 0 ? 0 : x.numel() / length;
  const Strides o_strides = values.strides();  // indices' too: both contiguous
  for (std::int64_t row = 0; row < rows; ++row) {
    std::int64_t rem = row, x_off = 0, o_off = 0;
    for (int d = rank - 1; d >= 0; --d) {
      if (d == axis) continue;
      const std::int64_t at = rem % x.dim(d);
      rem /= x.dim(d);
      x_off += at * x.strides()[d], o_off += at * o_strides[d];
    }
    std::vector<std::int64_t> order;
    for (std::int64_t r = 0; r < length; ++r) order.push_back(r);
    const auto value = [&](std::int64_t r) { return double(detail::load(x.data(), x.dtype(), x_off + r * x.strides()[axis])); };
    // Sort keys (NaN above +inf, -0 as +0), ascending; a stable sort keeps equal keys in index order.
    const auto key = [&](std::int64_t r) {
      const double v = value(r);
      const std::pair<bool, double> above_numbers{std::isnan(v), std::isnan(v) || v == 0.0 ? 0.0 : v};
      return attrs.largest ? std::pair{!above_numbers.first, -above_numbers.second} : above_numbers;
    };
    std::stable_sort(order.begin(), order.end(), [&](std::int64_t p, std::int64_t q) { return key(p) < key(q); });
    for (std::int64_t i = 0; i < attrs.k; ++i) {
      const std::int64_t r = order[std::size_t(i)];
      std::memcpy(static_cast<char*>(values.data()) + (o_off + i * o_strides[axis]) * es,
                  static_cast<const char*>(x.data()) + (x_off + r * x.strides()[axis]) * es, std::size_t(es));
      indices.data_as<std::int64_t>()[o_off + i * o_strides[axis]] = r;
    }
  }
  return {values, indices};
}

class TopKTest : public IsaTest {
 protected:
  // Runs the op on x (any view) into NaN-filled outputs and compares with the reference.
  void check(const Tensor& x, const TopKAttrs& attrs, DType index_dtype = DType::i64) {
    SCOPED_TRACE(fmt::format("x {} {} k {} axis {} largest {} indices {}", x.shape().to_string(), to_string(x.dtype()), attrs.k,
                             attrs.axis, attrs.largest, to_string(index_dtype)));
    const int axis = attrs.axis < 0 ? attrs.axis + x.rank() : attrs.axis;
    Shape shape = x.shape();
    shape[axis] = attrs.k;
    Tensor values = zeros(x.dtype(), shape), indices = zeros(index_dtype, shape);
    for (std::int64_t i = 0; i < values.numel(); ++i) detail::store(values.data(), values.dtype(), i, kNaN);
    for (std::int64_t i = 0; i < indices.numel(); ++i) detail::store_int(indices.data(), index_dtype, i, -1);
    const ops::PlanPtr plan = value_or_die(ops::TopK::plan(ctx_, x.desc(), values.desc(), indices.desc(), attrs));
    SCOPED_TRACE(fmt::format("kernel {}", plan->kernel()));
    const Status s = plan->run(stream_, {x}, {values, indices});
    ASSERT_TRUE(s.ok()) << s.to_string();
    const auto [ref_values, ref_indices] = reference(x, attrs);
    EXPECT_TRUE(identical(values, ref_values)) << "values";
    for (std::int64_t i = 0; i < indices.numel(); ++i) {
      const std::int64_t got = detail::load_index(indices.data(), index_dtype, i), want = ref_indices.data_as<std::int64_t>()[i];
      if (got != want) {
        ADD_FAILURE() << "indices[" << i << "] = " << got << ", expected " << want;
        break;
      }
    }
  }
};

TEST_P(TopKTest, ShapesAndDtypes) {
  // Rows of one element; odd lengths around the filter's 16; k of 1, a few,
  // half and all of a row; MoE routing (8 of 64 experts) and sampling
  // (top 50 of a 32000-token vocabulary).
  std::uint64_t seed = 1;
  for (DType dt : kFloatTypes)
    for (bool largest : {true, false}) {
      check(random_tensor(dt, {1, 1}, seed++), {.k = 1, .largest = largest});
      for (std::int64_t len : {3, 15, 16, 17, 33, 255, 1000})
        for (std::int64_t k : {std::int64_t(1), std::min<std::int64_t>(5, len), len / 2, len})
          check(random_tensor(dt, {3, len}, seed++), {.k = k, .largest = largest});
      check(random_tensor(dt, {37, 64}, seed++), {.k = 8, .largest = largest});
      // The filter at short lengths (a NaN in a row sends it there from the short path).
      for (std::int64_t len : {15, 16, 17, 33}) {
        Tensor x = random_tensor(dt, {3, len}, seed++);
        detail::store(x.data(), dt, len + 2, kNaN);  // row 1
        for (std::int64_t k : {std::int64_t(1), std::int64_t(5), len}) check(x, {.k = k, .largest = largest});
      }
      check(random_tensor(dt, {2, 32000}, seed++, -10.0f, 10.0f), {.k = 50, .largest = largest});
    }
}

TEST_P(TopKTest, AxesAndViews) {
  // The first and a middle axis (strided rows), a permuted and a padded x,
  // i32 indices, k = 0, and outputs with gaps between rows.
  check(random_tensor(DType::f32, {100, 7}, 20), {.k = 3, .axis = 0});
  check(random_tensor(DType::bf16, {2, 50, 3}, 21), {.k = 10, .axis = 1, .largest = false});
  check(random_tensor(DType::f32, {2, 50, 3}, 22), {.k = 4, .axis = -2});
  check(value_or_die(random_tensor(DType::f32, {40, 6}, 23).permute({1, 0})), {.k = 5});
  check(padded_copy(random_tensor(DType::f16, {5, 300}, 24)), {.k = 20});
  check(random_tensor(DType::f32, {4, 100}, 25), {.k = 7}, DType::i32);
  check(random_tensor(DType::f32, {4, 100}, 26), {.k = 0});
  check(random_tensor(DType::f32, {0, 100}, 27), {.k = 3});
  const Tensor x = random_tensor(DType::f32, {6, 90}, 28);
  Tensor values = padded_copy(zeros(DType::f32, {6, 9})), indices = padded_copy(zeros(DType::i64, {6, 9}));
  ASSERT_TRUE(ops::top_k(stream_, x, values, indices, {.k = 9}).ok());
  const auto [ref_values, ref_indices] = reference(x, {.k = 9});
  EXPECT_TRUE(identical(clone(values), ref_values));
  EXPECT_TRUE(identical(clone(indices), ref_indices));
}

TEST_P(TopKTest, TiesNaNsAndOrder) {
  // Few distinct values (ties everywhere: lower index first), -0 and +0,
  // NaNs (above every number) and infinities; rows in ascending and
  // descending order, where every element enters the filter's heap or none does.
  std::uint64_t seed = 40;
  for (DType dt : kFloatTypes)
    for (bool largest : {true, false}) {
      Tensor ties = random_tensor(dt, {4, 500}, seed++, 0.0f, 4.0f);
      for (std::int64_t i = 0; i < ties.numel(); ++i)
        detail::store(ties.data(), dt, i, std::floor(detail::load(ties.data(), dt, i)));
      check(ties, {.k = 30, .largest = largest});
      Tensor special = random_tensor(dt, {3, 200}, seed++);
      const float kSpecial[] = {kNaN, kInf, -kInf, 0.0f, -0.0f};
      for (std::int64_t i = 0; i < special.numel(); i += 7) detail::store(special.data(), dt, i, kSpecial[(i / 7) % 5]);
      for (std::int64_t k : {1, 10, 60, 200}) check(special, {.k = k, .largest = largest});
      // Infinities and zeros of both signs without NaN (rows whose k passes
      // reach the -inf elements), lengths past whole vectors.
      Tensor infs = random_tensor(dt, {5, 37}, seed++);
      for (std::int64_t i = 0; i < infs.numel(); i += 3) detail::store(infs.data(), dt, i, kSpecial[1 + (i / 3) % 4]);
      for (std::int64_t k : {5, 30, 37}) check(infs, {.k = k, .largest = largest});
      // Mostly the worst infinity, so that a small k reaches it: ties among infinities.
      Tensor worst_inf = random_tensor(dt, {3, 21}, seed++);
      for (std::int64_t i = 0; i < worst_inf.numel(); ++i)
        if (i % 4) detail::store(worst_inf.data(), dt, i, largest ? -kInf : kInf);
      for (std::int64_t k : {8, 16}) check(worst_inf, {.k = k, .largest = largest});
      Tensor all_nan = zeros(dt, {2, 40});
      for (std::int64_t i = 0; i < all_nan.numel(); ++i) detail::store(all_nan.data(), dt, i, i % 3 ? kNaN : float(i));
      check(all_nan, {.k = 20, .largest = largest});
      Tensor ramp = zeros(dt, {2, 3000});
      for (std::int64_t i = 0; i < ramp.numel(); ++i) detail::store(ramp.data(), dt, i, float(i % 3000) * (i < 3000 ? 1.0f : -1.0f));
      check(ramp, {.k = 100, .largest = largest});
    }
}

TEST_P(TopKTest, OneShotPlansByAttrs) {
  // The one-shot's plans are keyed by the axis and the direction: on a
  // square x with k its side, the outputs' descs are the same for all.
  const Tensor x = random_tensor(DType::f32, {4, 4}, 60);
  for (const TopKAttrs& attrs : {TopKAttrs{.k = 4}, TopKAttrs{.k = 4, .largest = false}, TopKAttrs{.k = 4, .axis = 0}}) {
    Tensor values = zeros(DType::f32, {4, 4}), indices = zeros(DType::i64, {4, 4});
    ASSERT_TRUE(ops::top_k(stream_, x, values, indices, attrs).ok());
    const auto [ref_values, ref_indices] = reference(x, attrs);
    EXPECT_TRUE(identical(values, ref_values)) << attrs.largest << attrs.axis;
    EXPECT_TRUE(identical(indices, ref_indices)) << attrs.largest << attrs.axis;
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, TopKTest, ::testing::ValuesIn(isa_levels()), isa_name);

TEST(TopKErrors, PlanNamesTheArgument) {
  Context ctx;
  const TensorDesc x = TensorDesc::contiguous(DType::f32, {4, 10});
  const TensorDesc v = TensorDesc::contiguous(DType::f32, {4, 3}), i = TensorDesc::contiguous(DType::i64, {4, 3});
  EXPECT_TRUE(ops::TopK::plan(ctx, x, v, i, {.k = 3}).ok());
  EXPECT_TRUE(fails_naming(ops::TopK::plan(ctx, x, v, i, {.k = 11}), "k"));
  EXPECT_TRUE(fails_naming(ops::TopK::plan(ctx, x, v, i, {.k = -1}), "k"));
  EXPECT_TRUE(fails_naming(ops::TopK::plan(ctx, x, v, i, {.k = 3, .axis = 2}), "axis"));
  EXPECT_TRUE(fails_naming(ops::TopK::plan(ctx, x, v, i, {.k = 3, .axis = -3}), "axis"));
  EXPECT_TRUE(fails_naming(ops::TopK::plan(ctx, x, v, i, {.k = 2}), "values"));
  EXPECT_TRUE(fails_naming(ops::TopK::plan(ctx, x, TensorDesc::contiguous(DType::bf16, {4, 3}), i, {.k = 3}), "values"));
  EXPECT_TRUE(fails_naming(ops::TopK::plan(ctx, x, v, TensorDesc::contiguous(DType::f32, {4, 3}), {.k = 3}), "indices"));
  EXPECT_TRUE(fails_naming(ops::TopK::plan(ctx, x, v, TensorDesc::contiguous(DType::i64, {4, 4}), {.k = 3}), "indices"));
  EXPECT_TRUE(fails_naming(ops::TopK::plan(ctx, TensorDesc::contiguous(DType::i32, {4, 10}), v, i, {.k = 3}), "x"));
  EXPECT_TRUE(fails_naming(ops::TopK::plan(ctx, TensorDesc::contiguous(DType::f32, {}), v, i, {.k = 1}), "x"));
  // i32 indices up to 2^31 - 1: rows of up to 2^31 elements.
  const std::int64_t huge = std::int64_t(1) << 31;
  const TensorDesc v1 = TensorDesc::contiguous(DType::f32, {1}), i1 = TensorDesc::contiguous(DType::i32, {1});
  EXPECT_TRUE(ops::TopK::plan(ctx, TensorDesc::contiguous(DType::f32, {huge}), v1, i1, {.k = 1}).ok());
  EXPECT_TRUE(fails_naming(ops::TopK::plan(ctx, TensorDesc::contiguous(DType::f32, {huge + 1}), v1, i1, {.k = 1}), "indices"));
  const TensorDesc broadcast{DType::f32, {4, 3}, {0, 1}};
  EXPECT_TRUE(fails_naming(ops::TopK::plan(ctx, x, broadcast, i, {.k = 3}), "values"));
}

TEST(TopKErrors, RunChecksTensorsAndOverlap) {
  Context ctx;
  Stream stream(ctx);
  Tensor x = random_tensor(DType::f32, {4, 8}, 70);
  Tensor indices = zeros(DType::i64, {4, 2});
  // values inside x's memory.
  EXPECT_TRUE(fails_naming(ops::top_k(stream, x, value_or_die(x.slice(1, 0, 2)), indices, {.k = 2}), "values"));
  Tensor values = zeros(DType::f32, {4, 2});
  auto plan = value_or_die(ops::TopK::plan(ctx, x.desc(), values.desc(), indices.desc(), {.k = 2}));
  EXPECT_TRUE(fails_naming(plan->run(stream, {zeros(DType::f32, {4, 7})}, {values, indices}), "x"));
  EXPECT_TRUE(fails_naming(plan->run(stream, {x}, {values, zeros(DType::i32, {4, 2})}), "indices"));
  // values over indices' memory.
  Tensor shared = zeros(DType::i64, {4, 2});
  const Tensor alias = value_or_die(Tensor::wrap(shared.data(), TensorDesc::contiguous(DType::f32, {4, 2})));
  EXPECT_TRUE(fails_naming(plan->run(stream, {x}, {alias, shared}), "indices"));
}

}  // namespace
}  // namespace tessera::testing
