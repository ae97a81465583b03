#include "support/harness.hpp"

namespace tessera::testing {
namespace {

using ops::Activation;
using ops::EpilogueTensors;

class MatmulTest : public IsaTest {
 protected:
  void check(const Tensor& a, const Tensor& b, const Shape& c_shape, DType c_dtype, const EpilogueTensors& e = {}) {
    Tensor c = zeros(c_dtype, c_shape), ref = zeros(c_dtype, c_shape);
    ASSERT_TRUE(ops::matmul(stream_, a, b, c, e).ok());
    ASSERT_TRUE(ops::matmul(ref_stream_, a, b, ref, e).ok());
    const bool through_bf16 = a.dtype() != DType::f32 || c_dtype != DType::f32;
    EXPECT_TRUE(close(c, ref, tolerance_for(through_bf16 ? DType::bf16 : DType::f32, a.dim(a.rank() - 1))));
  }
};

TEST_P(MatmulTest, AllSizeCombinations) {
  const std::int64_t sizes[] = {1, 3, 17, 64, 255};
  for (std::int64_t m : sizes)
    for (std::int64_t n : sizes)
      for (std::int64_t k : sizes) {
        SCOPED_TRACE(fmt::format("m={} n={} k={}", m, n, k));
        check(random_tensor(DType::f32, {m, k}, 1), random_tensor(DType::f32, {k, n}, 2), {m, n}, DType::f32);
      }
}

TEST_P(MatmulTest, LargeAndKSlices) {
  // K past one L1 slice (256), N not a multiple of the 32-wide panel, M past a task.
  check(random_tensor(DType::f32, {1000, 300}, 3), random_tensor(DType::f32, {300, 77}, 4), {1000, 77}, DType::f32);
  check(random_tensor(DType::f32, {64, 1000}, 5), random_tensor(DType::f32, {1000, 1000}, 6), {64, 1000}, DType::f32);
}

TEST_P(MatmulTest, Bf16AndF16) {
  for (DType dt : {DType::bf16, DType::f16}) {
    for (auto [m, n, k] : {std::array<std::int64_t, 3>{1, 33, 64}, {17, 33, 64}, {40, 100, 1000}, {3, 17, 255}}) {
      SCOPED_TRACE(fmt::format("{} m={} n={} k={}", to_string(dt), m, n, k));
      check(random_tensor(dt, {m, k}, 7), random_tensor(dt, {k, n}, 8), {m, n}, dt);
      check(random_tensor(dt, {m, k}, 7), random_tensor(dt, {k, n}, 8), {m, n}, DType::f32);
    }
  }
}

// The blocked kernels read A's rows in place unless a micro-tile's rows
// would share sets of L1 (rows a multiple of 4 KiB apart, or 1 and 2 KiB):
// both ways, f32 and bf16, from whole rows and from a slice of wider ones.
TEST_P(MatmulTest, OperandsOfDifferentDtypes) {
  // f32 activations times bf16 or f16 weights (and bf16 times f32), c in
  // either type: odd sizes, a K past a slice, a batch with a transposed b.
  struct Mix {
    DType a, b, c;
  };
  for (const Mix m : {Mix{DType::f32, DType::bf16, DType::f32}, Mix{DType::f32, DType::bf16, DType::bf16},
                      Mix{DType::f32, DType::f16, DType::f32}, Mix{DType::bf16, DType::f32, DType::bf16}})
    for (auto [mm, k, n] : {std::array<std::int64_t, 3>{1, 64, 33}, {17, 255, 100}, {64, 300, 40}}) {
      SCOPED_TRACE(fmt::format("a {} b {} c {} m={} k={} n={}", to_string(m.a), to_string(m.b), to_string(m.c), mm, k, n));
      check(random_tensor(m.a, {mm, k}, 7), random_tensor(m.b, {k, n}, 8), {mm, n}, m.c);
      check(random_tensor(m.a, {2, mm, k}, 9), value_or_die(random_tensor(m.b, {n, k}, 10).transpose(0, 1)), {2, mm, n}, m.c);
    }
}

TEST_P(MatmulTest, ARowsInPlaceOrPacked) {
  for (DType dt : {DType::f32, DType::bf16}) {
    for (std::int64_t k : {1000, 1024, 2048}) {
      SCOPED_TRACE(fmt::format("{} k={}", to_string(dt), k));
      const Tensor b = random_tensor(dt, {k, 70}, 15);
      check(random_tensor(dt, {40, k}, 14), b, {40, 70}, DType::f32);
      const Tensor wide = random_tensor(dt, {40, k + 24}, 16);
      check(*wide.slice(1, 0, k), b, {40, 70}, DType::f32);
    }
  }
}

TEST_P(MatmulTest, ZeroK) {
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor c = random_tensor(DType::f32, {5, 40}, 9);
    ASSERT_TRUE(ops::matmul(stream_, zeros(dt, {5, 0}), zeros(dt, {0, 40}), c).ok());
    for (std::int64_t i = 0; i < c.numel(); ++i) ASSERT_EQ(c.data_as<float>()[i], 0.0f);
  }
}

TEST_P(MatmulTest, ZeroRowsColumnsAndBatches) {
  // Empty results plan and run: M = 0 (a tiling of no row tasks divided by
  // their count), N = 0, a batch of 0; bf16 too.
  for (DType dt : {DType::f32, DType::bf16}) {
    EXPECT_TRUE(ops::matmul(stream_, zeros(dt, {0, 40}), zeros(dt, {40, 70}), zeros(DType::f32, {0, 70})).ok());
    EXPECT_TRUE(ops::matmul(stream_, zeros(dt, {5, 40}), zeros(dt, {40, 0}), zeros(DType::f32, {5, 0})).ok());
    EXPECT_TRUE(ops::matmul(stream_, zeros(dt, {0, 5, 40}), zeros(dt, {40, 70}), zeros(DType::f32, {0, 5, 70})).ok());
  }
}

TEST_P(MatmulTest, BatchedBroadcastAndTransposedViews) {
  // [2, 3, M, K] x [3, K, N] -> [2, 3, M, N]
  check(random_tensor(DType::f32, {2, 3, 17, 40}, 10), random_tensor(DType::f32, {3, 40, 33}, 11), {2, 3, 17, 33}, DType::f32);
  // Shared weight [K, N] across a batch.
  check(random_tensor(DType::f32, {4, 9, 64}, 12), random_tensor(DType::f32, {64, 48}, 13), {4, 9, 48}, DType::f32);
  // A^T and B^T through strides (attention's Q K^T), f32 and bf16.
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor at = value_or_die(random_tensor(dt, {3, 40, 17}, 14).transpose(1, 2));
    Tensor bt = value_or_die(random_tensor(dt, {3, 33, 40}, 15).transpose(1, 2));
    check(at, bt, {3, 17, 33}, DType::f32);
  }
  // Output written into a strided view ([H, S, D] view of [S, H, D]).
  Tensor out_storage = zeros(DType::f32, {17, 3, 33});
  Tensor c = value_or_die(out_storage.permute({1, 0, 2}));
  Tensor a = random_tensor(DType::f32, {3, 17, 40}, 16), b = random_tensor(DType::f32, {3, 40, 33}, 17);
  Tensor ref = zeros(DType::f32, {3, 17, 33});
  ASSERT_TRUE(ops::matmul(stream_, a, b, c).ok());
  ASSERT_TRUE(ops::matmul(ref_stream_, a, b, ref).ok());
  EXPECT_TRUE(close(c, ref, tolerance_for(DType::f32, 40)));
}

TEST_P(MatmulTest, EveryEpilogue) {
  for (DType dt : {DType::f32, DType::bf16})
    for (Activation act : {Activation::none, Activation::relu, Activation::gelu_erf, Activation::gelu_tanh, Activation::silu,
                           Activation::sigmoid, Activation::tanh, Activation::exp, Activation::quick_gelu}) {
      SCOPED_TRACE(fmt::format("{} {}", to_string(dt), ops::to_string(act)));
      const std::int64_t m = 37, n = 70, k = 96;
      EpilogueTensors e{.scale = 0.5f, .activation = act, .bias = random_tensor(DType::f32, {n}, 20),
                        .residual = random_tensor(dt, {m, n}, 21)};
      check(random_tensor(dt, {m, k}, 18, -2, 2), random_tensor(dt, {k, n}, 19), {m, n}, dt, e);
      check(random_tensor(dt, {m, k}, 18, -2, 2), random_tensor(dt, {k, n}, 19), {m, n}, DType::f32, {.activation = act});
    }
}

TEST_P(MatmulTest, ResidualMayBeTheOutput) {
  // c = a x b + c, in place.
  Tensor a = random_tensor(DType::f32, {20, 48}, 22), b = random_tensor(DType::f32, {48, 36}, 23);
  Tensor c = random_tensor(DType::f32, {20, 36}, 24), expected = zeros(DType::f32, {20, 36});
  ASSERT_TRUE(ops::matmul(ref_stream_, a, b, expected, {.residual = c}).ok());
  ASSERT_TRUE(ops::matmul(stream_, a, b, c, {.residual = c}).ok());
  EXPECT_TRUE(close(c, expected, tolerance_for(DType::f32, 48)));
}

INSTANTIATE_TEST_SUITE_P(Isa, MatmulTest, ::testing::ValuesIn(isa_levels()), isa_name);

TEST(MatmulErrors, PlanNamesTheArgument) {
  Context ctx;
  auto d = [](DType t, Shape s) { return TensorDesc::contiguous(t, s); };
  EXPECT_TRUE(fails_naming(ops::Matmul::plan(ctx, d(DType::f32, {4, 8}), d(DType::f32, {7, 5}), d(DType::f32, {4, 5})), "b"));
  EXPECT_TRUE(ops::Matmul::plan(ctx, d(DType::f32, {4, 8}), d(DType::bf16, {8, 5}), d(DType::bf16, {4, 5})).ok());
  EXPECT_TRUE(fails_naming(ops::Matmul::plan(ctx, d(DType::f32, {4, 8}), d(DType::i8, {8, 5}), d(DType::f32, {4, 5})), "b"));
  EXPECT_TRUE(fails_naming(ops::Matmul::plan(ctx, d(DType::f32, {4, 8}), d(DType::bf16, {8, 5}), d(DType::f16, {4, 5})), "c"));
  EXPECT_TRUE(fails_naming(ops::Matmul::plan(ctx, d(DType::f32, {4, 8}), d(DType::f32, {8, 5}), d(DType::f32, {4, 6})), "c"));
  EXPECT_TRUE(fails_naming(ops::Matmul::plan(ctx, d(DType::f32, {8}), d(DType::f32, {8, 5}), d(DType::f32, {1, 5})), "a"));
  EXPECT_TRUE(fails_naming(ops::Matmul::plan(ctx, d(DType::i8, {4, 8}), d(DType::i8, {8, 5}), d(DType::f32, {4, 5})), "a"));
  EXPECT_TRUE(fails_naming(ops::Matmul::plan(ctx, d(DType::f32, {2, 4, 8}), d(DType::f32, {3, 8, 5}), d(DType::f32, {2, 4, 5})), "b"));
  EXPECT_TRUE(fails_naming(ops::Matmul::plan(ctx, d(DType::bf16, {4, 8}), d(DType::bf16, {8, 5}), d(DType::f16, {4, 5})), "c"));
  const auto a = d(DType::f32, {4, 8}), b = d(DType::f32, {8, 5}), c = d(DType::f32, {4, 5});
  EXPECT_TRUE(fails_naming(ops::Matmul::plan(ctx, a, b, c, {.bias = d(DType::f32, {4})}), "bias"));
  EXPECT_TRUE(fails_naming(ops::Matmul::plan(ctx, a, b, c, {.bias = TensorDesc{DType::f32, {5}, {2}}}), "bias"));
  EXPECT_TRUE(fails_naming(ops::Matmul::plan(ctx, a, b, c, {.bias = d(DType::i32, {5})}), "bias"));
  EXPECT_TRUE(fails_naming(ops::Matmul::plan(ctx, a, b, c, {.residual = d(DType::f32, {1, 5})}), "residual"));
  EXPECT_TRUE(fails_naming(ops::Matmul::plan(ctx, a, b, c, {.scale = __builtin_nanf("")}), "epilogue.scale"));
  EXPECT_TRUE(fails_naming(ops::Matmul::plan(ctx, a, b, c, {.activation = Activation(42)}), "epilogue.activation"));
}

TEST(MatmulErrors, HugeBroadcastOperandsPlanWithoutOverflow) {
  Context ctx;
  const std::int64_t n = std::int64_t(1) << 22;
  const TensorDesc a{DType::f32, {n, n}, {0, 0}}, b{DType::f32, {n, n}, {0, 0}}, c{DType::f32, {n, n}, {n, 1}};
  auto plan = ops::Matmul::plan(ctx, a, b, c);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ((*plan)->flops(), INT64_MAX);  // saturated, not wrapped
}

TEST(MatmulErrors, OutputMayNotOverlapInputs) {
  Context ctx;
  Stream stream(ctx);
  Tensor a = random_tensor(DType::f32, {8, 8}, 1), b = random_tensor(DType::f32, {8, 8}, 2);
  EXPECT_TRUE(fails_naming(ops::matmul(stream, a, b, a), "c"));
  EXPECT_TRUE(fails_naming(ops::matmul(stream, a, b, b), "c"));
  Tensor c = zeros(DType::f32, {8, 8});
  Tensor shifted = value_or_die(c.slice(0, 1, 8));
  EXPECT_TRUE(fails_naming(ops::matmul(stream, value_or_die(a.slice(0, 0, 7)), b, shifted, {.residual = value_or_die(c.slice(0, 0, 7))}), "c"));
}

}  // namespace
}  // namespace tessera::testing
