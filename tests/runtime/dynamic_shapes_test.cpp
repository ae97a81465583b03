// Dynamic shapes: token buckets, dynamic-rows linear plans, warm-up.
#include "support/harness.hpp"

namespace tessera::testing {
namespace {

TEST(DynamicShapesTest, TokenBucketsArePowersOfTwoThenMultiples) {
  EXPECT_EQ(Context().token_bucket(37), 0);  // off by default
  Context ctx({.token_bucket = 64});
  const std::pair<std::int64_t, std::int64_t> expected[] = {{0, 0}, {1, 1}, {2, 2}, {3, 4}, {17, 32}, {33, 64},
                                                            {64, 64}, {65, 128}, {128, 128}, {130, 192}, {4000, 4032}};
  for (auto [tokens, bucket] : expected) EXPECT_EQ(ctx.token_bucket(tokens), bucket) << tokens;
}

class DynamicLinearTest : public ::testing::TestWithParam<DType> {};

// Every token count of a bucket shares one plan and gets what a plan of its
// own exact size gives.
TEST_P(DynamicLinearTest, BucketedOneShotMatchesExactPlans) {
  const DType weights = GetParam();
  const std::int64_t k = 96, n = 80;
  Tensor w = random_tensor(DType::f32, {k, n}, 7);
  const ops::WeightsPtr packed =
      weights == DType::i8 ? value_or_die(ops::quantize_weights(w, {.dtype = DType::i8, .group_size = 0}))
                           : value_or_die(ops::pack_weights(w, weights));
  const ops::LinearOptions options{.quantize_activations = weights == DType::i8};
  Context bucketed({.token_bucket = 16}), exact;
  Stream s(bucketed), s_exact(exact);
  Tensor bias = random_tensor(DType::f32, {n}, 8);
  for (std::int64_t m : {1, 5, 9, 16, 17, 30, 32, 33, 47}) {
    Tensor a = random_tensor(DType::f32, {m, k}, std::uint64_t(m)), residual = random_tensor(DType::f32, {m, n}, 99);
    Tensor c = zeros(DType::f32, {m, n}), ref = zeros(DType::f32, {m, n});
    const ops::EpilogueTensors e{.activation = ops::Activation::silu, .bias = bias, .residual = residual};
    ASSERT_TRUE(ops::linear(s, a, packed, c, e, options).ok()) << m;
    ASSERT_TRUE(ops::linear(s_exact, a, packed, ref, e, options).ok()) << m;
    EXPECT_TRUE(close(c, ref, tolerance_for(weights == DType::f32 ? DType::f32 : DType::bf16, k))) << m;
  }
  // Buckets 1, 8, 16, 32, 48: five plans for nine counts.
  EXPECT_EQ(bucketed.plans().stats().misses, 5);
  EXPECT_EQ(bucketed.plans().stats().hits, 4);
  EXPECT_EQ(exact.plans().stats().misses, 9);
}

INSTANTIATE_TEST_SUITE_P(Weights, DynamicLinearTest, ::testing::Values(DType::f32, DType::bf16, DType::i8),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// quantize_rows then quantized_linear, as a W8A8 serving loop runs them:
// the linear's buckets as linear()'s, with scales per token (rows of their
// own) and per tensor (broadcast).
TEST(DynamicShapesTest, BucketedQuantizedLinearMatchesExactPlans) {
  const std::int64_t k = 96, n = 80;
  const ops::WeightsPtr w =
      value_or_die(ops::quantize_weights(random_tensor(DType::f32, {k, n}, 7), {.dtype = DType::i8, .group_size = 0}));
  Context bucketed({.token_bucket = 16}), exact;
  Stream s(bucketed), s_exact(exact);
  Tensor bias = random_tensor(DType::f32, {n}, 8), tensor_scale = random_tensor(DType::f32, {1}, 9, 0.001f, 0.02f);
  for (std::int64_t m : {1, 5, 9, 16, 17, 33}) {
    Tensor x = random_tensor(DType::f32, {m, k}, std::uint64_t(m)), a = zeros(DType::i8, {m, k}), a_scales = zeros(DType::f32, {m, 1});
    ASSERT_TRUE(ops::quantize_rows(s_exact, x, a, a_scales).ok()) << m;
    const ops::EpilogueTensors e{.activation = ops::Activation::silu, .bias = bias, .residual = random_tensor(DType::f32, {m, n}, 99)};
    for (const Tensor& scales : {a_scales, tensor_scale}) {
      Tensor c = zeros(DType::f32, {m, n}), ref = zeros(DType::f32, {m, n});
      const Status st = ops::quantized_linear(s, a, scales, w, c, e);
      ASSERT_TRUE(st.ok()) << m << ": " << st.to_string();
      ASSERT_TRUE(ops::quantized_linear(s_exact, a, scales, w, ref, e).ok()) << m;
      EXPECT_TRUE(close(c, ref, tolerance_for(DType::f32, k))) << m << " scales " << scales.shape().to_string();
    }
  }
  // Buckets 1, 8, 16, 32, 48 for six counts, per scale form.
  EXPECT_EQ(bucketed.plans().stats().misses, 10);
  EXPECT_EQ(bucketed.plans().stats().hits, 2);
}

TEST(DynamicShapesTest, DynamicRowsPlanChecksItsRows) {
  Context ctx;
  Stream s(ctx);
  const ops::WeightsPtr w = value_or_die(ops::pack_weights(random_tensor(DType::f32, {32, 16}, 1), DType::f32));
  const ops::PlanPtr plan = value_or_die(ops::Linear::plan(ctx, TensorDesc::contiguous(DType::f32, {8, 32}), w,
                                                           TensorDesc::contiguous(DType::f32, {8, 16}), {}, {.dynamic_rows = true}));
  Tensor a = random_tensor(DType::f32, {9, 32}, 2), c = zeros(DType::f32, {9, 16});
  Status st = plan->run(s, {a}, {c});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("a: shape [9, 32]"), std::string::npos) << st.to_string();
  Tensor a3 = random_tensor(DType::f32, {3, 32}, 3), c_wrong = zeros(DType::f32, {4, 16});
  st = plan->run(s, {a3}, {c_wrong});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("c"), std::string::npos) << st.to_string();
  Tensor c3 = zeros(DType::f32, {3, 16});
  EXPECT_TRUE(plan->run(s, {a3}, {c3}).ok());
  const Result<ops::PlanPtr> batched = ops::Linear::plan(ctx, TensorDesc::contiguous(DType::f32, {2, 8, 32}), w,
                                                         TensorDesc::contiguous(DType::f32, {2, 8, 16}), {}, {.dynamic_rows = true});
  ASSERT_FALSE(batched.ok());
  EXPECT_NE(batched.status().message().find("options.dynamic_rows"), std::string::npos) << batched.status().to_string();
}

// A dynamic-rows QuantizedLinear plan: per-token scales take a's rows,
// a scale for the tensor stays [1].
TEST(DynamicShapesTest, DynamicRowsQuantizedLinearTakesItsScalesRows) {
  Context ctx;
  Stream s(ctx);
  const std::int64_t k = 32, n = 16;
  const ops::WeightsPtr w =
      value_or_die(ops::quantize_weights(random_tensor(DType::f32, {k, n}, 1), {.dtype = DType::i8, .group_size = 0}));
  const TensorDesc a8 = TensorDesc::contiguous(DType::i8, {8, k}), c8 = TensorDesc::contiguous(DType::f32, {8, n});
  const ops::PlanPtr per_token =
      value_or_die(ops::QuantizedLinear::plan(ctx, a8, TensorDesc::contiguous(DType::f32, {8, 1}), w, c8, {}, {.dynamic_rows = true}));
  const ops::PlanPtr per_tensor =
      value_or_die(ops::QuantizedLinear::plan(ctx, a8, TensorDesc::contiguous(DType::f32, {1}), w, c8, {}, {.dynamic_rows = true}));
  Tensor x = random_tensor(DType::f32, {3, k}, 2), a = zeros(DType::i8, {3, k}), scales = zeros(DType::f32, {3, 1});
  ASSERT_TRUE(ops::quantize_rows(s, x, a, scales).ok());
  Tensor c = zeros(DType::f32, {3, n}), ref = zeros(DType::f32, {3, n});
  ASSERT_TRUE(per_token->run(s, {a, scales}, {c}).ok());
  ASSERT_TRUE(ops::quantized_linear(s, a, scales, w, ref).ok());
  EXPECT_TRUE(close(c, ref, tolerance_for(DType::f32, k)));
  const Status wrong = per_token->run(s, {a, zeros(DType::f32, {8, 1})}, {c});
  EXPECT_FALSE(wrong.ok());
  EXPECT_NE(wrong.message().find("a_scales"), std::string::npos) << wrong.to_string();
  Tensor one = random_tensor(DType::f32, {1}, 3, 0.001f, 0.02f);
  ASSERT_TRUE(per_tensor->run(s, {a, one}, {c}).ok());
  ASSERT_TRUE(ops::quantized_linear(s, a, one, w, ref).ok());
  EXPECT_TRUE(close(c, ref, tolerance_for(DType::f32, k)));
}

TEST(DynamicShapesTest, WarmupFillsThePlanCache) {
  Context ctx({.token_bucket = 64});
  const ops::WeightsPtr w = value_or_die(ops::pack_weights(random_tensor(DType::f32, {64, 48}, 1), DType::f32));
  auto layer = [&](std::int64_t tokens) {
    return [&, tokens](Stream& s) -> Status {
      Tensor x = random_tensor(DType::f32, {tokens, 64}, 5), h = zeros(DType::f32, {tokens, 64});
      Tensor y = zeros(DType::f32, {tokens, 48});
      TESSERA_RETURN_IF_ERROR(ops::rms_norm(s, x, std::nullopt, h));
      return ops::linear(s, h, w, y);
    };
  };
  const std::vector<std::function<Status(Stream&)>> problems{layer(100), layer(128)};
  ASSERT_TRUE(ctx.warmup(problems).ok());
  const std::int64_t misses = ctx.plans().stats().misses;
  EXPECT_EQ(misses, 3);  // rms_norm at 100 and 128 rows, one linear for the 128 bucket
  Stream s(ctx);
  ASSERT_TRUE(layer(128)(s).ok());
  ASSERT_TRUE(layer(120)(s).ok());  // a new norm shape, the linear bucket is warm
  EXPECT_EQ(ctx.plans().stats().misses, misses + 1);
  // A failing problem is reported by its op.
  const std::vector<std::function<Status(Stream&)>> bad{[&](Stream& st) {
    Tensor x = random_tensor(DType::f32, {4, 64}, 1), y = zeros(DType::f32, {4, 47});
    return ops::linear(st, x, w, y);
  }};
  EXPECT_FALSE(ctx.warmup(bad).ok());
}

}  // namespace
}  // namespace tessera::testing
