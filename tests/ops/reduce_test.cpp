#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/element.hpp"
#include "support/harness.hpp"

namespace tessera::testing {
namespace {

using ops::ReduceOp;

const ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::mean,       ReduceOp::max,     ReduceOp::min,        ReduceOp::prod,
                         ReduceOp::l1,  ReduceOp::l2,         ReduceOp::sum_square, ReduceOp::log_sum, ReduceOp::log_sum_exp};
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// x for `op`: products of factors near 1 (thousands of them stay within
// f32's range), log_sum of positive sums, others in [-2, 2].
Tensor input_for(ReduceOp op, DType dt, const Shape& shape, std::uint64_t seed) {
  if (op == ReduceOp::prod) return random_tensor(dt, shape, seed, 0.95f, 1.05f);
  if (op == ReduceOp::log_sum) return random_tensor(dt, shape, seed, 0.0f, 2.0f);
  return random_tensor(dt, shape, seed, -2.0f, 2.0f);
}

// Non-negative dims for axes (negative from the end); all of x for none.
std::vector<int> positive(const std::vector<int>& axes, int rank) {
  std::vector<int> out;
  for (int a : axes) out.push_back(a < 0 ? a + rank : a);
  if (axes.empty())
    for (int i = 0; i < rank; ++i) out.push_back(i);
  return out;
}

bool has(const std::vector<int>& dims, int i) { return std::find(dims.begin(), dims.end(), i) != dims.end(); }

// x's shape with the axes removed, or kept as 1.
Shape reduced(const Shape& x, const std::vector<int>& axes, bool keep_dims) {
  const std::vector<int> dims = positive(axes, x.rank());
  Shape s;
  for (int i = 0; i < x.rank(); ++i) {
    if (!has(dims, i))
      s.push_back(x[i]);
    else if (keep_dims)
      s.push_back(1);
  }
  return s;
}

// The count of elements each output reduces.
std::int64_t reduced_count(const Shape& x, const std::vector<int>& axes) {
  std::int64_t n = 1;
  for (int d : positive(axes, x.rank())) n *= x[d];
  return n;
}

// One output of `op` over its elements, in f64 as the ops define it.
double naive_value(ReduceOp op, const std::vector<double>& v) {
  const auto sum_of = [&](auto term) {
    double acc = 0.0;
    for (double e : v) acc += term(e);
    return acc;
  };
  const auto any_nan = std::any_of(v.begin(), v.end(), [](double e) { return std::isnan(e); });
  switch (op) {
    case ReduceOp::mean: return sum_of([](double e) { return e; }) / double(v.size());
    case ReduceOp::max:
    case ReduceOp::min: {
      if (any_nan) return NAN;
      double acc = op == ReduceOp::max ? -INFINITY : INFINITY;
      for (double e : v) acc = op == ReduceOp::max ? std::max(acc, e) : std::min(acc, e);
      return acc;
    }
    case ReduceOp::prod: {
      double acc = 1.0;
      for (double e : v) acc *= e;
      return acc;
    }
    case ReduceOp::l1: return sum_of([](double e) { return std::fabs(e); });
    case ReduceOp::l2: return std::sqrt(sum_of([](double e) { return e * e; }));
    case ReduceOp::sum_square: return sum_of([](double e) { return e * e; });
    case ReduceOp::log_sum: return std::log(sum_of([](double e) { return e; }));
    case ReduceOp::log_sum_exp: {
      if (any_nan) return NAN;
      const double top = v.empty() ? -INFINITY : *std::max_element(v.begin(), v.end());
      if (std::isinf(top)) return top;
      return top + std::log(sum_of([&](double e) { return std::exp(e - top); }));
    }
    default: return sum_of([](double e) { return e; });
  }
}

// x reduced over `axes` in f64 by a plain loop, as f32 y (keep_dims: false).
Tensor naive_reduce(const Tensor& x, const std::vector<int>& axes, ReduceOp op) {
  const Tensor dense = value_or_die(x.contiguous());
  const std::vector<int> dims = positive(axes, x.rank());
  const Shape kept = reduced(x.shape(), axes, false);
  std::vector<std::vector<double>> elements(std::size_t(TensorDesc::contiguous(DType::f32, kept).numel()));
  for (std::int64_t i = 0; i < dense.numel(); ++i) {
    std::int64_t rest = i, out = 0, out_stride = 1;
    for (int d = x.rank() - 1; d >= 0; --d) {
      const std::int64_t c = rest % x.dim(d);
      rest /= x.dim(d);
      if (!has(dims, d)) out += c * out_stride, out_stride *= x.dim(d);
    }
    elements[std::size_t(out)].push_back(detail::load(dense.data(), dense.dtype(), i));
  }
  Tensor y = zeros(DType::f32, kept);
  for (std::size_t j = 0; j < elements.size(); ++j) detail::store(y.data(), DType::f32, std::int64_t(j), float(naive_value(op, elements[j])));
  return y;
}

class ReduceTest : public IsaTest {
 protected:
  // Reduces x at this ISA and at scalar into fresh outputs, compares them,
  // and returns this ISA's result.
  Tensor expect_matches_reference(const Tensor& x, const ops::ReduceAttrs& attrs) {
    const Shape ys = reduced(x.shape(), attrs.axes, attrs.keep_dims);
    Tensor y = zeros(x.dtype(), ys), ref = zeros(x.dtype(), ys);
    EXPECT_TRUE(ops::reduce(stream_, x, y, attrs).ok());
    EXPECT_TRUE(ops::reduce(ref_stream_, x, ref, attrs).ok());
    EXPECT_TRUE(close(y, ref, tolerance_for(x.dtype(), reduced_count(x.shape(), attrs.axes))));
    return y;
  }

  // y (any float dtype, keep_dims or not) against naive_reduce.
  ::testing::AssertionResult matches_naive(const Tensor& y, const Tensor& x, const std::vector<int>& axes, ReduceOp op) {
    const Tensor want = naive_reduce(x, axes, op);
    Tensor got = zeros(DType::f32, want.shape());
    if (Status st = ops::cast(ref_stream_, value_or_die(y.reshape(want.shape())), got); !st.ok())
      return ::testing::AssertionFailure() << st.to_string();
    return close(got, want, tolerance_for(y.dtype(), reduced_count(x.shape(), axes)));
  }
};

// Every op and dtype, the axis first, in the middle, last and negative, over
// minimum, odd, typical (tokens x hidden) and large shapes; the larger ones
// cross the column kernels' chunks of outputs (512 at AVX-512, 4096 at
// AVX2) and split across the pool; lengths past and between the AVX2 column
// kernel's groups of 4 rows.
TEST_P(ReduceTest, MatchesReference) {
  struct Case {
    Shape shape;
    std::vector<int> axes;
  };
  const Case cases[] = {
      {{1}, {0, -1}},
      {{1, 1, 1}, {1}},
      {{3, 5, 7}, {0, 1, 2, -1, -3}},
      {{2, 33, 1000}, {0, 1, -1}},
      {{16, 4096}, {0, -1}},
      {{8, 300, 513}, {0, 1, 2}},
      {{37, 5000}, {0}},
  };
  for (ReduceOp op : kOps)
    for (DType dt : kFloatTypes)
      for (const Case& c : cases)
        for (int axis : c.axes) {
          SCOPED_TRACE(fmt::format("{} {} {} axis={}", ops::to_string(op), to_string(dt), c.shape.to_string(), axis));
          expect_matches_reference(input_for(op, dt, c.shape, 1), {.op = op, .axes = {axis}});
        }
}

TEST_P(ReduceTest, KeepDimsOnlyChangesTheShape) {
  for (ReduceOp op : kOps)
    for (int axis : {0, 1, 2}) {
      SCOPED_TRACE(fmt::format("{} axis={}", ops::to_string(op), axis));
      const Tensor x = input_for(op, DType::f32, {3, 5, 70}, 2);
      const Tensor kept = expect_matches_reference(x, {.op = op, .axes = {axis}, .keep_dims = true});
      const Tensor flat = expect_matches_reference(x, {.op = op, .axes = {axis}});
      EXPECT_EQ(kept.dim(axis), 1);
      EXPECT_TRUE(close(value_or_die(kept.reshape(flat.shape())), flat, tolerance_for(DType::f32, 0)));
    }
}

// Row gaps, a transposed view, a strided slice and a broadcast (stride 0)
// input; and an output with gaps. Each also equals the reduction of a
// contiguous copy.
TEST_P(ReduceTest, StridedInputsAndOutputs) {
  for (ReduceOp op : kOps) {
    const Tensor base = input_for(op, DType::f32, {9, 17, 33}, 3);
    const Tensor views[] = {
        padded_copy(base),
        value_or_die(base.permute({2, 0, 1})),
        value_or_die(base.slice(2, 1, 33, 2)),
        value_or_die(input_for(op, DType::f32, {1, 17, 33}, 4).expand({9, 17, 33})),
    };
    for (const Tensor& x : views)
      for (int axis : {0, 1, 2}) {
        SCOPED_TRACE(fmt::format("{} {} axis={}", ops::to_string(op), x.desc().to_string(), axis));
        const Tensor y = expect_matches_reference(x, {.op = op, .axes = {axis}});
        Tensor dense = zeros(DType::f32, y.shape());
        ASSERT_TRUE(ops::reduce(stream_, value_or_die(x.contiguous()), dense, {.op = op, .axes = {axis}}).ok());
        EXPECT_TRUE(close(y, dense, tolerance_for(DType::f32, x.dim(axis))));
      }
  }
  // y with row gaps.
  const Tensor base = random_tensor(DType::f32, {9, 17, 33}, 3);
  Tensor y = padded_copy(zeros(DType::f32, {9, 17})), ref = zeros(DType::f32, {9, 17});
  ASSERT_TRUE(ops::reduce(stream_, base, y, {.op = ReduceOp::sum, .axes = {2}}).ok());
  ASSERT_TRUE(ops::reduce(ref_stream_, base, ref, {.op = ReduceOp::sum, .axes = {2}}).ok());
  EXPECT_TRUE(close(y, ref, tolerance_for(DType::f32, 33)));
}

// Every op against the plain f64 loop on rows and columns holding NaN (first,
// middle, in a vector tail), -inf and +inf; NaN propagates through every op.
// max and min propagate NaN wherever it sits, including before larger
// values; sum and mean propagate NaN and Inf by arithmetic; a row of -inf
// has max and min -inf, a row holding +inf has min below it; log-sum-exp
// of -infs is -inf, with a +inf it is +inf.
TEST_P(ReduceTest, NaNAndInfinities) {
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(to_string(dt));
    const std::int64_t cols = 37;
    Tensor x = random_tensor(dt, {5, cols}, 5);
    detail::store(x.data(), dt, 0 * cols + 0, kNaN);
    detail::store(x.data(), dt, 0 * cols + 1, 100.0f);  // larger than every value, after the NaN
    detail::store(x.data(), dt, 1 * cols + 20, kNaN);
    detail::store(x.data(), dt, 2 * cols + 36, kNaN);  // the last column: a tail lane
    for (std::int64_t c = 0; c < cols; ++c) detail::store(x.data(), dt, 3 * cols + c, -kInf);
    detail::store(x.data(), dt, 4 * cols + 3, kInf);
    for (ReduceOp op : kOps) {
      SCOPED_TRACE(ops::to_string(op));
      const Tensor rows = expect_matches_reference(x, {.op = op, .axes = {1}});
      const Tensor cols_out = expect_matches_reference(x, {.op = op, .axes = {0}});
      EXPECT_TRUE(matches_naive(rows, x, {1}, op));
      EXPECT_TRUE(matches_naive(cols_out, x, {0}, op));
      for (int r = 0; r < 3; ++r) EXPECT_TRUE(std::isnan(detail::load(rows.data(), dt, r))) << r;
      if (op == ReduceOp::log_sum_exp) {  // the largest element when it is infinite, no exp(inf - inf)
        EXPECT_EQ(detail::load(rows.data(), dt, 3), -kInf);
        EXPECT_EQ(detail::load(rows.data(), dt, 4), kInf);
      }
      if (op != ReduceOp::sum && op != ReduceOp::mean && op != ReduceOp::max && op != ReduceOp::min) continue;
      EXPECT_EQ(detail::load(rows.data(), dt, 3), -kInf);
      if (op == ReduceOp::min) EXPECT_LT(detail::load(rows.data(), dt, 4), 2.0f);
      else EXPECT_EQ(detail::load(rows.data(), dt, 4), kInf);
      for (std::int64_t c = 0; c < cols; ++c) {
        const bool sums = op == ReduceOp::sum || op == ReduceOp::mean;
        const bool nan_column = c == 0 || c == 20 || c == 36 || (c == 3 && sums);  // Inf + -Inf
        EXPECT_EQ(std::isnan(detail::load(cols_out.data(), dt, c)), nan_column) << c;
      }
    }
  }
}

// Each new reduction by hand: L1, L2, sums of squares, products, the log of
// a sum, log-sum-exp past exp's range and of -inf; and each over nothing
// (ONNX's values: the sums 0, prod 1, log_sum and log_sum_exp -inf).
TEST_P(ReduceTest, ValuesByHand) {
  const auto reduce1 = [&](ReduceOp op, std::vector<float> values) {
    Tensor x = zeros(DType::f32, {1, std::int64_t(values.size())}), y = zeros(DType::f32, {1});
    std::copy(values.begin(), values.end(), x.data_as<float>());
    const Status st = ops::reduce(stream_, x, y, {.op = op, .axes = {1}});
    EXPECT_TRUE(st.ok()) << st.to_string();
    return y.data_as<float>()[0];
  };
  EXPECT_EQ(reduce1(ReduceOp::l1, {3, -4}), 7.0f);
  EXPECT_EQ(reduce1(ReduceOp::l2, {3, -4}), 5.0f);
  EXPECT_EQ(reduce1(ReduceOp::sum_square, {3, -4}), 25.0f);
  EXPECT_EQ(reduce1(ReduceOp::prod, {3, -4, 0.5f}), -6.0f);
  EXPECT_FLOAT_EQ(reduce1(ReduceOp::log_sum, {1, std::exp(1.0f) - 1}), 1.0f);
  EXPECT_FLOAT_EQ(reduce1(ReduceOp::log_sum_exp, {0, 0}), std::log(2.0f));
  EXPECT_FLOAT_EQ(reduce1(ReduceOp::log_sum_exp, {1000, 1000, -kInf}), 1000 + std::log(2.0f));
  EXPECT_FLOAT_EQ(reduce1(ReduceOp::log_sum_exp, {-1000, -1000}), -1000 + std::log(2.0f));
  EXPECT_EQ(reduce1(ReduceOp::log_sum_exp, {-kInf, -kInf}), -kInf);
  EXPECT_EQ(reduce1(ReduceOp::log_sum_exp, {kInf, 1, kInf}), kInf);
  // The same in one SIMD lane (elements 0, 16 and 32 share a lane at AVX2
  // and AVX-512): infinities met twice, -inf before finite values.
  const auto row = [](float fill, std::vector<std::pair<int, float>> at) {
    std::vector<float> v(33, fill);
    for (auto [i, value] : at) v[std::size_t(i)] = value;
    return v;
  };
  EXPECT_EQ(reduce1(ReduceOp::log_sum_exp, row(1, {{0, kInf}, {16, kInf}, {32, kInf}})), kInf);
  EXPECT_EQ(reduce1(ReduceOp::log_sum_exp, row(-kInf, {})), -kInf);
  EXPECT_FLOAT_EQ(reduce1(ReduceOp::log_sum_exp, row(-kInf, {{16, 2}, {32, 2}})), 2 + std::log(2.0f));
  EXPECT_EQ(reduce1(ReduceOp::l2, {kInf, 1}), kInf);
  EXPECT_EQ(reduce1(ReduceOp::l1, {-kInf, 1}), kInf);
  // A product whose parts leave f32's range (1.03^16384, then 1 / 1.03^16384:
  // a part of 4096 factors is e^121): one pass in f64, never split across
  // cores into f32 partial products.
  std::vector<float> factors(32768, 1.03f);
  std::fill(factors.begin() + 16384, factors.end(), 1.0f / 1.03f);
  const double exact = std::pow(double(1.03f) * double(1.0f / 1.03f), 16384.0);
  EXPECT_NEAR(reduce1(ReduceOp::prod, factors), exact, 1e-6 * exact);
  // The same at any core count: a long product plans one pass (no workspace), where a sum splits.
  const TensorDesc long_row = TensorDesc::contiguous(DType::f32, {1, 1 << 24}), one = TensorDesc::contiguous(DType::f32, {1});
  EXPECT_EQ(value_or_die(ops::Reduce::plan(ctx_, long_row, one, {.op = ReduceOp::prod, .axes = {1}}))->workspace_bytes(), 0);
  if (ctx_.hw().cores > 1) {
    EXPECT_GT(value_or_die(ops::Reduce::plan(ctx_, long_row, one, {.op = ReduceOp::sum, .axes = {1}}))->workspace_bytes(), 0);
  }
  for (ReduceOp op : {ReduceOp::prod, ReduceOp::l1, ReduceOp::l2, ReduceOp::sum_square, ReduceOp::log_sum, ReduceOp::log_sum_exp}) {
    SCOPED_TRACE(ops::to_string(op));
    const float want = op == ReduceOp::prod ? 1.0f : op == ReduceOp::log_sum || op == ReduceOp::log_sum_exp ? -kInf : 0.0f;
    EXPECT_EQ(reduce1(op, {}), want);
    Tensor y = random_tensor(DType::bf16, {3}, 6);  // columns: none of 3 outputs
    ASSERT_TRUE(ops::reduce(stream_, zeros(DType::bf16, {0, 3}), y, {.op = op, .axes = {0}}).ok());
    for (int i = 0; i < 3; ++i) EXPECT_EQ(detail::load(y.data(), DType::bf16, i), want) << i;
  }
}

// A sum over an empty axis is 0; an empty non-reduced dim gives an empty y.
TEST_P(ReduceTest, EmptyDims) {
  Tensor y = random_tensor(DType::f32, {3}, 6);
  ASSERT_TRUE(ops::reduce(stream_, zeros(DType::f32, {3, 0}), y, {.op = ReduceOp::sum, .axes = {1}}).ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(y.data_as<float>()[i], 0.0f);
  Tensor y2 = random_tensor(DType::bf16, {4}, 7);
  ASSERT_TRUE(ops::reduce(stream_, zeros(DType::bf16, {0, 4}), y2, {.op = ReduceOp::sum, .axes = {0}}).ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(detail::load(y2.data(), DType::bf16, i), 0.0f);
  for (ReduceOp op : kOps) {
    Tensor empty_y = zeros(DType::f32, {0});
    EXPECT_TRUE(ops::reduce(stream_, zeros(DType::f32, {0, 4}), empty_y, {.op = op, .axes = {1}}).ok());
  }
}

// argmax / argmin: the first extreme's index, a NaN winning both; rows (the
// SIMD row at AVX2 and up) and columns (the reference row), i64 and i32.
TEST_P(ReduceTest, ArgMaxAndArgMin) {
  const auto expected = [](const Tensor& x, std::int64_t j, int axis, bool max) {
    const std::int64_t len = x.dim(axis);
    std::int64_t best = 0;
    for (std::int64_t r = 0; r < len; ++r) {
      const float v = detail::load(x.data(), x.dtype(), axis == 1 ? j * x.strides()[0] + r : r * x.strides()[0] + j);
      const float b = detail::load(x.data(), x.dtype(), axis == 1 ? j * x.strides()[0] + best : best * x.strides()[0] + j);
      if (std::isnan(v)) return r;
      if (max ? v > b : v < b) best = r;
    }
    return best;
  };
  for (DType dt : kFloatTypes) {
    const std::int64_t cols = 37;
    Tensor x = random_tensor(dt, {6, cols}, 9, -2.0f, 2.0f);
    detail::store(x.data(), dt, 0 * cols + 4, kNaN);
    detail::store(x.data(), dt, 0 * cols + 30, kNaN);
    for (std::int64_t c : {10, 25}) detail::store(x.data(), dt, 1 * cols + c, 5.0f);   // ties: the first
    for (std::int64_t c : {7, 36}) detail::store(x.data(), dt, 1 * cols + c, -5.0f);
    for (std::int64_t c = 0; c < cols; ++c) detail::store(x.data(), dt, 2 * cols + c, -kInf);
    detail::store(x.data(), dt, 3 * cols + 36, kInf);  // the tail lane
    detail::store(x.data(), dt, 4 * cols + 35, kNaN);
    for (ReduceOp op : {ReduceOp::argmax, ReduceOp::argmin})
      for (int axis : {1, 0})
        for (DType yt : {DType::i64, DType::i32})
          for (bool keep : {false, true}) {
            SCOPED_TRACE(fmt::format("{} {} axis {} y {} keep {}", to_string(dt), ops::to_string(op), axis, to_string(yt), keep));
            const Shape ys = reduced(x.shape(), {axis}, keep);
            Tensor y = zeros(yt, ys);
            const Status st = ops::reduce(stream_, x, y, {.op = op, .axes = {axis}, .keep_dims = keep});
            ASSERT_TRUE(st.ok()) << st.to_string();
            for (std::int64_t j = 0; j < y.numel(); ++j)
              ASSERT_EQ(detail::load_index(y.data(), yt, j), expected(x, j, axis, op == ReduceOp::argmax)) << j;
          }
  }
  // Logits of a vocabulary: the largest planted near the end; the kernel row of this level.
  Tensor logits = random_tensor(DType::f32, {2, 32003}, 10);
  logits.data_as<float>()[31999] = 3.0f, logits.data_as<float>()[32003 + 17] = 3.0f;
  Tensor ids = zeros(DType::i64, {2});
  const auto plan = value_or_die(ops::Reduce::plan(ctx_, logits.desc(), ids.desc(), {.op = ReduceOp::argmax, .axes = {-1}}));
  EXPECT_EQ(plan->kernel(), GetParam() == hw::Isa::scalar ? "reduce_ref" : "reduce_arg_rows_avx2");
  ASSERT_TRUE(plan->run(stream_, {logits}, {ids}).ok());
  EXPECT_EQ(ids.data_as<std::int64_t>()[0], 31999);
  EXPECT_EQ(ids.data_as<std::int64_t>()[1], 17);
}

// Over several axes, against this level's scalar row and a plain f64 loop:
// axes that merge into one pass (NCHW's H and W, all of a contiguous x), that
// do not (two and three passes), negative and unsorted, none (all), a
// permuted x, NaN; and one long run with too few outputs for the cores, cut
// into parts where f32 x is over 64 KiB a core (rows and columns; lengths
// with no divisor left whole).
TEST_P(ReduceTest, SeveralAxes) {
  struct Case {
    Shape shape;
    std::vector<int> axes;
    bool permuted;
  };
  const Case cases[] = {
      {{2, 3, 5, 7}, {2, 3}, false},       {{2, 3, 5, 7}, {0, 2, 3}, false}, {{2, 3, 5, 7}, {1, 3}, false},
      {{2, 3, 5, 7}, {-1, 0}, false},      {{2, 3, 5, 7}, {}, false},        {{2, 3, 5, 7}, {0, 1, 2, 3}, false},
      {{4, 3, 5, 6, 2}, {0, 2, 4}, false}, {{6, 5, 4}, {0, 2}, true},        {{2, 64, 24, 24}, {0, 2, 3}, false},
      {{3, 1, 17}, {1, 2}, false},         {{3, 1, 17}, {1}, false},         {{2048, 24}, {0}, false},
      {{65536}, {0}, false},               {{7, 5240}, {}, false},           {{127, 300}, {0}, false},
      {{2, 67}, {-1, -2}, false},
  };
  for (DType dt : {DType::f32, DType::bf16})
    for (const Case& c : cases)
      for (ReduceOp op : kOps)
        for (bool keep : {false, true}) {
          SCOPED_TRACE(fmt::format("{} {} {} axes [{}] permuted {} keep {}", ops::to_string(op), to_string(dt), c.shape.to_string(),
                                   fmt::join(c.axes, ", "), c.permuted, keep));
          Tensor x = input_for(op, dt, c.shape, 11);
          if ((op == ReduceOp::max || op == ReduceOp::log_sum_exp) && dt == DType::f32) detail::store(x.data(), dt, 5, kNaN);
          if (c.permuted) x = value_or_die(x.permute({2, 0, 1}));
          const Tensor y = expect_matches_reference(x, {.op = op, .axes = c.axes, .keep_dims = keep});
          EXPECT_TRUE(matches_naive(y, x, c.axes, op));
        }
  // Passes that do not merge take a workspace; one pass none.
  const TensorDesc x = TensorDesc::contiguous(DType::f32, {2, 3, 5, 7});
  EXPECT_EQ(value_or_die(ops::Reduce::plan(ctx_, x, TensorDesc::contiguous(DType::f32, {2, 3}), {.op = ReduceOp::sum, .axes = {2, 3}}))
                ->workspace_bytes(),
            0);
  EXPECT_GT(value_or_die(ops::Reduce::plan(ctx_, x, TensorDesc::contiguous(DType::f32, {3}), {.op = ReduceOp::sum, .axes = {0, 2, 3}}))
                ->workspace_bytes(),
            0);
}

TEST_P(ReduceTest, PicksTheRowOfItsLevel) {
  const TensorDesc x = TensorDesc::contiguous(DType::f32, {64, 4096});
  const std::string isa = GetParam() == hw::Isa::scalar ? "" : GetParam() == hw::Isa::avx2 ? "avx2" : "avx512";
  auto rows = value_or_die(ops::Reduce::plan(ctx_, x, TensorDesc::contiguous(DType::f32, {64}), {.op = ReduceOp::sum, .axes = {1}}));
  auto cols = value_or_die(ops::Reduce::plan(ctx_, x, TensorDesc::contiguous(DType::f32, {4096}), {.op = ReduceOp::max, .axes = {0}}));
  EXPECT_EQ(rows->kernel(), isa.empty() ? "reduce_ref" : "reduce_rows_" + isa);
  EXPECT_EQ(cols->kernel(), isa.empty() ? "reduce_ref" : "reduce_columns_" + isa);
  EXPECT_EQ(cols->op(), "max");
  // The AVX-512 rows have only sum, mean and max: the others take the AVX2
  // rows at every level from AVX2 up.
  for (ReduceOp op : {ReduceOp::min, ReduceOp::prod, ReduceOp::l1, ReduceOp::l2, ReduceOp::sum_square, ReduceOp::log_sum,
                      ReduceOp::log_sum_exp}) {
    SCOPED_TRACE(ops::to_string(op));
    auto op_rows = value_or_die(ops::Reduce::plan(ctx_, x, TensorDesc::contiguous(DType::f32, {64}), {.op = op, .axes = {1}}));
    auto op_cols = value_or_die(ops::Reduce::plan(ctx_, x, TensorDesc::contiguous(DType::f32, {4096}), {.op = op, .axes = {0}}));
    EXPECT_EQ(op_rows->kernel(), isa.empty() ? "reduce_ref" : "reduce_rows_avx2");
    EXPECT_EQ(op_cols->kernel(), isa.empty() ? "reduce_ref" : "reduce_columns_avx2");
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, ReduceTest, ::testing::ValuesIn(isa_levels()), isa_name);

TEST(ReduceErrors, PlanNamesTheArgument) {
  Context ctx;
  const TensorDesc x = TensorDesc::contiguous(DType::f32, {4, 8}), y = TensorDesc::contiguous(DType::f32, {4});
  const ops::ReduceAttrs sum_last{.op = ReduceOp::sum, .axes = {1}};
  EXPECT_TRUE(fails_naming(ops::Reduce::plan(ctx, x, y, {.op = ReduceOp::sum, .axes = {2}}), "axes"));
  EXPECT_TRUE(fails_naming(ops::Reduce::plan(ctx, x, y, {.op = ReduceOp::sum, .axes = {-3}}), "axes"));
  EXPECT_TRUE(fails_naming(ops::Reduce::plan(ctx, x, y, {.op = ReduceOp::sum, .axes = {1, -1}}), "axes"));  // twice
  EXPECT_TRUE(fails_naming(ops::Reduce::plan(ctx, x, TensorDesc::contiguous(DType::i64, {}), {.op = ReduceOp::argmax, .axes = {0, 1}}), "axes"));
  EXPECT_TRUE(fails_naming(ops::Reduce::plan(ctx, x, TensorDesc::contiguous(DType::i64, {}), {.op = ReduceOp::argmin}), "axes"));
  EXPECT_TRUE(fails_naming(ops::Reduce::plan(ctx, x, TensorDesc::contiguous(DType::f32, {8}), sum_last), "y"));
  EXPECT_TRUE(fails_naming(ops::Reduce::plan(ctx, x, y, {.op = ReduceOp::sum, .axes = {1}, .keep_dims = true}), "y"));
  EXPECT_TRUE(fails_naming(ops::Reduce::plan(ctx, x, TensorDesc::contiguous(DType::f32, {4, 1}), sum_last), "y"));
  EXPECT_TRUE(fails_naming(ops::Reduce::plan(ctx, TensorDesc::contiguous(DType::i32, {4, 8}), y, sum_last), "x"));
  EXPECT_TRUE(fails_naming(ops::Reduce::plan(ctx, x, TensorDesc::contiguous(DType::i8, {4}), sum_last), "y"));
  EXPECT_TRUE(fails_naming(ops::Reduce::plan(ctx, TensorDesc::contiguous(DType::f32, {}), TensorDesc::contiguous(DType::f32, {}),
                                             {.op = ReduceOp::sum, .axes = {0}}),
                           "x"));
  // y written twice over (stride 0) is no output.
  EXPECT_TRUE(fails_naming(ops::Reduce::plan(ctx, x, TensorDesc{DType::f32, {4}, {0}}, sum_last), "y"));
  // mean and max of nothing have no value; sum is 0.
  const TensorDesc empty_axis = TensorDesc::contiguous(DType::f32, {4, 0});
  EXPECT_TRUE(fails_naming(ops::Reduce::plan(ctx, empty_axis, y, {.op = ReduceOp::mean, .axes = {1}}), "x"));
  EXPECT_TRUE(fails_naming(ops::Reduce::plan(ctx, empty_axis, y, {.op = ReduceOp::max, .axes = {-1}}), "x"));
  EXPECT_TRUE(fails_naming(ops::Reduce::plan(ctx, empty_axis, TensorDesc::contiguous(DType::f32, {}), {.op = ReduceOp::min}), "x"));
  EXPECT_TRUE(ops::Reduce::plan(ctx, empty_axis, y, sum_last).ok());
  // argmax / argmin write indices (i64 or i32); the other ops floats.
  EXPECT_TRUE(fails_naming(ops::Reduce::plan(ctx, x, y, {.op = ReduceOp::argmax, .axes = {1}}), "y"));
  EXPECT_TRUE(fails_naming(ops::Reduce::plan(ctx, x, TensorDesc::contiguous(DType::i8, {4}), {.op = ReduceOp::argmin, .axes = {1}}), "y"));
  EXPECT_TRUE(fails_naming(ops::Reduce::plan(ctx, x, TensorDesc::contiguous(DType::i64, {4}), sum_last), "y"));
  EXPECT_TRUE(fails_naming(ops::Reduce::plan(ctx, empty_axis, TensorDesc::contiguous(DType::i64, {4}), {.op = ReduceOp::argmax, .axes = {1}}), "x"));
}

TEST(ReduceErrors, RunChecksTensorsAndOverlap) {
  Context ctx;
  Stream stream(ctx);
  Tensor x = random_tensor(DType::f32, {4, 8}, 8);
  // y inside x's memory.
  Tensor y = value_or_die(value_or_die(x.slice(0, 0, 1)).reshape({8}));
  EXPECT_TRUE(fails_naming(ops::reduce(stream, x, value_or_die(y.slice(0, 0, 4)), {.op = ReduceOp::sum, .axes = {1}}), "y"));
  auto plan = value_or_die(ops::Reduce::plan(ctx, x.desc(), TensorDesc::contiguous(DType::f32, {4}), {.op = ReduceOp::sum, .axes = {1}}));
  EXPECT_TRUE(fails_naming(plan->run(stream, {x}, {zeros(DType::f32, {8})}), "y"));
  EXPECT_TRUE(fails_naming(plan->run(stream, {zeros(DType::f32, {4, 7})}, {zeros(DType::f32, {4})}), "x"));
}

}  // namespace
}  // namespace tessera::testing
