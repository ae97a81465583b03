// Linear: activations x weights packed once (f32, bf16) or quantized once
// (int8 / int4, group-wise, with or without zero points), every kernel row
// against the reference row reading the same packed weights.
#include <cmath>
#include <cstring>

#include "core/element.hpp"
#include "kernels/matmul.hpp"
#include "support/harness.hpp"

namespace tessera::testing {
namespace {

using ops::Activation;
using ops::QuantSpec;
using ops::WeightsPtr;

WeightsPtr make_weights(const Tensor& w, DType dtype, const QuantSpec& spec = {}) {
  if (dtype == DType::f32 || dtype == DType::bf16) return value_or_die(ops::pack_weights(w, dtype));
  QuantSpec s = spec;
  s.dtype = dtype;
  return value_or_die(ops::quantize_weights(w, s));
}

// A checkpoint's quantized weights as pack_quantized_weights takes them:
// q [K, N] (i8 symmetric, u8 with zero points) over the whole range of
// `dtype`, both ends included, scales [groups, N] of either sign, zero
// points [groups, N] or undefined.
struct Checkpoint {
  Tensor q, scales, zero_points;
};
Checkpoint checkpoint(DType dtype, std::int64_t k, std::int64_t n, std::int64_t groups, bool zp, DType scale_dtype, std::uint64_t seed) {
  const bool i4 = dtype == DType::i4;
  const int lo = zp ? 0 : i4 ? -8 : -127, hi = zp ? (i4 ? 15 : 255) : (i4 ? 7 : 127);
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  const auto next = [&](int a, int b) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return a + int((state >> 33) % std::uint64_t(b - a + 1));
  };
  Checkpoint c{zeros(zp ? DType::u8 : DType::i8, {k, n}), random_tensor(scale_dtype, {groups, n}, seed, -0.05f, 0.05f), Tensor()};
  for (std::int64_t i = 0; i < k * n; ++i) {
    const int v = i < 2 ? (i == 0 ? lo : hi) : next(lo, hi);
    if (zp) c.q.data_as<std::uint8_t>()[i] = std::uint8_t(v);
    else c.q.data_as<std::int8_t>()[i] = std::int8_t(v);
  }
  if (zp) {
    c.zero_points = zeros(DType::u8, {groups, n});
    for (std::int64_t i = 0; i < groups * n; ++i) c.zero_points.data_as<std::uint8_t>()[i] = std::uint8_t(next(lo, hi));
  }
  return c;
}

class LinearTest : public IsaTest {
 protected:
  void check(const Tensor& a, const WeightsPtr& w, DType c_dtype, const ops::EpilogueTensors& e = {}, bool w8a8 = false) {
    Shape shape = a.shape();
    shape[shape.rank() - 1] = w->n();
    Tensor c = zeros(c_dtype, shape), ref = zeros(c_dtype, shape);
    const ops::LinearOptions options{.quantize_activations = w8a8};
    Status s = ops::linear(stream_, a, w, c, e, options);
    ASSERT_TRUE(s.ok()) << s.to_string();
    ASSERT_TRUE(ops::linear(ref_stream_, a, w, ref, e, options).ok());
    const bool through_bf16 = c_dtype != DType::f32 || (!w8a8 && (w->dtype() != DType::f32 || a.dtype() != DType::f32));
    EXPECT_TRUE(close(c, ref, tolerance_for(through_bf16 ? DType::bf16 : DType::f32, w->k())));
  }
};

TEST_P(LinearTest, PackedFloatWeights) {
  for (DType wt : {DType::f32, DType::bf16})
    for (DType at : {DType::f32, DType::bf16})
      for (auto [m, k, n] : {std::array<std::int64_t, 3>{1, 1, 1}, {1, 64, 33}, {3, 17, 100}, {11, 255, 40}, {16, 64, 70}, {17, 255, 64}, {64, 1000, 70}}) {
        SCOPED_TRACE(fmt::format("w {} a {} m={} k={} n={}", to_string(wt), to_string(at), m, k, n));
        const WeightsPtr w = make_weights(random_tensor(DType::f32, {k, n}, 1), wt);
        check(random_tensor(at, {m, k}, 2), w, DType::f32);
        check(random_tensor(at, {m, k}, 2), w, DType::bf16);
      }
}

TEST_P(LinearTest, QuantizedWeightsEveryGroupAndScaleType) {
  for (DType wt : {DType::i8, DType::i4})
    for (std::int64_t group : {0, 32, 64, 128})
      for (bool zero_points : {false, true})
        for (DType st : {DType::f32, DType::f16, DType::bf16}) {
          const std::int64_t k = 256, n = 70;
          const WeightsPtr w = make_weights(random_tensor(DType::f32, {k, n}, 3), wt,
                                            {.group_size = group, .scale_dtype = st, .zero_points = zero_points});
          for (std::int64_t m : {1, 3, 16, 40}) {
            SCOPED_TRACE(fmt::format("{} group {} zp {} scales {} m={}", to_string(wt), group, zero_points, to_string(st), m));
            check(random_tensor(DType::f32, {m, k}, 4), w, DType::f32);
            check(random_tensor(DType::bf16, {m, k}, 4), w, DType::bf16);  // weight-only with bf16 activations
          }
        }
}

TEST_P(LinearTest, ImportedQuantizedWeights) {
  // A checkpoint's q and scales packed as they are: every row (decode from
  // M 1, the blocked rows at 20), per channel and in groups, W8A8 on symmetric
  // int8 per channel; q stored [N, K] (a transposed view) too.
  const std::int64_t k = 128, n = 70;
  for (DType wt : {DType::i8, DType::i4})
    for (bool zp : {false, true})
      for (std::int64_t groups : {1, 4}) {
        const Checkpoint c = checkpoint(wt, k, n, groups, zp, DType::f16, 50);
        const WeightsPtr w = value_or_die(ops::pack_quantized_weights(wt, c.q, c.scales, c.zero_points));
        for (std::int64_t m : {1, 5, 20}) {
          SCOPED_TRACE(fmt::format("{} zp {} groups {} m={}", to_string(wt), zp, groups, m));
          check(random_tensor(DType::f32, {m, k}, 51), w, DType::f32);
          if (wt == DType::i8 && !zp && groups == 1) check(random_tensor(DType::f32, {m, k}, 52), w, DType::f32, {}, true);
        }
      }
  const Tensor q_nk = checkpoint(DType::i4, n, k, 1, false, DType::f32, 53).q;  // stored [N, K]
  const WeightsPtr w = value_or_die(ops::pack_quantized_weights(DType::i4, value_or_die(q_nk.transpose(0, 1)), random_tensor(DType::bf16, {2, n}, 54)));
  check(random_tensor(DType::f32, {3, k}, 55), w, DType::f32);
}

TEST_P(LinearTest, MinimumOddAndLargeSizes) {
  // M, N, K drawn from {1, 3, 17, 64, 255, 1000}: every kernel row's edges
  // (rows past a micro-tile, columns past a panel, K past a slice or a tile step).
  const std::array<std::int64_t, 3> shapes[] = {{1, 1, 1},     {3, 17, 1},   {1, 1000, 255}, {17, 3, 1000}, {64, 255, 17},
                                                {3, 1000, 64}, {255, 17, 3}, {1000, 64, 17}, {17, 255, 1000}};
  for (DType wt : {DType::f32, DType::bf16, DType::i8, DType::i4})
    for (auto [m, k, n] : shapes) {
      SCOPED_TRACE(fmt::format("{} m={} k={} n={}", to_string(wt), m, k, n));
      const WeightsPtr w = make_weights(random_tensor(DType::f32, {k, n}, 30), wt, {.group_size = 0});
      check(random_tensor(DType::f32, {m, k}, 31), w, DType::f32);
      if (wt == DType::i8) check(random_tensor(DType::f32, {m, k}, 31), w, DType::f32, {}, true);
    }
}

TEST_P(LinearTest, NoRows) {
  // M = 0 (a prompt of no tokens, an empty batch) on every weight type and
  // path: an empty result, no error.
  const Tensor wf = random_tensor(DType::f32, {64, 40}, 60);
  for (DType wt : {DType::f32, DType::bf16, DType::i8, DType::i4}) {
    SCOPED_TRACE(to_string(wt));
    const WeightsPtr w = make_weights(wf, wt, {.group_size = 0});
    for (const Shape& a_shape : {Shape{0, 64}, Shape{0, 3, 64}}) {
      Shape c_shape = a_shape;
      c_shape[c_shape.rank() - 1] = 40;
      EXPECT_TRUE(ops::linear(stream_, zeros(DType::f32, a_shape), w, zeros(DType::f32, c_shape)).ok());
      if (wt == DType::f32 || wt == DType::bf16) continue;
      EXPECT_TRUE(ops::linear(stream_, zeros(DType::f32, a_shape), w, zeros(DType::f32, c_shape), {}, {.quantize_activations = true}).ok());
      Shape s_shape = a_shape;
      s_shape[s_shape.rank() - 1] = 1;
      EXPECT_TRUE(ops::quantized_linear(stream_, zeros(DType::i8, a_shape), zeros(DType::f32, s_shape), w, zeros(DType::f32, c_shape)).ok());
    }
  }
}

TEST_P(LinearTest, BatchedStridedActivations) {
  for (DType wt : {DType::f32, DType::bf16, DType::i4}) {
    const WeightsPtr w = make_weights(random_tensor(DType::f32, {64, 50}, 5), wt, {.group_size = 32});
    check(random_tensor(DType::f32, {2, 19, 64}, 6), w, DType::f32);
    check(padded_copy(random_tensor(DType::f32, {23, 64}, 7)), w, DType::f32);
    check(value_or_die(random_tensor(DType::f32, {64, 23}, 8).transpose(0, 1)), w, DType::f32);
  }
}

TEST_P(LinearTest, EpiloguesOnEveryWeightType) {
  // M 1 and 5 take the decode rows (weights streamed, up to 16 rows), 20 the blocked ones.
  for (DType wt : {DType::f32, DType::bf16, DType::i8, DType::i4})
    for (Activation act : {Activation::relu, Activation::gelu_erf, Activation::gelu_tanh, Activation::silu})
      for (std::int64_t m : {1, 5, 20}) {
        SCOPED_TRACE(fmt::format("{} {} m={}", to_string(wt), ops::to_string(act), m));
        const std::int64_t k = 128, n = 48;
        const WeightsPtr w = make_weights(random_tensor(DType::f32, {k, n}, 9), wt, {.group_size = 64});
        check(random_tensor(DType::f32, {m, k}, 10, -2, 2), w, DType::bf16,
              {.scale = 1.5f, .activation = act, .bias = random_tensor(DType::bf16, {n}, 11),
               .residual = random_tensor(DType::f32, {m, n}, 12)});
      }
}

TEST_P(LinearTest, OutputLargerThanL3) {
  // A C larger than L3 is written with streaming stores (the AVX-512
  // epilogues) where whole aligned vectors allow: 1000 columns, so rows
  // that start off a 64-byte line and a partial panel; through the epilogue.
  const std::int64_t l3 = hw::info().l3_bytes, k = 17, n = 1000;
  if (ctx_.isa() < hw::Isa::avx512) GTEST_SKIP() << "streaming stores: the AVX-512 epilogues";
  if (l3 > (64 << 20)) GTEST_SKIP() << "an L3 this large needs a C too large for a test";
  const std::int64_t m = l3 / (n * 4) + 17;
  const WeightsPtr w = make_weights(random_tensor(DType::f32, {k, n}, 40), DType::bf16);
  check(random_tensor(DType::f32, {m, k}, 41), w, DType::f32,
        {.activation = Activation::silu, .bias = random_tensor(DType::f32, {n}, 42), .residual = random_tensor(DType::f32, {m, n}, 43)});
}

TEST_P(LinearTest, W8A8) {
  const std::int64_t k = 320, n = 90;
  const Tensor wf = random_tensor(DType::f32, {k, n}, 13);
  const WeightsPtr w = make_weights(wf, DType::i8, {.group_size = 0});
  for (std::int64_t m : {1, 5, 7, 8, 16, 17, 64, 130}) {  // AVX2: up to 7 the decode row, from 8 the integer row
    SCOPED_TRACE(fmt::format("m={}", m));
    const Tensor a = random_tensor(DType::f32, {m, k}, 14);
    check(a, w, DType::f32, {}, true);
    check(a, w, DType::bf16, {.bias = random_tensor(DType::f32, {n}, 15), .residual = random_tensor(DType::f32, {m, n}, 16)}, true);
    // And W8A8 stays near the f32 product: int8 steps of 1/127 of each row's range.
    Tensor q = zeros(DType::f32, {m, n}), f = zeros(DType::f32, {m, n});
    ASSERT_TRUE(ops::linear(stream_, a, w, q, {}, {.quantize_activations = true}).ok());
    ASSERT_TRUE(ops::matmul(ref_stream_, a, wf, f).ok());
    EXPECT_TRUE(close(q, f, {.atol = 0.25, .rtol = 0.05, .min_cosine = 0.9995}));
  }
  // A row with NaN gives NaN outputs; the other rows are unaffected.
  Tensor a = random_tensor(DType::f32, {3, k}, 17);
  a.data_as<float>()[k + 5] = __builtin_nanf("");
  Tensor c = zeros(DType::f32, {3, n});
  ASSERT_TRUE(ops::linear(stream_, a, w, c, {}, {.quantize_activations = true}).ok());
  EXPECT_TRUE(std::isnan(c.data_as<float>()[n]));
  EXPECT_TRUE(std::isfinite(c.data_as<float>()[0]) && std::isfinite(c.data_as<float>()[2 * n]));
}

TEST_P(LinearTest, W8A8FullScaleProducts) {
  // Every quantized value at +-127, signs chosen so that pairs of products
  // add up to +-2 x 127^2: the AVX2 row's int16 pair sums at their bound,
  // exact (a u8 x s8 form with A offset by 128 would saturate them).
  const std::int64_t m = 19, k = 136, n = 40;
  Tensor a = zeros(DType::f32, {m, k}), wf = zeros(DType::f32, {k, n});
  for (std::int64_t i = 0; i < m * k; ++i) a.data_as<float>()[i] = (i / 2 + i / k) % 3 == 0 ? -1.0f : 1.0f;
  for (std::int64_t i = 0; i < k * n; ++i) wf.data_as<float>()[i] = (i / n / 2 + i % n) % 2 == 0 ? 0.5f : -0.5f;
  check(a, make_weights(wf, DType::i8, {.group_size = 0}), DType::f32, {}, true);
}

TEST_P(LinearTest, W8A8QuantizedRowsMatchTheReference) {
  // This level's per-token quantization of A, bit for bit the reference's:
  // rows with NaN, Inf and all zeros, K past whole vectors, f32 and bf16,
  // contiguous and strided (the buffer read as its transpose).
  if (GetParam() < hw::Isa::avx2) GTEST_SKIP() << "the reference itself";
  const auto quantize = GetParam() >= hw::Isa::avx512 ? kernels::avx512::w8a8_quantize_rows : kernels::avx2::w8a8_quantize_rows;
  for (DType dt : {DType::f32, DType::bf16})
    for (std::int64_t k : {1, 7, 100, 4099})
      for (bool strided : {false, true}) {
        SCOPED_TRACE(fmt::format("{} k={} strided={}", to_string(dt), k, strided));
        const std::int64_t m = 5, ldq = (k + 63) / 64 * 64;
        Tensor a = random_tensor(DType::f32, {m, k}, 60, -4.0f, 4.0f);
        float* v = a.data_as<float>();
        v[2 * k + k / 2] = __builtin_nanf("");
        v[3 * k + (k - 1) / 2] = __builtin_inff();
        std::fill(v + 4 * k, v + 5 * k, 0.0f);
        Tensor at = zeros(dt, {m, k});
        ASSERT_TRUE(ops::cast(ref_stream_, a, at).ok());
        kernels::MatmulArgs p{};
        p.k = k, p.a = at.data(), p.a_dtype = dt;
        p.a_row_stride = strided ? 1 : k, p.a_col_stride = strided ? m : 1;
        std::vector<std::int8_t> q(m * ldq, 99), ref_q(m * ldq, 99);
        std::vector<float> scales(m), ref_scales(m);
        quantize(p, 0, m, q.data(), ldq, scales.data());
        kernels::ref::w8a8_quantize_rows(p, 0, m, ref_q.data(), ldq, ref_scales.data());
        EXPECT_EQ(q, ref_q);
        EXPECT_EQ(std::memcmp(scales.data(), ref_scales.data(), m * sizeof(float)), 0);
      }
}

TEST_P(LinearTest, W8A8ActivationLayouts) {
  // The per-token quantization on bf16 rows, on strided ones (a transposed
  // view), with K past whole 64-element steps, an all-zero row (outputs
  // 0) and a row holding Inf (outputs NaN, the others unaffected).
  const std::int64_t k = 100, n = 40;
  const WeightsPtr w = make_weights(random_tensor(DType::f32, {k, n}, 50), DType::i8, {.group_size = 0});
  check(random_tensor(DType::bf16, {7, k}, 51), w, DType::f32, {}, true);
  check(value_or_die(random_tensor(DType::f32, {k, 7}, 52).transpose(0, 1)), w, DType::f32, {}, true);
  Tensor a = random_tensor(DType::f32, {3, k}, 53);
  std::fill(a.data_as<float>(), a.data_as<float>() + k, 0.0f);
  a.data_as<float>()[2 * k + k - 1] = __builtin_inff();
  Tensor c = zeros(DType::f32, {3, n});
  ASSERT_TRUE(ops::linear(stream_, a, w, c, {}, {.quantize_activations = true}).ok());
  for (std::int64_t j = 0; j < n; ++j) {
    EXPECT_EQ(c.data_as<float>()[j], 0.0f);
    EXPECT_TRUE(std::isfinite(c.data_as<float>()[n + j]));
    EXPECT_TRUE(std::isnan(c.data_as<float>()[2 * n + j]));
  }
}

TEST_P(LinearTest, W4A8) {
  // Groups of whole 4-k blocks (the VNNI row), one group over a K that is
  // not (its zero padding), and a group size that is not (the f32 rows);
  // passes of 4 rows and their tails.
  for (auto [k, group] : {std::pair<std::int64_t, std::int64_t>{256, 32}, {256, 128}, {258, 0}, {252, 6}})
    for (bool zero_points : {false, true}) {
      const std::int64_t n = 70;
      const Tensor wf = random_tensor(DType::f32, {k, n}, 40);
      const WeightsPtr w = make_weights(wf, DType::i4, {.group_size = group, .scale_dtype = DType::bf16, .zero_points = zero_points});
      for (std::int64_t m : {1, 2, 3, 4, 5, 11, 16, 17, 42}) {
        SCOPED_TRACE(fmt::format("k={} group {} zp {} m={}", k, group, zero_points, m));
        const Tensor a = random_tensor(DType::f32, {m, k}, 41);
        check(a, w, DType::f32, {}, true);
        check(a, w, DType::bf16, {.scale = 0.5f, .activation = Activation::silu, .bias = random_tensor(DType::f32, {n}, 42),
                                  .residual = random_tensor(DType::f32, {m, n}, 43)}, true);
        // And W4A8 stays near weight-only int4: int8 steps of 1/127 of each row's range.
        Tensor q = zeros(DType::f32, {m, n}), f = zeros(DType::f32, {m, n});
        ASSERT_TRUE(ops::linear(stream_, a, w, q, {}, {.quantize_activations = true}).ok());
        ASSERT_TRUE(ops::linear(ref_stream_, a, w, f).ok());
        EXPECT_TRUE(close(q, f, {.atol = 0.25, .rtol = 0.05, .min_cosine = 0.9995}));
      }
    }
}

// int8 activations [..., K] over the whole range, -128 included.
Tensor int8_activations(const Shape& shape, std::uint64_t seed) {
  Tensor q = zeros(DType::i8, shape);
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (std::int64_t i = 0; i < q.numel(); ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    q.data_as<std::int8_t>()[i] = i == 0 ? -128 : i == 1 ? 127 : std::int8_t(int((state >> 33) % 256) - 128);
  }
  return q;
}

// The f32 activations quantized_linear stands for: a * a_scales, -128 as -127.
Tensor dequantized(Stream& stream, const Tensor& a, const Tensor& a_scales) {
  Tensor q = zeros(DType::f32, a.shape()), clamped = zeros(DType::f32, a.shape()), af = zeros(DType::f32, a.shape());
  Tensor lowest = zeros(DType::f32, {1});
  lowest.data_as<float>()[0] = -127.0f;
  EXPECT_TRUE(ops::cast(stream, a, q).ok());
  EXPECT_TRUE(ops::binary(stream, ops::BinaryOp::max, q, lowest, clamped).ok());
  EXPECT_TRUE(ops::binary(stream, ops::BinaryOp::mul, clamped, a_scales, af).ok());
  return af;
}

TEST_P(LinearTest, QuantizedActivations) {
  // Caller-quantized int8 activations against the reference row on the same
  // path and against f32 activations a * a_scales times the unpacked
  // weights: W8A8 and W4A8, the decode rows (M up to 7 on AVX2) and the
  // integer row, scales per token and per tensor, batched, strided, epilogues.
  const std::int64_t k = 136, n = 70;
  const WeightsPtr w8 = make_weights(random_tensor(DType::f32, {k, n}, 70), DType::i8, {.group_size = 0});
  const WeightsPtr w4 = make_weights(random_tensor(DType::f32, {k, n}, 71), DType::i4, {.group_size = 8, .zero_points = true});
  auto run = [&](const Tensor& a, const Tensor& a_scales, const WeightsPtr& w, DType c_dtype, const ops::EpilogueTensors& e) {
    Shape shape = a.shape();
    shape[shape.rank() - 1] = n;
    Tensor c = zeros(c_dtype, shape), ref = zeros(c_dtype, shape), f32 = zeros(DType::f32, shape), f = zeros(c_dtype, shape);
    Status s = ops::quantized_linear(stream_, a, a_scales, w, c, e);
    ASSERT_TRUE(s.ok()) << s.to_string();
    ASSERT_TRUE(ops::quantized_linear(ref_stream_, a, a_scales, w, ref, e).ok());
    EXPECT_TRUE(close(c, ref, tolerance_for(c_dtype, k)));
    ASSERT_TRUE(ops::matmul(ref_stream_, dequantized(ref_stream_, a, a_scales), value_or_die(w->unpack()), f32, e).ok());
    ASSERT_TRUE(ops::cast(ref_stream_, f32, f).ok());
    EXPECT_TRUE(close(c, f, tolerance_for(c_dtype, k)));
  };
  for (const WeightsPtr& w : {w8, w4})
    for (std::int64_t m : {1, 2, 5, 7, 8, 17, 64}) {
      SCOPED_TRACE(fmt::format("{} m={}", to_string(w->dtype()), m));
      const Tensor a = int8_activations({m, k}, 72);
      run(a, random_tensor(DType::f32, {m, 1}, 73, 0.001f, 0.02f), w, DType::f32, {});
      run(a, random_tensor(DType::bf16, {1}, 74, 0.001f, 0.02f), w, DType::bf16,
          {.scale = 0.5f, .activation = Activation::silu, .bias = random_tensor(DType::f32, {n}, 75),
           .residual = random_tensor(DType::f32, {m, n}, 76)});
    }
  // Batched: a [2, 3, K] with scales per token and per batch entry; a transposed view.
  run(int8_activations({2, 3, k}, 77), random_tensor(DType::f32, {2, 3, 1}, 78, 0.001f, 0.02f), w8, DType::f32, {});
  run(int8_activations({2, 3, k}, 77), random_tensor(DType::f16, {2, 1, 1}, 79, 0.001f, 0.02f), w4, DType::f32, {});
  run(value_or_die(int8_activations({k, 9}, 80).transpose(0, 1)), random_tensor(DType::f32, {9, 1}, 81, 0.001f, 0.02f), w8, DType::f32, {});
  // A row of -128 gives what a row of -127 gives.
  Tensor lowest = zeros(DType::i8, {2, k});
  std::fill_n(lowest.data_as<std::int8_t>(), k, std::int8_t(-128));
  std::fill_n(lowest.data_as<std::int8_t>() + k, k, std::int8_t(-127));
  Tensor c = zeros(DType::f32, {2, n});
  ASSERT_TRUE(ops::quantized_linear(stream_, lowest, random_tensor(DType::f32, {1}, 82, 0.01f, 0.02f), w8, c).ok());
  for (std::int64_t j = 0; j < n; ++j) EXPECT_EQ(c.data_as<float>()[j], c.data_as<float>()[n + j]) << j;
}

TEST_P(LinearTest, QuantizeRowsFeedsQuantizedLinear) {
  // quantize_rows is quantize_activations' rule bit for bit, at this level and
  // the reference's: f32 / bf16 / f16 rows, K short of and past 64-byte steps,
  // rows of NaN, Inf and zeros, a transposed x, a y with gaps between rows,
  // more rows than a block; and its output through quantized_linear equals
  // linear with quantize_activations exactly.
  for (DType dt : {DType::f32, DType::bf16, DType::f16})
    for (std::int64_t k : {7, 100, 128}) {
      SCOPED_TRACE(fmt::format("{} k={}", to_string(dt), k));
      const std::int64_t m = 37;
      Tensor xf = random_tensor(DType::f32, {m, k}, 80, -4.0f, 4.0f);
      xf.data_as<float>()[1 * k + k / 2] = __builtin_nanf("");
      xf.data_as<float>()[2 * k] = -__builtin_inff();
      std::fill_n(xf.data_as<float>() + 3 * k, k, 0.0f);
      Tensor x = zeros(dt, {m, k});
      ASSERT_TRUE(ops::cast(ref_stream_, xf, x).ok());
      // K = 128: y's rows back to back in whole 64-byte steps, written in place.
      Tensor y = k == 128 ? zeros(DType::i8, {m, k}) : padded_copy(zeros(DType::i8, {m, k})), s = zeros(DType::f32, {m, 1});
      Tensor y_ref = zeros(DType::i8, {m, k}), s_ref = zeros(DType::f32, {m, 1});
      const Status st = ops::quantize_rows(stream_, x, y, s);
      ASSERT_TRUE(st.ok()) << st.to_string();
      ASSERT_TRUE(ops::quantize_rows(ref_stream_, x, y_ref, s_ref).ok());
      for (std::int64_t i = 0; i < m; ++i) {
        EXPECT_EQ(std::memcmp(y.data_as<std::int8_t>() + i * y.strides()[0], y_ref.data_as<std::int8_t>() + i * k, std::size_t(k)), 0) << i;
        const float a = s.data_as<float>()[i], b = s_ref.data_as<float>()[i];
        EXPECT_TRUE(a == b || (std::isnan(a) && std::isnan(b))) << i;
      }
      EXPECT_TRUE(std::isnan(s.data_as<float>()[1]) && std::isnan(s.data_as<float>()[2]));
      EXPECT_EQ(s.data_as<float>()[3], 1.0f);
      const std::int64_t n = 40;
      const WeightsPtr w = make_weights(random_tensor(DType::f32, {k, n}, 81), DType::i8, {.group_size = 0});
      Tensor c = zeros(DType::f32, {m, n}), expected = zeros(DType::f32, {m, n});
      ASSERT_TRUE(ops::quantized_linear(stream_, y, s, w, c).ok());
      ASSERT_TRUE(ops::linear(stream_, x, w, expected, {}, {.quantize_activations = true}).ok());
      for (std::int64_t i = 0; i < m * n; ++i) {
        const float a = c.data_as<float>()[i], b = expected.data_as<float>()[i];
        ASSERT_TRUE(a == b || (std::isnan(a) && std::isnan(b))) << i << ": " << a << " vs " << b;
      }
    }
  // A transposed, batched x; then y transposed (a column stride of 5) and scales with gaps.
  const Tensor xt = value_or_die(random_tensor(DType::f32, {2, 70, 5}, 82).transpose(1, 2));
  Tensor y = zeros(DType::i8, {2, 5, 70}), s = zeros(DType::f32, {2, 5, 1}), y_ref = zeros(DType::i8, {2, 5, 70}), s_ref = zeros(DType::f32, {2, 5, 1});
  ASSERT_TRUE(ops::quantize_rows(stream_, xt, y, s).ok());
  ASSERT_TRUE(ops::quantize_rows(ref_stream_, value_or_die(xt.contiguous()), y_ref, s_ref).ok());
  EXPECT_EQ(std::memcmp(y.data(), y_ref.data(), 700), 0);
  EXPECT_EQ(std::memcmp(s.data(), s_ref.data(), 10 * sizeof(float)), 0);
  Tensor y_t = zeros(DType::i8, {2, 70, 5}), s_gaps = zeros(DType::f32, {2, 5, 3});
  const Tensor y_view = value_or_die(y_t.transpose(1, 2)), s_view = value_or_die(s_gaps.slice(2, 1, 2));
  ASSERT_TRUE(ops::quantize_rows(stream_, xt, y_view, s_view).ok());
  EXPECT_TRUE(close(y_view, y_ref, {.atol = 0, .rtol = 0, .min_cosine = 1}));
  EXPECT_TRUE(close(s_view, s_ref, {.atol = 0, .rtol = 0, .min_cosine = 1}));
}

TEST_P(LinearTest, ResidualMayBeTheOutput) {
  const WeightsPtr w = make_weights(random_tensor(DType::f32, {96, 40}, 18), DType::bf16);
  const Tensor a = random_tensor(DType::bf16, {33, 96}, 19);
  Tensor c = random_tensor(DType::f32, {33, 40}, 20), expected = zeros(DType::f32, {33, 40});
  ASSERT_TRUE(ops::linear(ref_stream_, a, w, expected, {.residual = c}).ok());
  ASSERT_TRUE(ops::linear(stream_, a, w, c, {.residual = c}).ok());
  EXPECT_TRUE(close(c, expected, tolerance_for(DType::bf16, 96)));
}

INSTANTIATE_TEST_SUITE_P(Isa, LinearTest, ::testing::ValuesIn(isa_levels()), isa_name);

// The reference row reads the packed layouts; unpack() must give back what
// was packed, so the layouts are checked against the plain matrix too.
TEST(PackedWeights, UnpackRoundTrips) {
  const Tensor w = random_tensor(DType::f32, {70, 45}, 21);
  const Tensor f = value_or_die(value_or_die(ops::pack_weights(w, DType::f32))->unpack());
  EXPECT_TRUE(close(f, w, {.atol = 0, .rtol = 0, .min_cosine = 1}));
  const Tensor b = value_or_die(value_or_die(ops::pack_weights(w, DType::bf16))->unpack());
  for (std::int64_t i = 0; i < w.numel(); ++i)
    ASSERT_EQ(b.data_as<float>()[i], bf16_to_f32(f32_to_bf16(w.data_as<float>()[i]))) << i;
}

TEST(PackedWeights, QuantizationErrorIsWithinHalfAStep) {
  const std::int64_t k = 128, n = 37;
  const Tensor w = random_tensor(DType::f32, {k, n}, 22, -3, 3);
  for (DType dt : {DType::i8, DType::i4})
    for (bool zp : {false, true})
      for (std::int64_t group : {0, 32}) {
        SCOPED_TRACE(fmt::format("{} zp {} group {}", to_string(dt), zp, group));
        const WeightsPtr q = value_or_die(ops::quantize_weights(w, {.dtype = dt, .group_size = group, .zero_points = zp}));
        const Tensor d = value_or_die(q->unpack());
        const std::int64_t g = group == 0 ? k : group;
        for (std::int64_t c = 0; c < n; ++c)
          for (std::int64_t g0 = 0; g0 < k; g0 += g) {
            float lo = 0, hi = 0;
            for (std::int64_t r = g0; r < g0 + g; ++r) lo = std::min(lo, w.data_as<float>()[r * n + c]), hi = std::max(hi, w.data_as<float>()[r * n + c]);
            const float levels = dt == DType::i4 ? (zp ? 15.0f : 7.0f) : (zp ? 255.0f : 127.0f);
            const float step = zp ? (hi - lo) / levels : std::max(hi, -lo) / levels;
            // Half a step from rounding the value, plus half a step when the zero point was rounded.
            const float bound = step * (zp ? 1.0f : 0.5f) * 1.001f + 1e-7f;
            for (std::int64_t r = g0; r < g0 + g; ++r)
              ASSERT_LE(std::fabs(d.data_as<float>()[r * n + c] - w.data_as<float>()[r * n + c]), bound) << r << "," << c;
          }
      }
  // The packed size: int4 moves a quarter of the bytes of bf16 (plus its scales).
  const WeightsPtr i4 = value_or_die(ops::quantize_weights(random_tensor(DType::f32, {4096, 4096}, 23), {.group_size = 128}));
  EXPECT_EQ(i4->bytes(), 4096 * 4096 / 2 + 32 * 4096 * 4);
}

// pack_quantized_weights keeps q, the scales (in their dtype) and the zero
// points as given: unpack() is (q - zero) * scale exactly.
TEST(PackedWeights, ImportedQuantizedWeightsUnpackAsGiven) {
  const std::int64_t k = 96, n = 37;
  for (DType wt : {DType::i8, DType::i4})
    for (bool zp : {false, true})
      for (std::int64_t groups : {1, 3})
        for (DType st : {DType::f32, DType::f16, DType::bf16}) {
          SCOPED_TRACE(fmt::format("{} zp {} groups {} scales {}", to_string(wt), zp, groups, to_string(st)));
          const Checkpoint c = checkpoint(wt, k, n, groups, zp, st, 56);
          const WeightsPtr w = value_or_die(ops::pack_quantized_weights(wt, c.q, c.scales, c.zero_points));
          EXPECT_EQ(w->quant().group_size, groups == 1 ? 0 : k / groups);
          EXPECT_EQ(w->quant().scale_dtype, st);
          EXPECT_EQ(w->quant().zero_points, zp);
          const Tensor d = value_or_die(w->unpack());
          for (std::int64_t r = 0; r < k; ++r)
            for (std::int64_t col = 0; col < n; ++col) {
              const std::int64_t g = r / (k / groups);
              const int q = zp ? c.q.data_as<std::uint8_t>()[r * n + col] : c.q.data_as<std::int8_t>()[r * n + col];
              const int z = zp ? c.zero_points.data_as<std::uint8_t>()[g * n + col] : 0;
              const float s = tessera::detail::load(c.scales.data(), st, g * n + col);
              ASSERT_EQ(d.data_as<float>()[r * n + col], float(q - z) * s) << r << "," << col;
            }
        }
}

// Symmetric int8 weights carry 128 x each column's sum of q (what W8A8's
// unsigned A adds); asymmetric and int4 ones carry none.
TEST(PackedWeights, SymmetricInt8CarriesColumnOffsets) {
  const std::int64_t k = 130, n = 37;
  const WeightsPtr q = value_or_die(ops::quantize_weights(random_tensor(DType::f32, {k, n}, 26, -3, 3), {.dtype = DType::i8, .group_size = 0}));
  ASSERT_NE(q->column_offsets(), nullptr);
  const Tensor d = value_or_die(q->unpack());
  const float* scales = static_cast<const float*>(q->scales());
  for (std::int64_t c = 0; c < 64; ++c) {  // padded columns sum to 0
    std::int64_t sum = 0;
    for (std::int64_t r = 0; c < n && r < k; ++r) sum += std::lrint(d.data_as<float>()[r * n + c] / scales[c]);
    EXPECT_EQ(q->column_offsets()[c], 128 * sum) << c;
  }
  EXPECT_EQ(q->bytes(), 3 * 64 * 64 + 64 * 4 + 64 * 4);  // K padded to 192, N to 64; scales; offsets
  const Tensor w = random_tensor(DType::f32, {64, 40}, 27);
  EXPECT_EQ(value_or_die(ops::quantize_weights(w, {.dtype = DType::i8, .group_size = 0, .zero_points = true}))->column_offsets(), nullptr);
  EXPECT_EQ(value_or_die(ops::quantize_weights(w, {.dtype = DType::i4, .group_size = 32}))->column_offsets(), nullptr);
}

TEST(PackedWeights, LinearRefMatchesMatmulOnUnpackedWeights) {
  Context ctx{{.isa = hw::Isa::scalar}};
  Stream stream(ctx);
  const Tensor a = random_tensor(DType::f32, {9, 64}, 24);
  for (DType dt : {DType::f32, DType::bf16, DType::i8, DType::i4}) {
    const WeightsPtr w = make_weights(random_tensor(DType::f32, {64, 40}, 25), dt, {.group_size = 32, .zero_points = true});
    Tensor c = zeros(DType::f32, {9, 40}), ref = zeros(DType::f32, {9, 40});
    ASSERT_TRUE(ops::linear(stream, a, w, c).ok());
    ASSERT_TRUE(ops::matmul(stream, a, value_or_die(w->unpack()), ref).ok());
    EXPECT_TRUE(close(c, ref, tolerance_for(DType::f32, 64)));
  }
}

TEST(LinearErrors, Workspace) {
  Context ctx;
  Stream stream(ctx);
  const Tensor a = random_tensor(DType::f32, {5, 64}, 32), wf = random_tensor(DType::f32, {64, 40}, 33);
  Tensor c = zeros(DType::f32, {5, 40}), expected = zeros(DType::f32, {5, 40});
  // A plan that needs none ignores a workspace it is given.
  const WeightsPtr w = make_weights(wf, DType::f32);
  const ops::PlanPtr plan = value_or_die(ops::Linear::plan(ctx, a.desc(), w, c.desc()));
  EXPECT_EQ(plan->workspace_bytes(), 0);
  alignas(64) char unasked[64];
  ASSERT_TRUE(plan->run(stream, {a}, {c}, unasked).ok());
  ASSERT_TRUE(ops::linear(stream, a, w, expected).ok());
  EXPECT_TRUE(close(c, expected, {.atol = 0, .rtol = 0, .min_cosine = 1}));
  // W8A8 quantizes A into its workspace: run without one, it takes one from
  // the context's pool, with the same result.
  const WeightsPtr w8 = make_weights(wf, DType::i8, {.group_size = 0});
  const ops::PlanPtr w8a8 = value_or_die(ops::Linear::plan(ctx, a.desc(), w8, c.desc(), {}, {.quantize_activations = true}));
  EXPECT_GT(w8a8->workspace_bytes(), 0);
  ASSERT_TRUE(w8a8->run(stream, {a}, {c}).ok());
  ASSERT_TRUE(ops::linear(stream, a, w8, expected, {}, {.quantize_activations = true}).ok());
  EXPECT_TRUE(close(c, expected, {.atol = 0, .rtol = 0, .min_cosine = 1}));
}

TEST(LinearErrors, PlanNamesTheArgument) {
  Context ctx;
  auto d = [](DType t, Shape s) { return TensorDesc::contiguous(t, s); };
  const Tensor wf = random_tensor(DType::f32, {96, 16}, 26);
  const WeightsPtr w = value_or_die(ops::pack_weights(wf, DType::f32));
  const WeightsPtr i8_groups = value_or_die(ops::quantize_weights(wf, {.dtype = DType::i8, .group_size = 32}));
  EXPECT_TRUE(fails_naming(ops::Linear::plan(ctx, d(DType::f32, {4, 96}), nullptr, d(DType::f32, {4, 16})), "w"));
  EXPECT_TRUE(fails_naming(ops::Linear::plan(ctx, d(DType::f32, {4, 95}), w, d(DType::f32, {4, 16})), "a"));
  EXPECT_TRUE(fails_naming(ops::Linear::plan(ctx, d(DType::i8, {4, 96}), w, d(DType::f32, {4, 16})), "a"));
  EXPECT_TRUE(fails_naming(ops::Linear::plan(ctx, d(DType::f32, {4, 96}), w, d(DType::f32, {4, 17})), "c"));
  EXPECT_TRUE(fails_naming(ops::Linear::plan(ctx, d(DType::f32, {4, 96}), w, d(DType::i32, {4, 16})), "c"));
  EXPECT_TRUE(fails_naming(ops::Linear::plan(ctx, d(DType::f32, {4, 96}), w, d(DType::f32, {4, 16}), {.bias = d(DType::f32, {15})}), "bias"));
  EXPECT_TRUE(fails_naming(ops::Linear::plan(ctx, d(DType::f32, {4, 96}), i8_groups, d(DType::f32, {4, 16}), {}, {.quantize_activations = true}),
                           "options.quantize_activations"));
  EXPECT_TRUE(fails_naming(ops::quantize_weights(wf, {.group_size = 40}), "spec.group_size"));
  EXPECT_TRUE(fails_naming(ops::quantize_weights(wf, {.group_size = -32}), "spec.group_size"));
  EXPECT_TRUE(fails_naming(ops::quantize_weights(wf, {.dtype = DType::u8}), "spec.dtype"));
  EXPECT_TRUE(fails_naming(ops::quantize_weights(wf, {.scale_dtype = DType::i32}), "spec.scale_dtype"));
  EXPECT_TRUE(fails_naming(ops::pack_weights(wf, DType::i8), "dtype"));
  EXPECT_TRUE(fails_naming(ops::pack_weights(zeros(DType::f32, {0, 4}), DType::f32), "b"));
  Tensor bad = random_tensor(DType::f32, {32, 4}, 27);
  bad.data_as<float>()[5] = __builtin_inff();
  EXPECT_TRUE(fails_naming(ops::quantize_weights(bad, {.group_size = 32}), "b"));
  // QuantizedLinear
  const WeightsPtr w8 = value_or_die(ops::quantize_weights(wf, {.dtype = DType::i8, .group_size = 0}));
  const TensorDesc qa = d(DType::i8, {4, 96}), qs = d(DType::f32, {4, 1}), qc = d(DType::f32, {4, 16});
  EXPECT_TRUE(value_or_die(ops::QuantizedLinear::plan(ctx, qa, qs, w8, qc)) != nullptr);
  EXPECT_TRUE(fails_naming(ops::QuantizedLinear::plan(ctx, d(DType::f32, {4, 96}), qs, w8, qc), "a"));
  EXPECT_TRUE(fails_naming(ops::QuantizedLinear::plan(ctx, d(DType::u8, {4, 96}), qs, w8, qc), "a"));
  EXPECT_TRUE(fails_naming(ops::QuantizedLinear::plan(ctx, qa, d(DType::f32, {4, 96}), w8, qc), "a_scales"));  // K is not 1
  EXPECT_TRUE(fails_naming(ops::QuantizedLinear::plan(ctx, qa, d(DType::f32, {3, 1}), w8, qc), "a_scales"));
  EXPECT_TRUE(fails_naming(ops::QuantizedLinear::plan(ctx, qa, d(DType::i32, {4, 1}), w8, qc), "a_scales"));
  EXPECT_TRUE(fails_naming(ops::QuantizedLinear::plan(ctx, qa, d(DType::f32, {2, 4, 1}), w8, qc), "a_scales"));
  EXPECT_TRUE(fails_naming(ops::QuantizedLinear::plan(ctx, qa, qs, w, qc), "w"));  // f32 weights
  EXPECT_TRUE(fails_naming(ops::QuantizedLinear::plan(ctx, qa, qs, i8_groups, qc), "w"));
  EXPECT_TRUE(fails_naming(ops::QuantizedLinear::plan(ctx, qa, qs, nullptr, qc), "w"));
  EXPECT_TRUE(fails_naming(ops::QuantizedLinear::plan(ctx, qa, qs, w8, d(DType::i32, {4, 16})), "c"));
  EXPECT_TRUE(fails_naming(ops::QuantizedLinear::plan(ctx, qa, qs, w8, qc, {}, {.quantize_activations = true}), "options.quantize_activations"));
  // QuantizeRows
  EXPECT_TRUE(value_or_die(ops::QuantizeRows::plan(ctx, d(DType::f32, {4, 96}), d(DType::i8, {4, 96}), d(DType::f32, {4, 1}))) != nullptr);
  EXPECT_TRUE(fails_naming(ops::QuantizeRows::plan(ctx, d(DType::i8, {4, 96}), d(DType::i8, {4, 96}), d(DType::f32, {4, 1})), "x"));
  EXPECT_TRUE(fails_naming(ops::QuantizeRows::plan(ctx, d(DType::f32, {4, 96}), d(DType::u8, {4, 96}), d(DType::f32, {4, 1})), "y"));
  EXPECT_TRUE(fails_naming(ops::QuantizeRows::plan(ctx, d(DType::f32, {4, 96}), d(DType::i8, {4, 95}), d(DType::f32, {4, 1})), "y"));
  EXPECT_TRUE(fails_naming(ops::QuantizeRows::plan(ctx, d(DType::f32, {4, 96}), d(DType::i8, {4, 96}), d(DType::f32, {4})), "scales"));
  EXPECT_TRUE(fails_naming(ops::QuantizeRows::plan(ctx, d(DType::f32, {4, 96}), d(DType::i8, {4, 96}), d(DType::bf16, {4, 1})), "scales"));
  EXPECT_TRUE(fails_naming(ops::QuantizeRows::plan(ctx, d(DType::f32, {4, 96}), d(DType::i8, {4, 96}), TensorDesc{DType::f32, {4, 1}, {0, 1}}), "scales"));
  // pack_quantized_weights
  const Checkpoint c = checkpoint(DType::i8, 96, 16, 3, false, DType::f32, 57), u = checkpoint(DType::i4, 96, 16, 3, true, DType::f32, 58);
  EXPECT_TRUE(value_or_die(ops::pack_quantized_weights(DType::i4, u.q, u.scales, u.zero_points)) != nullptr);
  EXPECT_TRUE(fails_naming(ops::pack_quantized_weights(DType::u8, c.q, c.scales), "dtype"));
  EXPECT_TRUE(fails_naming(ops::pack_quantized_weights(DType::i8, Tensor(), c.scales), "q"));
  EXPECT_TRUE(fails_naming(ops::pack_quantized_weights(DType::i8, u.q, u.scales), "q"));  // unsigned without zero points
  EXPECT_TRUE(fails_naming(ops::pack_quantized_weights(DType::i8, c.q, c.scales, u.zero_points), "q"));  // signed with them
  EXPECT_TRUE(fails_naming(ops::pack_quantized_weights(DType::i4, c.q, c.scales), "q"));  // -127 is outside int4
  EXPECT_TRUE(fails_naming(ops::pack_quantized_weights(DType::i8, c.q, zeros(DType::i32, {3, 16})), "scales"));
  EXPECT_TRUE(fails_naming(ops::pack_quantized_weights(DType::i8, c.q, zeros(DType::f32, {5, 16})), "scales"));  // 5 does not divide 96
  EXPECT_TRUE(fails_naming(ops::pack_quantized_weights(DType::i8, c.q, zeros(DType::f32, {3, 15})), "scales"));
  EXPECT_TRUE(fails_naming(ops::pack_quantized_weights(DType::i4, u.q, u.scales, zeros(DType::u8, {2, 16})), "zero_points"));
  EXPECT_TRUE(fails_naming(ops::pack_quantized_weights(DType::i4, u.q, u.scales, zeros(DType::i8, {3, 16})), "zero_points"));
  Tensor high_zero = zeros(DType::u8, {3, 16});
  high_zero.data_as<std::uint8_t>()[7] = 16;  // past int4's 15
  EXPECT_TRUE(fails_naming(ops::pack_quantized_weights(DType::i4, u.q, u.scales, high_zero), "zero_points"));
  Tensor minus_128 = checkpoint(DType::i8, 96, 16, 3, false, DType::f32, 57).q;
  minus_128.data_as<std::int8_t>()[20] = -128;
  const auto m128 = ops::pack_quantized_weights(DType::i8, minus_128, c.scales);
  EXPECT_TRUE(fails_naming(m128, "q"));
  EXPECT_NE(m128.status().message().find("zero points 128"), std::string::npos) << m128.status().to_string();
  Tensor nan_scale = zeros(DType::f32, {3, 16});
  nan_scale.data_as<float>()[4] = __builtin_nanf("");
  EXPECT_TRUE(fails_naming(ops::pack_quantized_weights(DType::i8, c.q, nan_scale), "scales"));
}

}  // namespace
}  // namespace tessera::testing
