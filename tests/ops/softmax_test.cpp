#include <cmath>
#include <limits>

#include "core/element.hpp"
#include "kernels/softmax.hpp"
#include "support/harness.hpp"

namespace tessera::testing {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

class SoftmaxTest : public IsaTest {};

TEST_P(SoftmaxTest, MatchesReference) {
  for (bool log : {false, true}) {
    for (DType dt : kFloatTypes) {
      for (std::int64_t cols : kRowLengths) {
        for (bool causal : {false, true}) {
          SCOPED_TRACE(fmt::format("log={} {} cols={} causal={}", log, to_string(dt), cols, causal));
          const std::int64_t rows = std::min<std::int64_t>(cols, 33);
          Tensor x = random_tensor(dt, {2, rows, cols}, 6, -8.0f, 8.0f);
          Tensor y = zeros(dt, x.shape()), ref = zeros(dt, x.shape());
          const ops::SoftmaxAttrs attrs{.scale = 0.7f, .causal = causal, .log = log};
          ASSERT_TRUE(ops::softmax(stream_, x, y, attrs).ok());
          ASSERT_TRUE(ops::softmax(ref_stream_, x, ref, attrs).ok());
          EXPECT_TRUE(close(y, ref, tolerance_for(dt, cols)));
        }
      }
    }
  }
}

// Mask [Sq, Skv] broadcast over heads, in x's dtype: row 1 fully masked,
// row 2 every third column masked, rows 0 and 3 open.
TEST_P(SoftmaxTest, MaskedRowsMatchReference) {
  for (bool log : {false, true}) {
    for (DType dt : kFloatTypes) {
      for (std::int64_t cols : kRowLengths) {
        SCOPED_TRACE(fmt::format("log={} {} cols={}", log, to_string(dt), cols));
        Tensor x = random_tensor(dt, {3, 4, cols}, 7, -4.0f, 4.0f);
        Tensor mask = random_tensor(dt, {4, cols}, 8);
        for (std::int64_t c = 0; c < cols; ++c) {
          detail::store(mask.data(), dt, cols + c, -kInf);
          if (c % 3 == 0) detail::store(mask.data(), dt, 2 * cols + c, -kInf);
        }
        Tensor y = zeros(dt, x.shape()), ref = zeros(dt, x.shape());
        ASSERT_TRUE(ops::softmax(stream_, x, mask, y, {.log = log}).ok());
        ASSERT_TRUE(ops::softmax(ref_stream_, x, mask, ref, {.log = log}).ok());
        EXPECT_TRUE(close(y, ref, tolerance_for(dt, cols)));
        for (int h = 0; h < 3; ++h)
          for (std::int64_t c = 0; c < cols; ++c) {
            EXPECT_EQ(detail::load(y.data(), dt, (h * 4 + 1) * cols + c), log ? -kInf : 0.0f) << "fully masked row";
            if (c % 3 == 0) {
              EXPECT_EQ(detail::load(y.data(), dt, (h * 4 + 2) * cols + c), log ? -kInf : 0.0f) << "masked column";
            }
          }
      }
    }
  }
}

TEST_P(SoftmaxTest, MaskedRowsAndSpecials) {
  // Mask [Sq, Skv] broadcast over heads; row 1 fully masked, row 2 partly.
  Tensor x = random_tensor(DType::f32, {4, 3, 37}, 7);
  Tensor mask = zeros(DType::f32, {3, 37});
  for (int c = 0; c < 37; ++c) mask.data_as<float>()[37 + c] = -kInf;
  for (int c = 0; c < 37; c += 2) mask.data_as<float>()[2 * 37 + c] = -kInf;
  Tensor y = zeros(DType::f32, x.shape()), ref = zeros(DType::f32, x.shape());
  ASSERT_TRUE(ops::softmax(stream_, x, mask, y).ok());
  ASSERT_TRUE(ops::softmax(ref_stream_, x, mask, ref).ok());
  EXPECT_TRUE(close(y, ref, tolerance_for(DType::f32, 37)));
  for (int h = 0; h < 4; ++h)
    for (int c = 0; c < 37; ++c) EXPECT_EQ(y.data_as<float>()[(h * 3 + 1) * 37 + c], 0.0f) << "fully masked row";
  // Rows sum to one.
  for (int h = 0; h < 4; ++h) {
    double sum = 0;
    for (int c = 0; c < 37; ++c) sum += y.data_as<float>()[(h * 3 + 2) * 37 + c];
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
  // Causal with more queries than keys: the first rows see nothing -> zeros.
  Tensor xc = random_tensor(DType::f32, {5, 3}, 8), yc = zeros(DType::f32, {5, 3}), rc = zeros(DType::f32, {5, 3});
  ASSERT_TRUE(ops::softmax(stream_, xc, yc, {.causal = true}).ok());
  ASSERT_TRUE(ops::softmax(ref_stream_, xc, rc, {.causal = true}).ok());
  EXPECT_TRUE(close(yc, rc, tolerance_for(DType::f32)));
  EXPECT_EQ(yc.data_as<float>()[0], 0.0f);
  // A NaN logit makes its row NaN, and only its row.
  Tensor xn = random_tensor(DType::f32, {2, 40}, 9);
  xn.data_as<float>()[5] = std::numeric_limits<float>::quiet_NaN();
  Tensor yn = zeros(DType::f32, {2, 40}), rn = zeros(DType::f32, {2, 40});
  ASSERT_TRUE(ops::softmax(stream_, xn, yn).ok());
  ASSERT_TRUE(ops::softmax(ref_stream_, xn, rn).ok());
  EXPECT_TRUE(close(yn, rn, tolerance_for(DType::f32)));
  EXPECT_TRUE(std::isnan(yn.data_as<float>()[0]));
  EXPECT_FALSE(std::isnan(yn.data_as<float>()[40]));
  // A NaN among -inf logits (the row's max is -inf) still makes the row NaN,
  // where all -inf gives zeros; a +inf logit gives NaN, as in the reference.
  Tensor xs = zeros(DType::f32, {3, 40}), ys = zeros(DType::f32, {3, 40}), rs = zeros(DType::f32, {3, 40});
  for (int c = 0; c < 120; ++c) xs.data_as<float>()[c] = c < 80 ? -kInf : float(c % 7);
  xs.data_as<float>()[17] = std::numeric_limits<float>::quiet_NaN();
  xs.data_as<float>()[90] = kInf;
  for (float scale : {1.0f, 0.5f}) {
    ASSERT_TRUE(ops::softmax(stream_, xs, ys, {.scale = scale}).ok());
    ASSERT_TRUE(ops::softmax(ref_stream_, xs, rs, {.scale = scale}).ok());
    EXPECT_TRUE(close(ys, rs, tolerance_for(DType::f32)));
    EXPECT_TRUE(std::isnan(ys.data_as<float>()[3]));
    EXPECT_EQ(ys.data_as<float>()[40], 0.0f);
  }
}

TEST_P(SoftmaxTest, LogSoftmaxSpecials) {
  // Causal with more queries than keys: rows that see nothing are -inf, and
  // so are the columns past each row's window.
  Tensor xc = random_tensor(DType::f32, {5, 3}, 8), yc = zeros(DType::f32, {5, 3}), rc = zeros(DType::f32, {5, 3});
  ASSERT_TRUE(ops::softmax(stream_, xc, yc, {.causal = true, .log = true}).ok());
  ASSERT_TRUE(ops::softmax(ref_stream_, xc, rc, {.causal = true, .log = true}).ok());
  EXPECT_TRUE(close(yc, rc, tolerance_for(DType::f32)));
  const float* yp = yc.data_as<float>();  // row r sees columns c <= r - 2
  for (int c = 0; c < 6; ++c) EXPECT_EQ(yp[c], -kInf) << c;
  EXPECT_EQ(yp[6], 0.0f);  // one visible column: log(1)
  EXPECT_EQ(yp[7], -kInf);
  EXPECT_TRUE(std::isfinite(yp[10]));
  EXPECT_EQ(yp[11], -kInf);
  EXPECT_TRUE(std::isfinite(yp[14]));
  // A NaN logit makes its row's visible outputs NaN (hidden ones stay -inf),
  // and only its row.
  Tensor xn = random_tensor(DType::f32, {2, 40}, 9);
  xn.data_as<float>()[5] = std::numeric_limits<float>::quiet_NaN();
  Tensor yn = zeros(DType::f32, {2, 40}), rn = zeros(DType::f32, {2, 40});
  ASSERT_TRUE(ops::softmax(stream_, xn, yn, {.log = true}).ok());
  ASSERT_TRUE(ops::softmax(ref_stream_, xn, rn, {.log = true}).ok());
  EXPECT_TRUE(close(yn, rn, tolerance_for(DType::f32)));
  EXPECT_TRUE(std::isnan(yn.data_as<float>()[39]));
  EXPECT_TRUE(std::isfinite(yn.data_as<float>()[40]));
  // Huge logits give huge finite log-probabilities (x - max), not -inf.
  Tensor xl = random_tensor(DType::f32, {3, 50}, 10, 1e30f, 3e30f), yl = zeros(DType::f32, {3, 50}), rl = zeros(DType::f32, {3, 50});
  ASSERT_TRUE(ops::softmax(stream_, xl, yl, {.log = true}).ok());
  ASSERT_TRUE(ops::softmax(ref_stream_, xl, rl, {.log = true}).ok());
  EXPECT_TRUE(close(yl, rl, tolerance_for(DType::f32)));
}

// log_softmax(x) == log(softmax(x)) wherever softmax is not 0.
TEST_P(SoftmaxTest, LogSoftmaxIsLogOfSoftmax) {
  Tensor x = random_tensor(DType::f32, {6, 300}, 11, -5.0f, 5.0f);
  Tensor y = zeros(DType::f32, x.shape()), ly = zeros(DType::f32, x.shape());
  ASSERT_TRUE(ops::softmax(stream_, x, y, {.scale = 1.3f, .causal = true}).ok());
  ASSERT_TRUE(ops::softmax(stream_, x, ly, {.scale = 1.3f, .causal = true, .log = true}).ok());
  Tensor e = zeros(DType::f32, x.shape());
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const float p = y.data_as<float>()[i], lp = ly.data_as<float>()[i];
    if (p == 0.0f) {
      EXPECT_EQ(lp, -kInf) << i;
    }
    e.data_as<float>()[i] = float(std::exp(double(lp)));
  }
  EXPECT_TRUE(close(e, y, tolerance_for(DType::f32, 300)));
}

TEST_P(SoftmaxTest, OnTransposedView) {
  Tensor base = random_tensor(DType::f32, {19, 23}, 10);
  Tensor x = value_or_die(base.transpose(0, 1));  // column stride 23
  for (bool log : {false, true}) {
    Tensor y = zeros(DType::f32, {23, 19}), ref = zeros(DType::f32, {23, 19});
    ASSERT_TRUE(ops::softmax(stream_, x, y, {.log = log}).ok());
    ASSERT_TRUE(ops::softmax(ref_stream_, x, ref, {.log = log}).ok());
    EXPECT_TRUE(close(y, ref, tolerance_for(DType::f32, 19)));
  }
}

TEST_P(SoftmaxTest, TransposedViewsThroughContiguousCopies) {
  // x, a mask and y strided along the softmax's dim (softmax over axis 0 of
  // row-major tensors): this level's row on contiguous copies; in place too.
  auto transposed = [](std::uint64_t seed) { return value_or_die(random_tensor(DType::f32, {19, 23}, seed).transpose(0, 1)); };
  const Tensor x = transposed(11), mask = transposed(12);
  const ops::PlanPtr plan = value_or_die(ops::Softmax::plan(ctx_, x.desc(), mask.desc(), x.desc()));
  EXPECT_EQ(plan->kernel().ends_with("_ref"), GetParam() == hw::Isa::scalar) << plan->kernel();
  for (bool log : {false, true}) {
    SCOPED_TRACE(log ? "log_softmax" : "softmax");
    Tensor ref = zeros(DType::f32, {23, 19});
    ASSERT_TRUE(ops::softmax(ref_stream_, x, mask, ref, {.log = log}).ok());
    Tensor y = value_or_die(zeros(DType::f32, {19, 23}).transpose(0, 1));
    ASSERT_TRUE(ops::softmax(stream_, x, mask, y, {.log = log}).ok());
    EXPECT_TRUE(close(y, ref, tolerance_for(DType::f32, 19)));
    Tensor xy = transposed(11);  // y over x
    ASSERT_TRUE(ops::softmax(stream_, xy, mask, xy, {.log = log}).ok());
    EXPECT_TRUE(close(xy, ref, tolerance_for(DType::f32, 19)));
  }
}

// Streaming stores for y run only past the L3, so the rows are called
// directly: this level's row with stream_y on against the reference, rows
// buffered (cols <= 4096) and not, a tail past whole vectors, causal.
TEST_P(SoftmaxTest, StreamingRowsMatchTheReference) {
  for (bool log : {false, true})
    for (DType dt : kFloatTypes)
      for (std::int64_t cols : {64L, 300L, 5000L})
        for (bool causal : {false, true}) {
          SCOPED_TRACE(fmt::format("log={} {} cols={} causal={}", log, to_string(dt), cols, causal));
          const std::int64_t rows = 5;
          const Tensor x = random_tensor(dt, {rows, cols}, 7, -8.0f, 8.0f);
          Tensor y = zeros(dt, {rows, cols}), ref = zeros(dt, {rows, cols});
          kernels::SoftmaxArgs args{.x_dtype = dt, .y_dtype = dt, .mask_dtype = DType::f32, .cols = cols, .x = x.data(),
                                    .x_row_stride = cols, .x_col_stride = 1, .mask = nullptr, .mask_row_stride = 0,
                                    .mask_col_stride = 0, .y = y.data(), .y_row_stride = cols, .y_col_stride = 1, .scale = 0.7f,
                                    .causal = causal, .causal_offset = cols - rows, .log = log, .stream_y = true};
          const kernels::RowProblem problem{dt, dt, DType::f32, rows, cols, true};
          const auto* row = kernels::select<kernels::SoftmaxFamily>(problem, GetParam());
          row->run(args, 0, rows);
          args.y = ref.data();
          kernels::ref::softmax(args, 0, rows);
          EXPECT_TRUE(close(y, ref, tolerance_for(dt, cols))) << row->name;
        }
}

TEST_P(SoftmaxTest, PicksTheRowOfItsLevel) {
  const TensorDesc d = TensorDesc::contiguous(DType::f32, {4, 4096});
  auto plan = value_or_die(ops::Softmax::plan(ctx_, d, std::nullopt, d, {.log = true}));
  const std::string expected = GetParam() == hw::Isa::scalar ? "softmax_ref"
                               : GetParam() == hw::Isa::avx2 ? "softmax_avx2"
                                                             : "softmax_avx512";
  EXPECT_EQ(plan->kernel(), expected);
  EXPECT_EQ(plan->op(), "log_softmax");
}

INSTANTIATE_TEST_SUITE_P(Isa, SoftmaxTest, ::testing::ValuesIn(isa_levels()), isa_name);

TEST(SoftmaxErrors, PlanNamesTheArgument) {
  Context ctx;
  const TensorDesc x = TensorDesc::contiguous(DType::f32, {4, 8});
  EXPECT_TRUE(fails_naming(ops::Softmax::plan(ctx, x, TensorDesc::contiguous(DType::f32, {3, 8}), x), "mask"));
  EXPECT_TRUE(fails_naming(ops::Softmax::plan(ctx, x, TensorDesc::contiguous(DType::f32, {2, 4, 8}), x), "mask"));
  EXPECT_TRUE(fails_naming(ops::Softmax::plan(ctx, x, std::nullopt, x, {.scale = std::numeric_limits<float>::infinity()}), "scale"));
  EXPECT_TRUE(fails_naming(ops::Softmax::plan(ctx, TensorDesc::contiguous(DType::i32, {4, 8}), std::nullopt, x), "x"));
}

TEST(SoftmaxErrors, EmptyRowsGiveAnEmptyResult) {
  Context ctx;
  Stream stream(ctx);
  for (bool log : {false, true}) {
    Tensor x = zeros(DType::f32, {0, 8}), y = zeros(DType::f32, {0, 8});
    EXPECT_TRUE(ops::softmax(stream, x, y, {.log = log}).ok());
    Tensor x2 = zeros(DType::f32, {3, 0}), y2 = zeros(DType::f32, {3, 0});
    EXPECT_TRUE(ops::softmax(stream, x2, y2, {.log = log}).ok());
  }
}

}  // namespace
}  // namespace tessera::testing
