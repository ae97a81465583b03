#include <cmath>
#include <limits>

#include "support/harness.hpp"

namespace tessera::testing {
namespace {

class RowOpsTest : public IsaTest {};

TEST_P(RowOpsTest, RmsNormMatchesReference) {
  for (DType dt : kFloatTypes) {
    for (std::int64_t cols : kRowLengths) {
      for (std::int64_t rows : {1L, 7L, 128L}) {
        SCOPED_TRACE(fmt::format("{} rows={} cols={}", to_string(dt), rows, cols));
        Tensor x = random_tensor(dt, {rows, cols}, 1, -3.0f, 3.0f), g = random_tensor(dt, {cols}, 2);
        Tensor y = zeros(dt, {rows, cols}), ref = zeros(dt, {rows, cols});
        ASSERT_TRUE(ops::rms_norm(stream_, x, g, y, {.eps = 1e-5f}).ok());
        ASSERT_TRUE(ops::rms_norm(ref_stream_, x, g, ref, {.eps = 1e-5f}).ok());
        EXPECT_TRUE(close(y, ref, tolerance_for(dt, cols)));
      }
    }
  }
}

TEST_P(RowOpsTest, RmsNormStridedInPlaceAndConstantRows) {
  // Padded rows, a 3-D batch, in place.
  Tensor x = padded_copy(random_tensor(DType::f32, {2, 5, 96}, 3));
  Tensor g = random_tensor(DType::f32, {96}, 4);
  Tensor ref = zeros(DType::f32, {2, 5, 96});
  ASSERT_TRUE(ops::rms_norm(ref_stream_, x, g, ref).ok());
  ASSERT_TRUE(ops::rms_norm(stream_, x, g, x).ok());
  EXPECT_TRUE(close(x, ref, tolerance_for(DType::f32, 96)));
  // Values whose f32 squares overflow still normalize.
  Tensor big = random_tensor(DType::f32, {2, 100}, 11, 1e20f, 3e20f), gb = random_tensor(DType::f32, {100}, 12);
  Tensor yb = zeros(DType::f32, {2, 100}), rb = zeros(DType::f32, {2, 100});
  ASSERT_TRUE(ops::rms_norm(stream_, big, gb, yb).ok());
  ASSERT_TRUE(ops::rms_norm(ref_stream_, big, gb, rb).ok());
  EXPECT_TRUE(close(yb, rb, tolerance_for(DType::f32, 100)));
  // All-zero rows give zeros (eps keeps the division finite).
  Tensor z = zeros(DType::f32, {3, 64}), y = random_tensor(DType::f32, {3, 64}, 5);
  ASSERT_TRUE(ops::rms_norm(stream_, z, g.slice(0, 0, 64).value(), y).ok());
  for (std::int64_t i = 0; i < y.numel(); ++i) EXPECT_EQ(y.data_as<float>()[i], 0.0f);
}

TEST_P(RowOpsTest, SoftmaxMatchesReference) {
  for (DType dt : kFloatTypes) {
    for (std::int64_t cols : kRowLengths) {
      for (bool causal : {false, true}) {
        SCOPED_TRACE(fmt::format("{} cols={} causal={}", to_string(dt), cols, causal));
        const std::int64_t rows = std::min<std::int64_t>(cols, 33);
        Tensor x = random_tensor(dt, {2, rows, cols}, 6, -8.0f, 8.0f);
        Tensor y = zeros(dt, x.shape()), ref = zeros(dt, x.shape());
        const ops::SoftmaxAttrs attrs{.scale = 0.7f, .causal = causal};
        ASSERT_TRUE(ops::softmax(stream_, x, y, attrs).ok());
        ASSERT_TRUE(ops::softmax(ref_stream_, x, ref, attrs).ok());
        EXPECT_TRUE(close(y, ref, tolerance_for(dt, cols)));
      }
    }
  }
}

TEST_P(RowOpsTest, SoftmaxMaskedRowsAndSpecials) {
  const float inf = std::numeric_limits<float>::infinity();
  // Mask [Sq, Skv] broadcast over heads; row 1 fully masked, row 2 partly.
  Tensor x = random_tensor(DType::f32, {4, 3, 37}, 7);
  Tensor mask = zeros(DType::f32, {3, 37});
  for (int c = 0; c < 37; ++c) mask.data_as<float>()[37 + c] = -inf;
  for (int c = 0; c < 37; c += 2) mask.data_as<float>()[2 * 37 + c] = -inf;
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
}

TEST_P(RowOpsTest, SoftmaxOnTransposedView) {
  Tensor base = random_tensor(DType::f32, {19, 23}, 10);
  Tensor x = value_or_die(base.transpose(0, 1));  // column stride 23
  Tensor y = zeros(DType::f32, {23, 19}), ref = zeros(DType::f32, {23, 19});
  ASSERT_TRUE(ops::softmax(stream_, x, y).ok());
  ASSERT_TRUE(ops::softmax(ref_stream_, x, ref).ok());
  EXPECT_TRUE(close(y, ref, tolerance_for(DType::f32, 19)));
}

INSTANTIATE_TEST_SUITE_P(Isa, RowOpsTest, ::testing::ValuesIn(isa_levels()), isa_name);

TEST(RowOpsErrors, PlanNamesTheArgument) {
  Context ctx;
  const TensorDesc x = TensorDesc::contiguous(DType::f32, {4, 8}), g = TensorDesc::contiguous(DType::f32, {8});
  EXPECT_TRUE(fails_naming(ops::RmsNorm::plan(ctx, x, TensorDesc::contiguous(DType::f32, {7}), x), "gamma"));
  EXPECT_TRUE(fails_naming(ops::RmsNorm::plan(ctx, x, TensorDesc::contiguous(DType::i8, {8}), x), "gamma"));
  EXPECT_TRUE(fails_naming(ops::RmsNorm::plan(ctx, x, g, TensorDesc::contiguous(DType::f32, {8, 4})), "y"));
  EXPECT_TRUE(fails_naming(ops::RmsNorm::plan(ctx, x, g, x, {.eps = -1.0f}), "eps"));
  EXPECT_TRUE(fails_naming(ops::RmsNorm::plan(ctx, x, g, x, {.eps = std::numeric_limits<float>::quiet_NaN()}), "eps"));
  const TensorDesc empty_rows = TensorDesc::contiguous(DType::f32, {4, 0});
  EXPECT_TRUE(fails_naming(ops::RmsNorm::plan(ctx, empty_rows, TensorDesc::contiguous(DType::f32, {0}), empty_rows), "x"));
  EXPECT_TRUE(fails_naming(ops::RmsNorm::plan(ctx, TensorDesc::contiguous(DType::f32, {}), g, x), "x"));

  EXPECT_TRUE(fails_naming(ops::Softmax::plan(ctx, x, TensorDesc::contiguous(DType::f32, {3, 8}), x), "mask"));
  EXPECT_TRUE(fails_naming(ops::Softmax::plan(ctx, x, TensorDesc::contiguous(DType::f32, {2, 4, 8}), x), "mask"));
  EXPECT_TRUE(fails_naming(ops::Softmax::plan(ctx, x, std::nullopt, x, {.scale = std::numeric_limits<float>::infinity()}), "scale"));
  EXPECT_TRUE(fails_naming(ops::Softmax::plan(ctx, TensorDesc::contiguous(DType::i32, {4, 8}), std::nullopt, x), "x"));
}

TEST(RowOpsErrors, SoftmaxOfEmptyRowsIsEmpty) {
  Context ctx;
  Stream stream(ctx);
  Tensor x = zeros(DType::f32, {0, 8}), y = zeros(DType::f32, {0, 8});
  EXPECT_TRUE(ops::softmax(stream, x, y).ok());
  Tensor x2 = zeros(DType::f32, {3, 0}), y2 = zeros(DType::f32, {3, 0});
  EXPECT_TRUE(ops::softmax(stream, x2, y2).ok());
}

}  // namespace
}  // namespace tessera::testing
