#include <algorithm>
#include <cmath>

#include "kernels/embedding.hpp"
#include "support/harness.hpp"

namespace tessera::testing {
namespace {

class GatherRopeTest : public IsaTest {};

// Rotating by position p, then by -p (the conjugate: sin negated), is the identity;
// and position 0 leaves x unchanged. Independent of the kernel's own formulas.
TEST_P(GatherRopeTest, RopeRotatesPairs) {
  for (bool interleaved : {false, true}) {
    for (std::int64_t rot : {128L, 64L}) {
      SCOPED_TRACE(fmt::format("interleaved={} rot={}", interleaved, rot));
      auto [cos, sin] = value_or_die(ops::rope_cache(64, rot));
      Tensor x = random_tensor(DType::f32, {2, 5, 3, 128}, 1);
      Tensor pos = zeros(DType::i64, {2, 5});
      for (int i = 0; i < 10; ++i) pos.data_as<std::int64_t>()[i] = i * 5 % 64;
      Tensor y = zeros(DType::f32, x.shape()), back = zeros(DType::f32, x.shape());
      ASSERT_TRUE(ops::rope(stream_, x, pos, cos, sin, y, {.interleaved = interleaved}).ok());
      float minus_one = -1.0f;
      Tensor neg_sin = zeros(DType::f32, sin.shape());
      ASSERT_TRUE(ops::mul(stream_, sin, value_or_die(Tensor::wrap(&minus_one, TensorDesc::contiguous(DType::f32, {1}))), neg_sin).ok());
      ASSERT_TRUE(ops::rope(stream_, y, pos, cos, neg_sin, back, {.interleaved = interleaved}).ok());
      EXPECT_TRUE(close(back, x, tolerance_for(DType::f32, 4)));
      // Token 0 of batch 0 sits at position 0: unchanged.
      for (int d = 0; d < 128; ++d) EXPECT_FLOAT_EQ(y.data_as<float>()[d], x.data_as<float>()[d]);
      // Pairs keep their norm; features past the rotary dim pass through (token 1, head 0: position 5).
      const float* xp = x.data_as<float>() + 3 * 128;
      const float* yp = y.data_as<float>() + 3 * 128;
      for (std::int64_t i = 0; i < rot / 2; ++i) {
        const std::int64_t p0 = interleaved ? 2 * i : i, p1 = interleaved ? 2 * i + 1 : i + rot / 2;
        EXPECT_NEAR(std::hypot(yp[p0], yp[p1]), std::hypot(xp[p0], xp[p1]), 1e-5);
      }
      for (std::int64_t d = rot; d < 128; ++d) EXPECT_EQ(yp[d], xp[d]);
    }
  }
}

TEST_P(GatherRopeTest, RopeOnBhsdViewAndHalfTypes) {
  auto [cos, sin] = value_or_die(ops::rope_cache(32, 64));
  Tensor pos = zeros(DType::i32, {7});
  for (int i = 0; i < 7; ++i) pos.data_as<std::int32_t>()[i] = 31 - i;
  for (DType dt : kFloatTypes) {
    // Storage [B, H, S, D], passed as the [B, S, H, D] view.
    Tensor bhsd = random_tensor(dt, {1, 4, 7, 64}, 2);
    Tensor x = value_or_die(bhsd.permute({0, 2, 1, 3}));
    Tensor y = zeros(dt, x.shape()), ref = zeros(dt, x.shape());
    Tensor xc = value_or_die(x.contiguous());
    ASSERT_TRUE(ops::rope(stream_, x, pos, cos, sin, y).ok());
    ASSERT_TRUE(ops::rope(ref_stream_, xc, pos, cos, sin, ref).ok());
    EXPECT_TRUE(close(y, ref, tolerance_for(dt, 2)));
  }
}

// Every dtype and style, head dims whose halves and pairs end in vector tails,
// a partial rotary dim, in place: against the scalar reference.
TEST_P(GatherRopeTest, RopeMatchesReference) {
  struct Dims {
    std::int64_t head_dim, rot;
  };
  for (const Dims dims : {Dims{8, 8}, Dims{40, 34}, Dims{64, 64}, Dims{80, 80}, Dims{128, 96}, Dims{256, 256}}) {
    auto [cos, sin] = value_or_die(ops::rope_cache(16, dims.rot));
    Tensor pos = zeros(DType::i64, {3});
    for (int i = 0; i < 3; ++i) pos.data_as<std::int64_t>()[i] = 5 * i + 1;
    for (DType dt : kFloatTypes) {
      for (bool interleaved : {false, true}) {
        SCOPED_TRACE(fmt::format("{} D={} rot={} interleaved={}", to_string(dt), dims.head_dim, dims.rot, interleaved));
        Tensor x = random_tensor(dt, {1, 3, 4, dims.head_dim}, 9);
        Tensor y = zeros(dt, x.shape()), ref = zeros(dt, x.shape());
        ASSERT_TRUE(ops::rope(stream_, x, pos, cos, sin, y, {.interleaved = interleaved}).ok());
        ASSERT_TRUE(ops::rope(ref_stream_, x, pos, cos, sin, ref, {.interleaved = interleaved}).ok());
        EXPECT_TRUE(close(y, ref, tolerance_for(dt, 2)));
        ASSERT_TRUE(ops::rope(stream_, x, pos, cos, sin, x, {.interleaved = interleaved}).ok());  // in place
        EXPECT_TRUE(close(x, ref, tolerance_for(dt, 2)));
      }
    }
  }
}

TEST_P(GatherRopeTest, EmbeddingGathersRows) {
  // Rows of 33 elements (no whole number of vectors, odd bytes for 16-bit
  // types), 1 (a lone tail), 256; and a transposed table (column stride 50:
  // the reference row).
  for (DType dt : kFloatTypes)
    for (std::int64_t cols : {1, 33, 256})
      for (bool transposed : {false, true}) {
        SCOPED_TRACE(fmt::format("{} cols={} transposed={}", to_string(dt), cols, transposed));
        Tensor table = transposed ? value_or_die(random_tensor(dt, {cols, 50}, 3).transpose(0, 1)) : random_tensor(dt, {50, cols}, 3);
        Tensor ids = zeros(DType::i64, {2, 3});
        const std::int64_t values[] = {0, 49, 7, 7, 13, 1};
        for (int i = 0; i < 6; ++i) ids.data_as<std::int64_t>()[i] = values[i];
        Tensor out = zeros(dt, {2, 3, cols});
        ASSERT_TRUE(ops::embedding(stream_, table, ids, out).ok());
        for (int i = 0; i < 6; ++i) {
          Tensor row = clone(value_or_die(table.slice(0, values[i], values[i] + 1)));
          Tensor got = value_or_die(value_or_die(out.reshape({6, cols})).slice(0, i, i + 1));
          EXPECT_TRUE(close(got, row, {0, 0, 1.0}));
        }
      }
}

TEST_P(GatherRopeTest, EmbeddingRowsStreamingMatchTheReference) {
  // The row a plan picks with streaming stores (plans ask for them only past
  // the L3): rows of 66 bytes (bf16, 33 columns) are not aligned and go
  // out unstreamed, the others streamed.
  for (DType dt : {DType::f32, DType::bf16})
    for (std::int64_t cols : {1, 33, 256}) {
      SCOPED_TRACE(fmt::format("{} cols={}", to_string(dt), cols));
      const Tensor table = random_tensor(dt, {50, cols}, 3);
      Tensor ids = zeros(DType::i32, {6});
      const std::int32_t values[] = {0, 49, 7, 7, 13, 1};
      std::copy(values, values + 6, ids.data_as<std::int32_t>());
      Tensor out = zeros(dt, {6, cols}), ref = zeros(dt, {6, cols});
      kernels::EmbeddingArgs args{dt, DType::i32, cols, ids.data(), 1, table.data(), cols, 1, out.data(), cols, 1, true};
      const auto* row = kernels::select<kernels::EmbeddingFamily>({dt, dt, DType::i32, 6 * cols, true}, GetParam());
      row->run(args, 0, 6);
      args.out = ref.data();
      kernels::ref::embedding(args, 0, 6);
      EXPECT_TRUE(close(out, ref, {0, 0, 1.0})) << row->name;
    }
}

INSTANTIATE_TEST_SUITE_P(Isa, GatherRopeTest, ::testing::ValuesIn(isa_levels()), isa_name);

TEST(GatherRopeErrors, BadIdsAndPositionsAreReported) {
  Context ctx;
  Stream stream(ctx);
  Tensor table = random_tensor(DType::f32, {10, 4}, 1), out = zeros(DType::f32, {3, 4});
  Tensor ids = zeros(DType::i32, {3});
  ids.data_as<std::int32_t>()[2] = 10;
  EXPECT_TRUE(fails_naming(ops::embedding(stream, table, ids, out), "ids"));
  ids.data_as<std::int32_t>()[2] = -1;
  EXPECT_TRUE(fails_naming(ops::embedding(stream, table, ids, out), "ids"));

  auto [cos, sin] = value_or_die(ops::rope_cache(8, 16));
  Tensor x = random_tensor(DType::f32, {1, 2, 1, 16}, 2), y = zeros(DType::f32, x.shape());
  Tensor pos = zeros(DType::i32, {1, 2});
  pos.data_as<std::int32_t>()[1] = 8;
  EXPECT_TRUE(fails_naming(ops::rope(stream, x, pos, cos, sin, y), "position_ids"));
}

TEST(GatherRopeErrors, PlanNamesTheArgument) {
  Context ctx;
  auto d = [](DType t, Shape s) { return TensorDesc::contiguous(t, s); };
  const TensorDesc table = d(DType::f32, {10, 4});
  EXPECT_TRUE(fails_naming(ops::Embedding::plan(ctx, table, d(DType::f32, {3}), d(DType::f32, {3, 4})), "ids"));
  EXPECT_TRUE(fails_naming(ops::Embedding::plan(ctx, table, d(DType::i32, {3}), d(DType::f32, {3, 5})), "out"));
  EXPECT_TRUE(fails_naming(ops::Embedding::plan(ctx, table, d(DType::i32, {3}), d(DType::bf16, {3, 4})), "out"));
  EXPECT_TRUE(fails_naming(ops::Embedding::plan(ctx, d(DType::f32, {10}), d(DType::i32, {3}), d(DType::f32, {3, 4})), "table"));

  const TensorDesc x = d(DType::f32, {1, 2, 3, 16}), cache = d(DType::f32, {8, 8}), pos = d(DType::i32, {1, 2});
  EXPECT_TRUE(fails_naming(ops::Rope::plan(ctx, d(DType::f32, {2, 3, 16}), pos, cache, cache, x), "x"));
  EXPECT_TRUE(fails_naming(ops::Rope::plan(ctx, x, d(DType::i32, {2, 2}), cache, cache, x), "position_ids"));
  EXPECT_TRUE(fails_naming(ops::Rope::plan(ctx, x, d(DType::f32, {1, 2}), cache, cache, x), "position_ids"));
  EXPECT_TRUE(fails_naming(ops::Rope::plan(ctx, x, pos, d(DType::f32, {8, 9}), d(DType::f32, {8, 9}), x), "cos_cache"));
  EXPECT_TRUE(fails_naming(ops::Rope::plan(ctx, x, pos, cache, d(DType::f32, {8, 4}), x), "sin_cache"));
  EXPECT_TRUE(fails_naming(ops::Rope::plan(ctx, x, pos, cache, cache, d(DType::f32, {1, 2, 3, 15})), "y"));
  EXPECT_TRUE(fails_naming(ops::rope_cache(8, 15), "rotary_dim"));
  EXPECT_TRUE(fails_naming(ops::rope_cache(0, 16), "max_pos"));
  using ops::RopeScalingType;
  EXPECT_TRUE(fails_naming(ops::rope_cache(8, 16, 1e4, {.type = RopeScalingType::linear, .factor = 0.5}), "scaling.factor"));
  EXPECT_TRUE(fails_naming(ops::rope_cache(8, 16, 1e4, {.type = RopeScalingType::yarn, .factor = NAN, .original_max_positions = 4}),
                           "scaling.factor"));
  EXPECT_TRUE(fails_naming(ops::rope_cache(8, 16, 1e4, {.type = RopeScalingType::llama3, .factor = 8}), "scaling.original_max_positions"));
  EXPECT_TRUE(fails_naming(ops::rope_cache(8, 16, 1e4, {.type = RopeScalingType::llama3, .factor = 8, .original_max_positions = 4,
                                                       .low_freq_factor = 4, .high_freq_factor = 1}),
                           "scaling.high_freq_factor"));
  EXPECT_TRUE(fails_naming(ops::rope_cache(8, 16, 1e4, {.type = RopeScalingType::yarn, .factor = 4, .original_max_positions = 4,
                                                       .beta_fast = 1, .beta_slow = 32}),
                           "scaling.beta_fast"));
  EXPECT_TRUE(fails_naming(ops::rope_cache(8, 16, 1e4, {.type = RopeScalingType::yarn, .factor = 4, .original_max_positions = 4,
                                                       .attention_factor = -1}),
                           "scaling.attention_factor"));
}

// Each pair's frequency as the cache holds it: the angle at position 1 (all
// frequencies are below pi), and the magnitude of (cos, sin).
std::vector<double> frequencies(const std::pair<Tensor, Tensor>& caches) {
  const std::int64_t half = caches.first.dim(1);
  std::vector<double> f;
  for (std::int64_t i = 0; i < half; ++i) f.push_back(std::atan2(caches.second.data_as<float>()[half + i], caches.first.data_as<float>()[half + i]));
  return f;
}

// rope_scaling against transformers' formulas written out here, on the
// published configurations: linear (factor 2), Llama 3.1 (theta 5e5,
// factor 8, low / high frequency factors 1 / 4, trained at 8192) and YaRN
// as Qwen2.5 takes it (theta 1e6, factor 4, trained at 32768).
TEST(RopeCache, Scaling) {
  using ops::RopeScalingType;
  const std::int64_t rot = 128, half = rot / 2;
  const auto plain = [&](double theta, std::int64_t i) { return std::pow(theta, -2.0 * double(i) / double(rot)); };
  // none: the plain frequencies; linear: halved, so position 2p of it is position p of none.
  const auto none = value_or_die(ops::rope_cache(64, rot, 1e4));
  const auto linear = value_or_die(ops::rope_cache(64, rot, 1e4, {.type = RopeScalingType::linear, .factor = 2}));
  const std::vector<double> f_none = frequencies(none);
  for (std::int64_t i = 0; i < half; ++i) EXPECT_NEAR(f_none[std::size_t(i)], plain(1e4, i), 1e-7) << i;
  for (std::int64_t p = 0; p < 32; ++p)
    for (std::int64_t i = 0; i < half; ++i) {
      EXPECT_NEAR(linear.first.data_as<float>()[2 * p * half + i], none.first.data_as<float>()[p * half + i], 2e-6);
      EXPECT_NEAR(linear.second.data_as<float>()[2 * p * half + i], none.second.data_as<float>()[p * half + i], 2e-6);
    }
  // Llama 3.1: wavelengths under 8192 / 4 kept, over 8192 / 1 divided by 8, in between
  // (1 - s) f / 8 + s f with s = (8192 / wavelength - 1) / (4 - 1).
  const auto llama = frequencies(value_or_die(ops::rope_cache(
      4, rot, 5e5, {.type = RopeScalingType::llama3, .factor = 8, .original_max_positions = 8192, .low_freq_factor = 1, .high_freq_factor = 4})));
  int kept = 0, divided = 0, ramped = 0;
  for (std::int64_t i = 0; i < half; ++i) {
    const double f = plain(5e5, i), wavelength = 2 * M_PI / f;
    const double s = (8192 / wavelength - 1) / 3;
    const double want = wavelength < 2048 ? f : wavelength > 8192 ? f / 8 : (1 - s) * f / 8 + s * f;
    (wavelength < 2048 ? kept : wavelength > 8192 ? divided : ramped)++;
    EXPECT_NEAR(llama[std::size_t(i)], want, 1e-7 + 1e-6 * want) << i;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(ramped, 0);
  // YaRN: pairs below floor(23.6) = 23 (32 turns over the trained context) kept, from ceil(39.65) = 40
  // (1 turn) on divided by 4, a linear ramp between; cos and sin times 0.1 ln 4 + 1.
  const auto yarn = value_or_die(ops::rope_cache(4, rot, 1e6, {.type = RopeScalingType::yarn, .factor = 4, .original_max_positions = 32768}));
  const std::vector<double> f_yarn = frequencies(yarn);
  for (std::int64_t i = 0; i < half; ++i) {
    const double f = plain(1e6, i), ramp = std::clamp((double(i) - 23) / (40 - 23), 0.0, 1.0);
    EXPECT_NEAR(f_yarn[std::size_t(i)], f / 4 * ramp + f * (1 - ramp), 1e-7 + 1e-6 * f) << i;
    EXPECT_NEAR(std::hypot(yarn.first.data_as<float>()[half + i], yarn.second.data_as<float>()[half + i]), 0.1 * std::log(4.0) + 1, 1e-6);
  }
  EXPECT_FLOAT_EQ(yarn.first.data_as<float>()[0], float(0.1 * std::log(4.0) + 1));  // position 0: cos 1 times the factor
  const auto yarn_own = value_or_die(
      ops::rope_cache(4, rot, 1e6, {.type = RopeScalingType::yarn, .factor = 4, .original_max_positions = 32768, .attention_factor = 1}));
  EXPECT_FLOAT_EQ(yarn_own.first.data_as<float>()[0], 1.0f);
  // Untruncated (gpt-oss): the ramp from 23.596 to 39.651, its ends as they come.
  const auto untruncated = frequencies(value_or_die(
      ops::rope_cache(4, rot, 1e6, {.type = RopeScalingType::yarn, .factor = 4, .original_max_positions = 32768, .truncate = false})));
  for (std::int64_t i = 0; i < half; ++i) {
    const double f = plain(1e6, i), ramp = std::clamp((double(i) - 23.5959) / (39.6509 - 23.5959), 0.0, 1.0);
    EXPECT_NEAR(untruncated[std::size_t(i)], f / 4 * ramp + f * (1 - ramp), 1e-4 * f) << i;
  }
  // The ramp's end clamped to the last dim: theta 10, R 16, trained at 1024
  // (pairs 5.66 and 17.70 rounded out to 5 and 18, clamped to 15).
  const auto clamped = frequencies(value_or_die(
      ops::rope_cache(4, 16, 10, {.type = RopeScalingType::yarn, .factor = 4, .original_max_positions = 1024, .attention_factor = 1})));
  for (std::int64_t i = 0; i < 8; ++i) {
    const double f = std::pow(10.0, -2.0 * double(i) / 16), ramp = std::clamp((double(i) - 5) / (15 - 5), 0.0, 1.0);
    EXPECT_NEAR(clamped[std::size_t(i)], f / 4 * ramp + f * (1 - ramp), 1e-7 + 1e-6 * f) << i;
  }
  // Both ends at pair 0 (trained at 6 positions, under one turn of any
  // pair): a ramp of 0.001, pair 0 kept and the rest divided.
  const auto collapsed = frequencies(value_or_die(
      ops::rope_cache(4, rot, 1e4, {.type = RopeScalingType::yarn, .factor = 4, .original_max_positions = 6, .attention_factor = 1})));
  for (std::int64_t i = 0; i < half; ++i) EXPECT_NEAR(collapsed[std::size_t(i)], plain(1e4, i) / (i == 0 ? 1 : 4), 1e-7) << i;
}

}  // namespace
}  // namespace tessera::testing
