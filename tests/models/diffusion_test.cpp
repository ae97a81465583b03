// The diffusion blocks (tessera/models/diffusion.hpp): each block, fused and
// unfused at every ISA level, against the composition of the reference ops
// (the unfused block on the scalar kernels), at small sizes.
#include <functional>

#include "support/harness.hpp"
#include "tessera/models/diffusion.hpp"

namespace tessera::testing {
namespace {

using models::BlockMode;

constexpr std::int64_t kChannels = 32, kGroups = 8, kHeads = 8, kContextLen = 5, kContextDim = 16;

// One block call into y, on a stream with a workspace, in a mode.
using BlockCall = std::function<Status(Stream&, const Tensor& y, models::Workspace&, BlockMode)>;

class DiffusionBlockTest : public IsaTest {
 protected:
  // The block fused and unfused at this level, each against the unfused
  // block on the scalar kernels. `reduction`: the longest sum behind an
  // output element; `weights`: the blocks' weights, whose dtype picks the
  // tolerance (tolerance_for).
  void expect_matches_reference(const Shape& y_shape, std::int64_t reduction, const BlockCall& block,
                                DType weights = DType::f32) {
    Tensor fused = zeros(DType::f32, y_shape), unfused = zeros(DType::f32, y_shape), ref = zeros(DType::f32, y_shape);
    models::Workspace fused_ws, unfused_ws, ref_ws;
    const Status r = block(ref_stream_, ref, ref_ws, BlockMode::unfused);
    ASSERT_TRUE(r.ok()) << r.to_string();
    const Status f = block(stream_, fused, fused_ws, BlockMode::fused);
    ASSERT_TRUE(f.ok()) << f.to_string();
    const Status u = block(stream_, unfused, unfused_ws, BlockMode::unfused);
    ASSERT_TRUE(u.ok()) << u.to_string();
    const Tolerance tol = tolerance_for(weights, reduction);
    EXPECT_TRUE(close(fused, ref, tol)) << "fused";
    EXPECT_TRUE(close(unfused, ref, tol)) << "unfused";
    // A second call on the same workspace reuses its tensors and gives the same bits.
    Tensor again = zeros(DType::f32, y_shape);
    const Status a = block(stream_, again, fused_ws, BlockMode::fused);
    ASSERT_TRUE(a.ok()) << a.to_string();
    EXPECT_TRUE(identical(again, fused));
  }
};

TEST_P(DiffusionBlockTest, ResnetKeepingChannels) {
  const auto w = value_or_die(models::random_resnet_block(kChannels, kChannels, kGroups, 1));
  const Tensor x = random_tensor(DType::f32, {2, 8, 8, kChannels}, 2),
               temb = random_tensor(DType::f32, {2, kChannels}, 3);
  expect_matches_reference({2, 8, 8, kChannels}, 9 * kChannels,
                           [&](Stream& s, const Tensor& y, models::Workspace& ws, BlockMode m) {
                             return models::resnet_block(s, w, x, temb, y, ws, m);
                           });
}

TEST_P(DiffusionBlockTest, ResnetChangingChannelsThroughTheSkipConv) {
  const auto w = value_or_die(models::random_resnet_block(kChannels, 48, kGroups, 4));
  const Tensor x = random_tensor(DType::f32, {1, 7, 6, kChannels}, 5), temb = random_tensor(DType::f32, {1, 48}, 6);
  expect_matches_reference({1, 7, 6, 48}, 9 * 48, [&](Stream& s, const Tensor& y, models::Workspace& ws, BlockMode m) {
    return models::resnet_block(s, w, x, temb, y, ws, m);
  });
}

TEST_P(DiffusionBlockTest, ResnetAndTransformerWithBf16Weights) {
  // bf16 conv and linear weights: the 3x3 convs as Winograd F(4x4, 3x3)
  // where AMX is absent, the linears on bf16 dot products.
  const auto resnet = value_or_die(models::random_resnet_block(kChannels, 48, kGroups, 25, DType::bf16));
  const Tensor x = random_tensor(DType::f32, {1, 9, 10, kChannels}, 26), temb = random_tensor(DType::f32, {1, 48}, 27);
  expect_matches_reference(
      {1, 9, 10, 48}, 9 * 48,
      [&](Stream& s, const Tensor& y, models::Workspace& ws, BlockMode m) { return models::resnet_block(s, resnet, x, temb, y, ws, m); },
      DType::bf16);
  const auto transformer = value_or_die(models::random_transformer_block(kChannels, kHeads, kContextDim, kGroups, 28, DType::bf16));
  const Tensor context = random_tensor(DType::f32, {1, kContextLen, kContextDim}, 29), h = random_tensor(DType::f32, {1, 8, 8, kChannels}, 30);
  expect_matches_reference(
      {1, 8, 8, kChannels}, kChannels / kGroups * 64,  // as the f32 transformer test
      [&](Stream& s, const Tensor& y, models::Workspace& ws, BlockMode m) {
        return models::transformer_block(s, transformer, h, context, y, ws, m);
      },
      DType::bf16);
}

TEST_P(DiffusionBlockTest, ResnetWithoutTimeEmbedding) {
  const auto w = value_or_die(models::random_resnet_block(kChannels, kChannels, kGroups, 7));
  const Tensor x = random_tensor(DType::f32, {1, 8, 8, kChannels}, 8);
  expect_matches_reference({1, 8, 8, kChannels}, 9 * kChannels,
                           [&](Stream& s, const Tensor& y, models::Workspace& ws, BlockMode m) {
                             return models::resnet_block(s, w, x, Tensor(), y, ws, m);
                           });
}

// 8 heads of 4 (zero-padded to 16 for the flash rows) and 2 heads of 16.
TEST_P(DiffusionBlockTest, TransformerWithCrossAttention) {
  for (std::int64_t heads : {kHeads, std::int64_t(2)}) {
    SCOPED_TRACE(fmt::format("{} heads", heads));
    const auto w = value_or_die(models::random_transformer_block(kChannels, heads, kContextDim, kGroups, 9));
    const Tensor x = random_tensor(DType::f32, {2, 8, 8, kChannels}, 10);
    const Tensor context = random_tensor(DType::f32, {2, kContextLen, kContextDim}, 11);
    // The longest sum: the GroupNorm's group of C / groups channels x 64 pixels.
    expect_matches_reference({2, 8, 8, kChannels}, kChannels / kGroups * 64,
                             [&](Stream& s, const Tensor& y, models::Workspace& ws, BlockMode m) {
                               return models::transformer_block(s, w, x, context, y, ws, m);
                             });
  }
}

TEST_P(DiffusionBlockTest, VaeMidBlock) {
  const auto w = value_or_die(models::random_vae_mid_block(kChannels, kGroups, 12));
  const Tensor x = random_tensor(DType::f32, {1, 8, 8, kChannels}, 13);
  expect_matches_reference({1, 8, 8, kChannels}, 9 * kChannels,
                           [&](Stream& s, const Tensor& y, models::Workspace& ws, BlockMode m) {
                             return models::vae_mid_block(s, w, x, y, ws, m);
                           });
}

TEST_P(DiffusionBlockTest, DownsampleOddSizes) {
  const auto conv = value_or_die(models::random_conv(kChannels, 48, 3, 14));
  const Tensor x = random_tensor(DType::f32, {1, 9, 8, kChannels}, 15);
  expect_matches_reference({1, 5, 4, 48}, 9 * kChannels,
                           [&](Stream& s, const Tensor& y, models::Workspace&, BlockMode m) {
                             return models::downsample(s, conv, x, y, m);
                           });
}

TEST_P(DiffusionBlockTest, UpsampleFusedIntoTheConv) {
  const auto conv = value_or_die(models::random_conv(kChannels, kChannels, 3, 16));
  const Tensor x = random_tensor(DType::f32, {2, 4, 5, kChannels}, 17);
  expect_matches_reference({2, 8, 10, kChannels}, 9 * kChannels,
                           [&](Stream& s, const Tensor& y, models::Workspace& ws, BlockMode m) {
                             return models::upsample(s, conv, x, y, ws, m);
                           });
}

TEST_P(DiffusionBlockTest, GroupNormSilu) {
  const auto norm = value_or_die(models::random_norm(kChannels, 18));
  const Tensor x = random_tensor(DType::f32, {1, 6, 6, kChannels}, 19);
  expect_matches_reference({1, 6, 6, kChannels}, kChannels / kGroups * 36,
                           [&](Stream& s, const Tensor& y, models::Workspace&, BlockMode m) {
                             return models::group_norm_silu(s, norm, kGroups, 1e-5f, x, y, m);
                           });
}

// One workspace for blocks of different sizes, one after the other: each
// slot grows to the largest request and the results do not change.
TEST_P(DiffusionBlockTest, OneWorkspaceSharedByBlocks) {
  const auto resnet = value_or_die(models::random_resnet_block(kChannels, 48, kGroups, 20));
  const auto transformer = value_or_die(models::random_transformer_block(48, kHeads, kContextDim, kGroups, 21));
  const Tensor x = random_tensor(DType::f32, {1, 8, 8, kChannels}, 22), temb = random_tensor(DType::f32, {1, 48}, 23);
  const Tensor context = random_tensor(DType::f32, {1, kContextLen, kContextDim}, 24);
  Tensor h = zeros(DType::f32, {1, 8, 8, 48}), y = zeros(DType::f32, {1, 8, 8, 48}),
         y_alone = zeros(DType::f32, {1, 8, 8, 48});
  models::Workspace shared, alone;
  for (BlockMode mode : {BlockMode::fused, BlockMode::unfused}) {
    ASSERT_TRUE(models::transformer_block(stream_, transformer, h, context, y, shared, mode).ok());
    ASSERT_TRUE(models::resnet_block(stream_, resnet, x, temb, h, shared, mode).ok());
    ASSERT_TRUE(models::transformer_block(stream_, transformer, h, context, y, shared, mode).ok());
    ASSERT_TRUE(models::transformer_block(stream_, transformer, h, context, y_alone, alone, mode).ok());
    EXPECT_TRUE(identical(y, y_alone)) << to_string(mode);
  }
  EXPECT_GT(shared.bytes(), 0);
}

INSTANTIATE_TEST_SUITE_P(Isa, DiffusionBlockTest, ::testing::ValuesIn(isa_levels()), isa_name);

TEST(DiffusionWeights, DeterministicInTheSeed) {
  const auto a = value_or_die(models::random_linear(24, 40, true, 5)),
             b = value_or_die(models::random_linear(24, 40, true, 5));
  const auto c = value_or_die(models::random_linear(24, 40, true, 6));
  const Tensor wa = value_or_die(a.w->unpack()), wb = value_or_die(b.w->unpack()), wc = value_or_die(c.w->unpack());
  EXPECT_TRUE(identical(wa, wb));
  EXPECT_TRUE(identical(a.bias, b.bias));
  EXPECT_FALSE(identical(wa, wc));
}

TEST(DiffusionErrors, BlocksNameTheArgument) {
  Context ctx;
  Stream s(ctx);
  models::Workspace ws;
  const auto resnet = value_or_die(models::random_resnet_block(kChannels, 48, kGroups, 1));
  const Tensor x = random_tensor(DType::f32, {1, 4, 4, kChannels}, 2), temb = random_tensor(DType::f32, {1, 48}, 3);
  const Tensor y = zeros(DType::f32, {1, 4, 4, 48});
  EXPECT_TRUE(
      fails_naming(models::resnet_block(s, resnet, random_tensor(DType::f32, {1, 4, 4, 16}, 4), temb, y, ws), "x"));
  EXPECT_TRUE(
      fails_naming(models::resnet_block(s, resnet, x, random_tensor(DType::f32, {1, kChannels}, 5), y, ws), "temb"));
  EXPECT_TRUE(fails_naming(models::resnet_block(s, resnet, x, temb, zeros(DType::f32, {1, 4, 4, kChannels}), ws), "y"));
  models::ResnetBlockWeights no_skip = resnet;
  no_skip.skip = {};
  EXPECT_TRUE(fails_naming(models::resnet_block(s, no_skip, x, temb, y, ws), "w.skip"));
  models::ResnetBlockWeights bad_groups = resnet;
  bad_groups.groups = 5;
  EXPECT_TRUE(fails_naming(models::resnet_block(s, bad_groups, x, temb, y, ws), "w.groups"));

  const auto transformer = value_or_die(models::random_transformer_block(kChannels, kHeads, kContextDim, kGroups, 6));
  const Tensor context = random_tensor(DType::f32, {1, kContextLen, kContextDim}, 7);
  const Tensor ty = zeros(DType::f32, x.shape());
  EXPECT_TRUE(fails_naming(
      models::transformer_block(s, transformer, x, random_tensor(DType::f32, {1, kContextLen}, 8), ty, ws), "context"));
  EXPECT_TRUE(
      fails_naming(models::transformer_block(s, transformer, x,
                                             random_tensor(DType::f32, {1, kContextLen, 2 * kContextDim}, 9), ty, ws),
                   "w.cross_attn.k"));
  models::TransformerBlockWeights bad_heads = transformer;
  bad_heads.heads = 5;
  EXPECT_TRUE(fails_naming(models::transformer_block(s, bad_heads, x, context, ty, ws), "w.heads"));

  EXPECT_TRUE(
      fails_naming(models::upsample(s, models::ConvLayer{}, x, zeros(DType::f32, {1, 8, 8, kChannels}), ws), "conv"));
  EXPECT_TRUE(
      fails_naming(models::downsample(s, models::ConvLayer{}, x, zeros(DType::f32, {1, 2, 2, kChannels})), "conv"));
}

}  // namespace
}  // namespace tessera::testing
