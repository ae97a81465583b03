// `tessera demo --diffusion`: one denoising step through one path of a
// Stable Diffusion 1.x UNet at a 64 x 64 latent, built from the blocks of
// tessera/models/diffusion.hpp with random weights:
//
//   64x64:   conv_in 4 -> 320, resnet 320, transformer 320          (skip a)
//            downsample
//   32x32:   resnet 320 -> 640, transformer 640                     (skip b)
//   mid:     resnet 640, transformer 640, resnet 640
//   32x32:   concat b, resnet 1280 -> 640, transformer 640, upsample
//   64x64:   concat a, resnet 960 -> 320, transformer 320,
//            GroupNorm + SiLU, conv_out 320 -> 4
//
// Each stage is timed fused and unfused; the fused step also runs under the
// profiler, whose table shows where its time goes op by op.
#include "demo_diffusion.hpp"

#include <fmt/format.h>

#include <array>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "tessera/models/diffusion.hpp"

namespace tessera::app {

namespace {

using Clock = std::chrono::steady_clock;
using models::BlockMode;

constexpr std::int64_t kLatentSide = 64, kLatentChannels = 4, kContextLen = 77, kContextDim = 768;
constexpr std::int64_t kUnetHeads = 8, kUnetGroups = 32;
constexpr float kUnetEps = 1e-5f;

void expect_ok(const Status& s) {
  if (!s.ok()) throw std::runtime_error(s.to_string());
}

struct Stage {
  std::string name;
  Tensor out;
  std::function<Status(Stream&, models::Workspace&, BlockMode)> run;
  std::array<double, 2> ms{};  // of the timed pass: fused, unfused
};

// The UNet path's weights, each block's own.
struct Unet {
  models::ConvLayer conv_in, downsample, upsample, conv_out;
  models::ResnetBlockWeights down_a, down_b, mid_1, mid_2, up_b, up_a;
  models::TransformerBlockWeights attn_down_a, attn_down_b, attn_mid, attn_up_b, attn_up_a;
  models::NormWeights norm_out;
};

Unet make_unet(DType weights) {
  Unet u;
  auto resnet = [weights](std::int64_t in, std::int64_t out, std::uint64_t seed) {
    return must(models::random_resnet_block(in, out, kUnetGroups, seed, weights));
  };
  auto transformer = [weights](std::int64_t c, std::uint64_t seed) {
    return must(models::random_transformer_block(c, kUnetHeads, kContextDim, kUnetGroups, seed, weights));
  };
  u.conv_in = must(models::random_conv(kLatentChannels, 320, 3, 1, weights));
  u.down_a = resnet(320, 320, 2);
  u.attn_down_a = transformer(320, 3);
  u.downsample = must(models::random_conv(320, 320, 3, 4, weights));
  u.down_b = resnet(320, 640, 5);
  u.attn_down_b = transformer(640, 6);
  u.mid_1 = resnet(640, 640, 7);
  u.attn_mid = transformer(640, 8);
  u.mid_2 = resnet(640, 640, 9);
  u.up_b = resnet(1280, 640, 10);
  u.attn_up_b = transformer(640, 11);
  u.upsample = must(models::random_conv(640, 640, 3, 12, weights));
  u.up_a = resnet(960, 320, 13);
  u.attn_up_a = transformer(320, 14);
  u.norm_out = must(models::random_norm(320, 15));
  u.conv_out = must(models::random_conv(320, kLatentChannels, 3, 16, weights));
  return u;
}

// The step's stages from `latent` and `context`; the last one's out is the step's output.
std::vector<Stage> make_stages(const Unet& u, const Tensor& latent, const Tensor& context) {
  using Run = std::function<Status(Stream&, models::Workspace&, BlockMode)>;
  std::vector<Stage> stages;
  auto act = [](std::int64_t side, std::int64_t channels) {
    return must(Tensor::zeros(DType::f32, {1, side, side, channels}));
  };
  // Adds a stage writing y; returns y, the next stage's input.
  auto add = [&](std::string name, const Tensor& y, Run run) {
    stages.push_back({std::move(name), y, std::move(run), {}});
    return y;
  };
  // Each resnet gets the time embedding as its own projection would give it, [1, Cout].
  std::uint64_t temb_seed = 100;
  auto resnet = [&](std::string name, const models::ResnetBlockWeights& w, const Tensor& x) {
    const std::int64_t out_channels = w.conv1.w->out_channels();
    const Tensor temb = demo_weight({1, out_channels}, temb_seed++, 1.0f), y = act(x.dim(1), out_channels);
    return add(std::move(name), y, [&w, x, temb, y](Stream& s, models::Workspace& ws, BlockMode mode) {
      return models::resnet_block(s, w, x, temb, y, ws, mode);
    });
  };
  auto transformer = [&](std::string name, const models::TransformerBlockWeights& w, const Tensor& x) {
    const Tensor y = act(x.dim(1), x.dim(3));
    return add(std::move(name), y, [&w, x, context, y](Stream& s, models::Workspace& ws, BlockMode mode) {
      return models::transformer_block(s, w, x, context, y, ws, mode);
    });
  };
  // The up path's skip connection: x's channels, then the skip's.
  auto concat = [&](std::string name, const Tensor& x, const Tensor& skip) {
    const Tensor y = act(x.dim(1), x.dim(3) + skip.dim(3));
    return add(std::move(name), y, [x, skip, y](Stream& s, models::Workspace&, BlockMode) {
      const Tensor parts[] = {x, skip};
      return ops::concat(s, parts, 3, y);
    });
  };
  const std::int64_t side = kLatentSide, half = kLatentSide / 2;

  Tensor h = act(side, 320);
  add("conv_in", h, [&u, latent, h](Stream& s, models::Workspace&, BlockMode mode) {
    return models::conv_layer(s, u.conv_in, latent, h, {.padding = {1, 1}}, mode);
  });
  h = resnet("down.resnet 320", u.down_a, h);
  const Tensor skip_a = transformer("down.transformer 320", u.attn_down_a, h);
  h = act(half, 320);
  add("downsample 64->32", h, [&u, skip_a, h](Stream& s, models::Workspace&, BlockMode mode) {
    return models::downsample(s, u.downsample, skip_a, h, mode);
  });
  h = resnet("down.resnet 320->640", u.down_b, h);
  const Tensor skip_b = transformer("down.transformer 640", u.attn_down_b, h);
  h = resnet("mid.resnet1 640", u.mid_1, skip_b);
  h = transformer("mid.transformer 640", u.attn_mid, h);
  h = resnet("mid.resnet2 640", u.mid_2, h);
  h = concat("up.concat 640+640", h, skip_b);
  h = resnet("up.resnet 1280->640", u.up_b, h);
  const Tensor low = transformer("up.transformer 640", u.attn_up_b, h);
  h = act(side, 640);
  add("upsample 32->64", h, [&u, low, h](Stream& s, models::Workspace& ws, BlockMode mode) {
    return models::upsample(s, u.upsample, low, h, ws, mode);
  });
  h = concat("up.concat 640+320", h, skip_a);
  h = resnet("up.resnet 960->320", u.up_a, h);
  const Tensor top = transformer("up.transformer 320", u.attn_up_a, h);
  h = act(side, 320);
  add("norm_out+silu", h, [&u, top, h](Stream& s, models::Workspace&, BlockMode mode) {
    return models::group_norm_silu(s, u.norm_out, kUnetGroups, kUnetEps, top, h, mode);
  });
  const Tensor out = act(side, kLatentChannels);
  add("conv_out", out, [&u, h, out](Stream& s, models::Workspace&, BlockMode mode) {
    return models::conv_layer(s, u.conv_out, h, out, {.padding = {1, 1}}, mode);
  });
  return stages;
}

// Runs every stage in order; records each stage's time when `record`. Returns the pass's ms.
double run_pass(std::vector<Stage>& stages, Stream& stream, models::Workspace& workspace, BlockMode mode, bool record) {
  const auto t0 = Clock::now();
  for (Stage& stage : stages) {
    const auto s0 = Clock::now();
    if (Status st = stage.run(stream, workspace, mode); !st.ok())
      throw std::runtime_error(stage.name + ": " + st.to_string());
    if (record)
      stage.ms[mode == BlockMode::fused ? 0 : 1] = std::chrono::duration<double, std::milli>(Clock::now() - s0).count();
  }
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

void run_diffusion_demo(const DemoOptions& opt) {
  if (opt.weights != "f32" && opt.weights != "bf16")
    throw std::runtime_error(fmt::format("--weights {}: the diffusion step takes f32 or bf16 weights", opt.weights));
  const DType weights = opt.weights == "bf16" ? DType::bf16 : DType::f32;
  Context ctx({.threads = opt.threads});
  Stream stream(ctx);
  const Unet unet = make_unet(weights);
  const Tensor latent = demo_weight({1, kLatentSide, kLatentSide, kLatentChannels}, 90, 1.0f);
  const Tensor context = demo_weight({1, kContextLen, kContextDim}, 91, 1.0f);
  std::vector<Stage> stages = make_stages(unet, latent, context);
  const Tensor& out = stages.back().out;
  fmt::print(
      "diffusion step: one Stable Diffusion 1.x UNet path (down, mid, up) at a {0}x{0}x{1} latent, 320 / 640 "
      "channels, {2} heads, text context {3} x {4}; f32 NHWC activations, batch 1, random {5} conv and linear weights\n",
      kLatentSide, kLatentChannels, kUnetHeads, kContextLen, kContextDim, opt.weights);
  fmt::print("isa {}, {} threads; each mode: a warm-up pass, then one timed pass\n\n", hw::to_string(ctx.isa()),
             ctx.pool().threads());

  models::Workspace fused_ws, unfused_ws;
  run_pass(stages, stream, fused_ws, BlockMode::fused, false);
  ctx.profiler().start();
  const double fused_ms = run_pass(stages, stream, fused_ws, BlockMode::fused, true);
  ctx.profiler().stop();
  const Tensor fused_out = must(Tensor::empty(DType::f32, out.shape()));
  expect_ok(copy(out, fused_out));
  run_pass(stages, stream, unfused_ws, BlockMode::unfused, false);
  const double unfused_ms = run_pass(stages, stream, unfused_ws, BlockMode::unfused, true);

  fmt::print("{:<24} {:<20} {:>10} {:>12} {:>9}\n", "stage", "output", "fused ms", "unfused ms", "speedup");
  for (const Stage& s : stages)
    fmt::print("{:<24} {:<20} {:>10.2f} {:>12.2f} {:>8.2f}x\n", s.name, s.out.shape().to_string(), s.ms[0], s.ms[1],
               s.ms[1] / s.ms[0]);
  fmt::print("{:<24} {:<20} {:>10.2f} {:>12.2f} {:>8.2f}x\n", "total (step)", "", fused_ms, unfused_ms,
             unfused_ms / fused_ms);
  fmt::print("workspace: {:.0f} MiB fused, {:.0f} MiB unfused (the unfused attention's scores)\n\n",
             double(fused_ws.bytes()) / (1 << 20), double(unfused_ws.bytes()) / (1 << 20));

  fmt::print("the fused step op by op (profiler):\n\n{}", ctx.profiler().table(25));
  // The longest sum behind an output: up.resnet's conv over 3 x 3 x 1280 inputs.
  const Comparison c = must(compare(out, fused_out, tolerance_for(weights, 9 * 1280)));
  fmt::print("\nunfused output against fused: {}\n", c.to_string());
}

}  // namespace tessera::app
