// Conv2d: every kernel path (the 1x1 GEMM, the implicit GEMM, grouped,
// depthwise, reading x upsampled) against a naive fp64 reference at every ISA
// level, in f32 and through bf16; the fused epilogue and upsample against the
// separate ops; NCHW views; the packed weights; and the errors.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/element.hpp"
#include "core/strided.hpp"
#include "kernels/activation.hpp"
#include "support/harness.hpp"
#include "tessera/ops/conv.hpp"

namespace tessera::testing {
namespace {

using ops::Activation;
using ops::ConvAttrs;
using ops::ConvWeights;
using ops::ConvWeightsPtr;
using ops::EpilogueTensors;

// One convolution: x [n, h, w, c], weights [cout, c / groups, kh, kw].
struct Case {
  std::int64_t n, h, w, c, cout, kh, kw;
  ConvAttrs attrs{};

  Shape x_shape() const { return {n, h, w, c}; }
  Shape w_shape() const { return {cout, c / attrs.groups, kh, kw}; }
  // Computed here from the formula in conv.hpp, not by the code under test.
  Shape y_shape() const {
    const std::int64_t up = attrs.upsample_nearest2x ? 2 : 1;
    const auto out = [&](std::int64_t in, std::int64_t k, int d) {
      return (up * in + 2 * attrs.padding[d] - attrs.dilation[d] * (k - 1) - 1) / attrs.stride[d] + 1;
    };
    return {n, out(h, kh, 0), out(w, kw, 1), cout};
  }
  // The length of the sum behind each output element.
  std::int64_t reduction() const { return kh * kw * (c / attrs.groups); }
  std::string name() const {
    const ConvAttrs& a = attrs;
    return fmt::format("x [{}, {}, {}, {}] w [{}, {}, {}, {}] stride {}x{} pad {}x{} dilation {}x{} groups {}{}", n, h, w, c,
                       cout, c / a.groups, kh, kw, a.stride[0], a.stride[1], a.padding[0], a.padding[1], a.dilation[0],
                       a.dilation[1], a.groups, a.upsample_nearest2x ? " upsample x2" : "");
  }
};

// The dtypes of one run: x (and the OIHW weights handed to pack), the packed GEMM rows, y.
struct Types {
  DType x, w, y;

  std::string name() const { return fmt::format("x {} w {} y {}", to_string(x), to_string(w), to_string(y)); }
  // A result computed through bf16 operands is held to the bf16 tolerance
  // even when stored as f32 (compare.hpp).
  Tolerance tolerance(std::int64_t reduction) const {
    const bool through_bf16 = x == DType::bf16 || w == DType::bf16 || y == DType::bf16;
    return tolerance_for(through_bf16 ? DType::bf16 : DType::f32, reduction);
  }
};

const Types kTypes[] = {{DType::f32, DType::f32, DType::f32},
                        {DType::bf16, DType::bf16, DType::bf16},
                        {DType::f32, DType::bf16, DType::f32}};

// ------------------------------------------------------------- fp64 reference

// t's elements in row-major order of its shape (any float dtype, any strides,
// broadcast dims included), widened to double.
std::vector<double> values(const Tensor& t) {
  const auto dims = detail::collapse<1>(t.shape(), {t.strides()});
  std::vector<double> v(static_cast<std::size_t>(t.numel()));
  for (std::int64_t i = 0; i < t.numel(); ++i) v[std::size_t(i)] = detail::load(t.data(), t.dtype(), dims.offsets(i)[0]);
  return v;
}

// act(scale * conv(x, w) + bias) + residual straight from the formula in
// conv.hpp, accumulated in fp64 and rounded once to f32. w is OIHW.
Tensor naive_conv(const Case& k, const Tensor& x, const Tensor& w, const EpilogueTensors& e = {}) {
  const ConvAttrs& a = k.attrs;
  const Shape ys = k.y_shape();
  const std::int64_t cig = k.c / a.groups, cog = k.cout / a.groups;
  const std::int64_t up = a.upsample_nearest2x ? 2 : 1;  // x is read at (ih / 2, iw / 2)
  const std::vector<double> xv = values(x), wv = values(w);
  const std::vector<double> bias = e.bias.defined() ? values(e.bias) : std::vector<double>(std::size_t(k.cout), 0.0);
  const std::vector<double> residual = e.residual.defined() ? values(e.residual) : std::vector<double>();
  Tensor y = zeros(DType::f32, ys);
  float* out = y.data_as<float>();
  std::int64_t i = 0;
  for (std::int64_t n = 0; n < k.n; ++n)
    for (std::int64_t oh = 0; oh < ys[1]; ++oh)
      for (std::int64_t ow = 0; ow < ys[2]; ++ow)
        for (std::int64_t co = 0; co < k.cout; ++co, ++i) {
          const std::int64_t g = co / cog;
          double acc = 0;
          for (std::int64_t kh = 0; kh < k.kh; ++kh) {
            const std::int64_t ih = oh * a.stride[0] - a.padding[0] + kh * a.dilation[0];
            if (ih < 0 || ih >= up * k.h) continue;
            for (std::int64_t kw = 0; kw < k.kw; ++kw) {
              const std::int64_t iw = ow * a.stride[1] - a.padding[1] + kw * a.dilation[1];
              if (iw < 0 || iw >= up * k.w) continue;
              const double* xp = &xv[std::size_t(((n * k.h + ih / up) * k.w + iw / up) * k.c + g * cig)];
              const double* wp = &wv[std::size_t((co * cig * k.kh + kh) * k.kw + kw)];
              for (std::int64_t ci = 0; ci < cig; ++ci) acc += xp[ci] * wp[ci * k.kh * k.kw];
            }
          }
          double v = kernels::ref::activate(double(e.scale) * acc + bias[std::size_t(co)], kernels::Act(e.activation));
          if (!residual.empty()) v += residual[std::size_t(i)];
          out[i] = float(v);
        }
  return y;
}

// ------------------------------------------------------------------ the paths

ConvWeightsPtr pack(const Tensor& w, std::int64_t groups, DType dtype = DType::f32) {
  return value_or_die(ConvWeights::pack(w, groups, dtype));
}

// Conv2d::plan and run (inputs {x, [bias], [residual]}), with a workspace from
// the pool when the plan asks for one.
Status run_plan(Stream& stream, const Tensor& x, const ConvWeightsPtr& w, const Tensor& y, const ConvAttrs& attrs,
                const EpilogueTensors& e = {}) {
  const auto desc_of = [](const Tensor& t) { return t.defined() ? std::optional(t.desc()) : std::nullopt; };
  const ops::Epilogue epilogue{.scale = e.scale, .activation = e.activation, .bias = desc_of(e.bias), .residual = desc_of(e.residual)};
  TESSERA_ASSIGN_OR_RETURN(auto plan, ops::Conv2d::plan(stream.context(), x.desc(), w, y.desc(), attrs, epilogue));
  std::vector<Tensor> inputs{x}, outputs{y};
  for (const Tensor* t : {&e.bias, &e.residual})
    if (t->defined()) inputs.push_back(*t);
  MemoryPool::Block workspace;
  if (plan->workspace_bytes() > 0) {
    TESSERA_ASSIGN_OR_RETURN(workspace, stream.context().memory().allocate(plan->workspace_bytes()));
  }
  TESSERA_RETURN_IF_ERROR(plan->run(stream, inputs, outputs, workspace.data()));
  return stream.synchronize();
}

Status run_one_shot(Stream& stream, const Tensor& x, const ConvWeightsPtr& w, const Tensor& y, const ConvAttrs& attrs,
                    const EpilogueTensors& e = {}) {
  TESSERA_RETURN_IF_ERROR(ops::conv2d(stream, x, w, y, attrs, e));
  return stream.synchronize();
}

class ConvTest : public IsaTest {
 protected:
  // x and the OIHW weights w_oihw at this test's ISA, through Conv2d::plan
  // (within tolerance of the fp64 reference) and through the one-shot conv2d
  // (bit-identical to the plan's result).
  void expect_matches_reference(const Case& k, const Types& t, const Tensor& x, const Tensor& w_oihw,
                                const EpilogueTensors& e = {}) {
    const ConvWeightsPtr w = pack(w_oihw, k.attrs.groups, t.w);
    const Result<Shape> shape = ops::conv2d_output_shape(k.x_shape(), *w, k.attrs);
    ASSERT_TRUE(shape.ok()) << shape.status().to_string();
    ASSERT_TRUE(*shape == k.y_shape()) << shape->to_string() << ", expected " << k.y_shape().to_string();
    const Tensor expected = naive_conv(k, x, w_oihw, e);
    Tensor y = zeros(t.y, k.y_shape()), y_one_shot = zeros(t.y, k.y_shape());
    const Status planned = run_plan(stream_, x, w, y, k.attrs, e);
    ASSERT_TRUE(planned.ok()) << planned.to_string();
    const Status one_shot = run_one_shot(stream_, x, w, y_one_shot, k.attrs, e);
    ASSERT_TRUE(one_shot.ok()) << one_shot.to_string();
    EXPECT_TRUE(close(y, expected, t.tolerance(k.reduction())));
    EXPECT_TRUE(identical(y_one_shot, y));
  }
};

// Each case's fp64 reference stays under ~40 MFLOP, so that the file runs in
// seconds at the scalar level.
std::vector<Case> reference_cases() {
  return {
      // 1x1: the GEMM over pixels; at stride 2 a gather; K past one 256-deep slice.
      {2, 7, 9, 17, 33, 1, 1},
      {1, 7, 9, 17, 33, 1, 1, {.stride = {2, 2}}},
      {2, 8, 8, 320, 64, 1, 1},
      // 3x3 at stride 1 and 2; RGB (3) and latent (4) input channels.
      {1, 9, 7, 3, 17, 3, 3, {.padding = {1, 1}}},
      {2, 9, 11, 33, 17, 3, 3, {.stride = {2, 2}, .padding = {1, 1}}},
      {1, 32, 32, 4, 32, 3, 3, {.padding = {1, 1}}},
      // 5x5, dilation, non-square kernels, strides and paddings that differ per axis.
      {1, 8, 7, 17, 24, 5, 5, {.padding = {2, 2}}},
      {1, 11, 9, 16, 20, 3, 3, {.padding = {2, 2}, .dilation = {2, 2}}},
      {1, 9, 10, 8, 12, 3, 3, {.padding = {0, 1}, .dilation = {2, 1}}},
      {1, 5, 9, 17, 19, 1, 3, {.padding = {0, 1}}},
      {1, 9, 5, 17, 19, 3, 1, {.padding = {1, 0}}},
      {1, 8, 10, 12, 8, 3, 3, {.stride = {1, 2}, .padding = {0, 2}}},
      // One-pixel inputs, and a kernel exactly the input's size.
      {2, 1, 1, 33, 17, 3, 3, {.padding = {1, 1}}},
      {1, 1, 1, 3, 3, 1, 1},
      {1, 3, 5, 8, 8, 3, 5},
      // Groups 2 and 4; a channel multiplier (groups = C, Cout = 2C: not
      // depthwise); depthwise at stride 1 and 2, and dilated.
      {1, 7, 9, 34, 18, 3, 3, {.padding = {1, 1}, .groups = 2}},
      {2, 6, 5, 32, 64, 3, 3, {.stride = {2, 2}, .padding = {1, 1}, .groups = 4}},
      {1, 5, 5, 12, 20, 1, 1, {.groups = 4}},
      {1, 7, 7, 8, 16, 3, 3, {.padding = {1, 1}, .groups = 8}},
      {2, 7, 9, 33, 33, 3, 3, {.padding = {1, 1}, .groups = 33}},
      {1, 9, 8, 48, 48, 3, 3, {.stride = {2, 2}, .padding = {1, 1}, .groups = 48}},
      {1, 10, 10, 17, 17, 5, 5, {.padding = {4, 4}, .dilation = {2, 2}, .groups = 17}},
      // Depthwise rows wide enough for blocks of 8 interior pixels (AVX2's
      // sliding window at stride 1), 3x3, 5x5 and 7x7, with pixels left over.
      {1, 5, 21, 20, 20, 3, 3, {.padding = {1, 1}, .groups = 20}},
      {1, 6, 14, 12, 12, 5, 5, {.padding = {2, 2}, .groups = 12}},
      {1, 9, 17, 9, 9, 7, 7, {.padding = {3, 3}, .groups = 9}},
      // x read upsampled x2: the UNet's upsample conv, a 1x1 and a strided
      // one; as sub-pixel phases (stride 1, no dilation), kernels of even
      // and odd sizes with paddings 0 to beyond the kernel, so that a phase
      // has 1 to 3 taps per axis, outputs of odd sizes (phases of different
      // sizes, one of none: a 1-row output), and a group over several K slices.
      {1, 4, 5, 17, 24, 3, 3, {.padding = {1, 1}, .upsample_nearest2x = true}},
      {1, 3, 5, 16, 8, 1, 1, {.upsample_nearest2x = true}},
      {2, 3, 4, 8, 8, 3, 3, {.stride = {2, 2}, .padding = {1, 1}, .upsample_nearest2x = true}},
      {1, 5, 4, 9, 12, 3, 3, {.upsample_nearest2x = true}},
      {2, 3, 4, 9, 12, 2, 2, {.padding = {1, 0}, .upsample_nearest2x = true}},
      {1, 4, 3, 8, 20, 5, 3, {.padding = {2, 3}, .upsample_nearest2x = true}},
      {1, 1, 3, 8, 8, 2, 1, {.upsample_nearest2x = true}},
      {1, 3, 3, 6, 9, 3, 3, {.padding = {1, 1}, .dilation = {2, 1}, .upsample_nearest2x = true}},
      {1, 4, 4, 200, 40, 3, 3, {.padding = {1, 1}, .groups = 2, .upsample_nearest2x = true}},
      // ... and with >= 16 channels a group in f32 each phase as Winograd
      // F(3x3, 2x2): padding 0 and 1, phases of different sizes, several blocks.
      {1, 4, 3, 16, 17, 3, 3, {.upsample_nearest2x = true}},
      {1, 5, 3, 16, 16, 3, 3, {.padding = {0, 1}, .upsample_nearest2x = true}},
      {1, 13, 15, 16, 16, 3, 3, {.padding = {1, 1}, .upsample_nearest2x = true}},
      // Diffusion UNet convs: a ResBlock conv and the downsample conv.
      {1, 16, 16, 64, 64, 3, 3, {.padding = {1, 1}}},
      // conv_out (UNet: 320 -> 4 channels, VAE decoder: 128 -> 3): a GEMM
      // of few columns (AVX2: dot products along K), K = 9 C with and
      // without a tail of 8.
      {1, 9, 11, 40, 4, 3, 3, {.padding = {1, 1}}},
      {1, 6, 7, 13, 3, 3, 3, {.padding = {1, 1}}},
      {1, 32, 32, 64, 64, 3, 3, {.stride = {2, 2}, .padding = {1, 1}}},
      // Larger: K = 1440 over several slices, Cout over several panels.
      {1, 8, 8, 160, 192, 3, 3, {.padding = {1, 1}}},
      // Winograd (f32, 3x3 stride 1, >= 16 channels a group): odd output
      // sizes (tiles cut by the edge), paddings 0 and 2 per axis, groups,
      // and more tiles than a task's block.
      {1, 6, 5, 16, 16, 3, 3},
      {1, 9, 7, 20, 19, 3, 3, {.padding = {2, 0}}},
      {1, 5, 6, 32, 34, 3, 3, {.padding = {1, 1}, .groups = 2}},
      {2, 30, 31, 16, 17, 3, 3, {.padding = {1, 1}}},
      // ... and stride 2 at pad 1 (>= 28 output tiles) over x's four phases:
      // even and odd sizes (phases of different sizes), groups, several blocks.
      {1, 33, 34, 20, 19, 3, 3, {.stride = {2, 2}, .padding = {1, 1}}},
      {2, 32, 31, 16, 16, 3, 3, {.stride = {2, 2}, .padding = {1, 1}}},
      {1, 34, 33, 32, 34, 3, 3, {.stride = {2, 2}, .padding = {1, 1}, .groups = 2}},
      {1, 67, 38, 16, 16, 3, 3, {.stride = {2, 2}, .padding = {1, 1}}},
  };
}

TEST_P(ConvTest, MatchesNaiveReference) {
  std::uint64_t seed = 0;
  for (const Case& k : reference_cases())
    for (const Types& t : kTypes) {
      SCOPED_TRACE(fmt::format("{}, {}", k.name(), t.name()));
      // The OIHW weights may be any float dtype: bf16 runs hand pack bf16 ones.
      const Tensor x = random_tensor(t.x, k.x_shape(), ++seed), w = random_tensor(t.x, k.w_shape(), ++seed);
      expect_matches_reference(k, t, x, w);
    }
}

// One shape per kernel path: the 1x1 GEMM, the implicit GEMM, Winograd
// (stride 1; stride 2 over x's phases), grouped, depthwise, upsampling,
// few output channels.
const Case kEpilogueCases[] = {
    {2, 5, 7, 17, 33, 1, 1},
    {1, 7, 9, 24, 40, 3, 3, {.padding = {1, 1}}},
    {1, 33, 32, 16, 24, 3, 3, {.stride = {2, 2}, .padding = {1, 1}}},
    {1, 6, 7, 16, 24, 3, 3, {.stride = {2, 2}, .padding = {1, 1}, .groups = 4}},
    {2, 7, 9, 33, 33, 3, 3, {.padding = {1, 1}, .groups = 33}},
    {1, 4, 19, 24, 24, 3, 3, {.padding = {1, 1}, .groups = 24}},
    {1, 4, 5, 8, 16, 3, 3, {.padding = {1, 1}, .upsample_nearest2x = true}},
    {1, 4, 5, 16, 24, 3, 3, {.padding = {1, 1}, .upsample_nearest2x = true}},
    {1, 6, 7, 13, 3, 3, 3, {.padding = {1, 1}}},
};

TEST_P(ConvTest, FusedEpilogue) {
  for (const Case& k : kEpilogueCases)
    for (const Types& t : kTypes)
      for (Activation act : {Activation::none, Activation::relu, Activation::silu, Activation::gelu_erf}) {
        SCOPED_TRACE(fmt::format("{}, {}, {}", k.name(), t.name(), ops::to_string(act)));
        const Shape ys = k.y_shape();
        const Tensor x = random_tensor(t.x, k.x_shape(), 1, -2, 2), w = random_tensor(t.x, k.w_shape(), 2);
        const Tensor bias = random_tensor(t.x, {k.cout}, 3), residual = random_tensor(t.y, ys, 4);
        // A time embedding [N, 1, 1, Cout] added to every pixel.
        const Tensor embedding = value_or_die(random_tensor(t.y, {k.n, 1, 1, k.cout}, 5).expand(ys));
        expect_matches_reference(k, t, x, w, {.activation = act});
        expect_matches_reference(k, t, x, w, {.scale = 0.5f, .activation = act, .bias = bias, .residual = residual});
        expect_matches_reference(k, t, x, w, {.scale = 1.5f, .activation = act, .bias = bias, .residual = embedding});
      }
}

TEST_P(ConvTest, ResidualMayBeTheOutput) {
  // y = silu(conv(x) + bias) + y, in place, through both paths.
  for (const Case& k : {Case{2, 7, 9, 17, 24, 3, 3, {.padding = {1, 1}}}, Case{1, 5, 7, 16, 16, 1, 1},
                        Case{1, 32, 33, 16, 16, 3, 3, {.stride = {2, 2}, .padding = {1, 1}}},
                        Case{1, 6, 6, 32, 32, 3, 3, {.padding = {1, 1}, .groups = 32}},
                        Case{1, 3, 4, 16, 24, 3, 3, {.padding = {1, 1}, .upsample_nearest2x = true}}})
    for (const Types& t : kTypes) {
      SCOPED_TRACE(fmt::format("{}, {}", k.name(), t.name()));
      const Tensor x = random_tensor(t.x, k.x_shape(), 1), w_oihw = random_tensor(t.x, k.w_shape(), 2);
      const Tensor bias = random_tensor(DType::f32, {k.cout}, 3), y0 = random_tensor(t.y, k.y_shape(), 4);
      const ConvWeightsPtr w = pack(w_oihw, k.attrs.groups, t.w);
      const Tensor expected = naive_conv(k, x, w_oihw, {.activation = Activation::silu, .bias = bias, .residual = y0});
      const Tensor y = clone(y0), y_one_shot = clone(y0);
      Status s = run_plan(stream_, x, w, y, k.attrs, {.activation = Activation::silu, .bias = bias, .residual = y});
      ASSERT_TRUE(s.ok()) << s.to_string();
      s = run_one_shot(stream_, x, w, y_one_shot, k.attrs, {.activation = Activation::silu, .bias = bias, .residual = y_one_shot});
      ASSERT_TRUE(s.ok()) << s.to_string();
      EXPECT_TRUE(close(y, expected, t.tolerance(k.reduction())));
      EXPECT_TRUE(close(y_one_shot, expected, t.tolerance(k.reduction())));
    }
}

TEST_P(ConvTest, StridedViews) {
  // Unit channel strides, any others: pixels C + 3 apart (padded rows), every
  // other pixel of a wider row, and y and the residual padded.
  for (const Case& k : {Case{2, 7, 9, 17, 24, 3, 3, {.padding = {1, 1}}}, Case{2, 5, 7, 17, 24, 1, 1},
                        Case{1, 7, 9, 24, 24, 3, 3, {.stride = {2, 2}, .padding = {1, 1}, .groups = 24}},
                        Case{1, 31, 32, 16, 17, 3, 3, {.stride = {2, 2}, .padding = {1, 1}}},
                        Case{2, 3, 5, 17, 24, 3, 3, {.padding = {1, 1}, .upsample_nearest2x = true}}})
    for (const Types& t : kTypes) {
      SCOPED_TRACE(fmt::format("{}, {}", k.name(), t.name()));
      const Tensor wide = random_tensor(t.x, {k.n, k.h, 2 * k.w, k.c}, 1);
      const Tensor every_other = value_or_die(wide.slice(2, 0, 2 * k.w, 2));
      const Tensor w_oihw = random_tensor(t.x, k.w_shape(), 2), residual = random_tensor(t.y, k.y_shape(), 3);
      const ConvWeightsPtr w = pack(w_oihw, k.attrs.groups, t.w);
      for (const Tensor& x : {padded_copy(every_other), every_other}) {
        const Tensor y = padded_copy(zeros(t.y, k.y_shape()), 5);
        const Status s = run_plan(stream_, x, w, y, k.attrs, {.residual = padded_copy(residual, 2)});
        ASSERT_TRUE(s.ok()) << s.to_string();
        EXPECT_TRUE(close(y, naive_conv(k, x, w_oihw, {.residual = residual}), t.tolerance(k.reduction())));
      }
    }
}

TEST_P(ConvTest, WinogradWhereItPays) {
  // 3x3 stride 1 with >= 16 channels a group runs as Winograd where vector
  // transforms are, through bf16 weights too unless AMX multiplies them
  // (upsampling per 2x2 phase, and stride 2 at pad 1 per input phase, on f32
  // weights); with fewer channels, at other strides or paddings, and at the
  // scalar level it does not.
  const auto kernel = [&](const Case& k, DType w_dtype) {
    const ConvWeightsPtr w = pack(random_tensor(DType::f32, k.w_shape(), 1), k.attrs.groups, w_dtype);
    const Result<ops::PlanPtr> plan =
        ops::Conv2d::plan(ctx_, zeros(DType::f32, k.x_shape()).desc(), w, zeros(DType::f32, k.y_shape()).desc(), k.attrs);
    EXPECT_TRUE(plan.ok()) << plan.status().to_string();
    return plan.ok() ? std::string((*plan)->kernel()) : std::string();
  };
  const std::string winograd = ctx_.isa() >= hw::Isa::avx512 ? "winograd_avx512" : "winograd_avx2";
  const bool vector = ctx_.isa() >= hw::Isa::avx2;
  const Case wide{1, 8, 8, 16, 16, 3, 3, {.padding = {1, 1}}};
  EXPECT_EQ(kernel(wide, DType::f32) == winograd, vector) << kernel(wide, DType::f32);
  EXPECT_EQ(kernel(wide, DType::bf16) == winograd, vector && ctx_.isa() < hw::Isa::amx) << kernel(wide, DType::bf16);
  const Case stride2{1, 32, 32, 16, 16, 3, 3, {.stride = {2, 2}, .padding = {1, 1}}};  // 36 output tiles
  EXPECT_EQ(kernel(stride2, DType::f32) == winograd, vector) << kernel(stride2, DType::f32);
  EXPECT_NE(kernel(stride2, DType::bf16).substr(0, 8), "winograd");
  EXPECT_NE(kernel({1, 30, 30, 16, 16, 3, 3, {.stride = {2, 2}, .padding = {1, 1}}}, DType::f32).substr(0, 8), "winograd");  // 25
  EXPECT_NE(kernel({1, 8, 8, 16, 16, 3, 3, {.stride = {2, 2}}}, DType::f32).substr(0, 8), "winograd");
  EXPECT_NE(kernel({1, 8, 8, 16, 16, 3, 3, {.stride = {2, 1}, .padding = {1, 1}}}, DType::f32).substr(0, 8), "winograd");
  EXPECT_NE(kernel({1, 8, 8, 15, 16, 3, 3, {.padding = {1, 1}}}, DType::f32).substr(0, 8), "winograd");
  // An upsampling 3x3's 2x2 phases; a 5x5's are 3x3 (no Winograd row).
  const Case up{1, 4, 4, 16, 16, 3, 3, {.padding = {1, 1}, .upsample_nearest2x = true}};
  EXPECT_EQ(kernel(up, DType::f32) == winograd, vector) << kernel(up, DType::f32);
  EXPECT_NE(kernel({1, 4, 4, 16, 16, 5, 5, {.padding = {2, 2}, .upsample_nearest2x = true}}, DType::f32).substr(0, 8), "winograd");
}

TEST_P(ConvTest, WinogradFewTilesMakesUPerSlice) {
  // F(4x4, 3x3) (AVX-512 without AMX, through bf16) on 16 tiles or fewer
  // whose U would outgrow half of L3 makes U per slice from the direct
  // conv's packed weights: the plan moves the weights' bytes, not U's (36 /
  // 9 of f32). Odd channel counts (bf16 pairs across taps, a partial panel
  // of output channels), tiles cut by the edge, the epilogue.
  if (ctx_.isa() < hw::Isa::avx512 || ctx_.isa() >= hw::Isa::amx) GTEST_SKIP() << "F(4x4, 3x3) per slice: AVX-512 without AMX";
  std::int64_t c = 33;
  while (36 * c * c * 4 <= ctx_.hw().l3_bytes / 2) c += 32;
  if (c > 1024) GTEST_SKIP() << "an L3 this large needs a U too large for a test";
  const Case k{1, 7, 6, c, c + 17, 3, 3, {.padding = {1, 1}}};
  for (const Types& t : {kTypes[1], kTypes[2]}) {
    SCOPED_TRACE(fmt::format("{}, {}", k.name(), t.name()));
    const Tensor x = random_tensor(t.x, k.x_shape(), 1), w_oihw = random_tensor(t.x, k.w_shape(), 2);
    const Tensor bias = random_tensor(DType::f32, {k.cout}, 3), residual = random_tensor(t.y, k.y_shape(), 4);
    expect_matches_reference(k, t, x, w_oihw, {.activation = Activation::silu, .bias = bias, .residual = residual});
    const Result<ops::PlanPtr> plan = ops::Conv2d::plan(ctx_, x.desc(), pack(w_oihw, 1, t.w), zeros(t.y, k.y_shape()).desc(), k.attrs);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    EXPECT_EQ((*plan)->kernel(), "winograd_avx512");
    EXPECT_LT((*plan)->bytes_moved(), 36 * k.c * k.cout * 4);
  }
}

TEST_P(ConvTest, UpsampleEqualsResizeThenConv) {
  // At stride 1 without dilation the conv runs as sub-pixel phases whose
  // taps are sums of the kernel's: within tolerance of ops::resize, then the
  // conv. Otherwise (strided, and depthwise) it reads x as if upsampled,
  // multiplying exactly the values of the upsampled tensor in the same
  // order: the same bits.
  struct Fused {
    Case k;
    bool phases;
  };
  for (const auto& [k, phases] :
       {Fused{{2, 4, 5, 17, 24, 3, 3, {.padding = {1, 1}, .upsample_nearest2x = true}}, true},
        Fused{{1, 4, 4, 16, 16, 3, 3, {.padding = {1, 1}, .groups = 2, .upsample_nearest2x = true}}, true},
        Fused{{1, 3, 5, 16, 8, 3, 3, {.stride = {2, 1}, .padding = {1, 1}, .upsample_nearest2x = true}}, false},
        Fused{{1, 5, 4, 32, 32, 3, 3, {.padding = {1, 1}, .groups = 32, .upsample_nearest2x = true}}, false}})
    for (const Types& t : kTypes) {
      SCOPED_TRACE(fmt::format("{}, {}", k.name(), t.name()));
      const Tensor x = random_tensor(t.x, k.x_shape(), 1);
      const ConvWeightsPtr w = pack(random_tensor(t.x, k.w_shape(), 2), k.attrs.groups, t.w);
      const EpilogueTensors e{.activation = Activation::silu, .bias = random_tensor(DType::f32, {k.cout}, 3)};
      const Tensor upsampled = zeros(t.x, {k.n, 2 * k.h, 2 * k.w, k.c});
      ASSERT_TRUE(ops::resize(stream_, x, upsampled, {.channels_last = true}).ok());
      ConvAttrs plain = k.attrs;
      plain.upsample_nearest2x = false;
      const Tensor fused = zeros(t.y, k.y_shape()), unfused = zeros(t.y, k.y_shape());
      Status s = run_one_shot(stream_, x, w, fused, k.attrs, e);
      ASSERT_TRUE(s.ok()) << s.to_string();
      s = run_one_shot(stream_, upsampled, w, unfused, plain, e);
      ASSERT_TRUE(s.ok()) << s.to_string();
      if (phases) EXPECT_TRUE(close(fused, unfused, t.tolerance(k.reduction())));
      else EXPECT_TRUE(identical(fused, unfused));
    }
}

TEST_P(ConvTest, EpilogueEqualsSeparateOps) {
  // act(scale * conv + bias) + residual, fused, against the conv into f32 and
  // then mul, add, the activation and add as their own ops.
  const Case cases[] = {kEpilogueCases[1], kEpilogueCases[3]};
  for (const Case& k : cases)
    for (const Types& t : kTypes)
      for (Activation act : {Activation::relu, Activation::silu, Activation::gelu_erf}) {
        SCOPED_TRACE(fmt::format("{}, {}, {}", k.name(), t.name(), ops::to_string(act)));
        const Shape ys = k.y_shape();
        const Tensor x = random_tensor(t.x, k.x_shape(), 1, -2, 2);
        const ConvWeightsPtr w = pack(random_tensor(t.x, k.w_shape(), 2), k.attrs.groups, t.w);
        const Tensor bias = random_tensor(t.x, {k.cout}, 3), residual = random_tensor(t.y, ys, 4);
        const Tensor scale = zeros(DType::f32, {1});
        scale.data_as<float>()[0] = 0.5f;
        const Tensor fused = zeros(t.y, ys), acc = zeros(DType::f32, ys), unfused = zeros(t.y, ys);
        Status s = run_one_shot(stream_, x, w, fused, k.attrs, {.scale = 0.5f, .activation = act, .bias = bias, .residual = residual});
        ASSERT_TRUE(s.ok()) << s.to_string();
        s = run_one_shot(stream_, x, w, acc, k.attrs);
        ASSERT_TRUE(s.ok()) << s.to_string();
        ASSERT_TRUE(ops::mul(stream_, acc, scale, acc).ok());
        ASSERT_TRUE(ops::add(stream_, acc, bias, acc).ok());
        ASSERT_TRUE(ops::activation(stream_, act, acc, acc).ok());
        ASSERT_TRUE(ops::add(stream_, acc, residual, unfused).ok());
        ASSERT_TRUE(stream_.synchronize().ok());
        EXPECT_TRUE(close(fused, unfused, t.tolerance(k.reduction())));
      }
}

TEST_P(ConvTest, NchwViewEqualsNhwcCopy) {
  // The one-shot conv2d reorders an NCHW tensor's NHWC view itself; plans take unit channel strides only.
  for (const Case& k : {Case{2, 7, 9, 17, 24, 3, 3, {.padding = {1, 1}}}, Case{1, 6, 5, 16, 8, 1, 1},
                        Case{1, 7, 7, 24, 24, 3, 3, {.padding = {1, 1}, .groups = 24}}})
    for (const Types& t : kTypes) {
      SCOPED_TRACE(fmt::format("{}, {}", k.name(), t.name()));
      const Tensor x_nchw = random_tensor(t.x, {k.n, k.c, k.h, k.w}, 1);
      const Tensor x_view = value_or_die(x_nchw.permute({0, 2, 3, 1}));
      const ConvWeightsPtr w = pack(random_tensor(t.x, k.w_shape(), 2), k.attrs.groups, t.w);
      const Tensor y = zeros(t.y, k.y_shape()), y_nhwc = zeros(t.y, k.y_shape());
      Status s = run_one_shot(stream_, x_view, w, y, k.attrs);
      ASSERT_TRUE(s.ok()) << s.to_string();
      s = run_one_shot(stream_, clone(x_view), w, y_nhwc, k.attrs);
      ASSERT_TRUE(s.ok()) << s.to_string();
      EXPECT_TRUE(identical(y, y_nhwc));
      EXPECT_TRUE(fails_naming(ops::Conv2d::plan(ctx_, x_view.desc(), w, y.desc(), k.attrs), "x"));
    }
}

INSTANTIATE_TEST_SUITE_P(Isa, ConvTest, ::testing::ValuesIn(isa_levels()), isa_name);

// ------------------------------------------------------------- packed weights

TEST(ConvWeightsPack, GroupedPacksAGemmOperandPerGroup) {
  // Per group [KH * KW * Cig, Cog]: row (kh * KW + kw) * Cig + ci, column co.
  const std::int64_t cout = 24, cig = 5, kh = 3, kw = 2, groups = 2, cog = cout / groups;
  const Tensor w = random_tensor(DType::f32, {cout, cig, kh, kw}, 1);
  const float* wv = w.data_as<float>();
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(to_string(dt));
    const ConvWeightsPtr p = pack(w, groups, dt);
    EXPECT_EQ(p->out_channels(), cout);
    EXPECT_EQ(p->in_channels_per_group(), cig);
    EXPECT_EQ(p->kernel_h(), kh);
    EXPECT_EQ(p->kernel_w(), kw);
    EXPECT_EQ(p->groups(), groups);
    EXPECT_EQ(p->dtype(), dt);
    EXPECT_FALSE(p->depthwise());
    EXPECT_GT(p->bytes(), 0);
    ASSERT_EQ(p->gemm_weights().size(), std::size_t(groups));
    for (std::int64_t g = 0; g < groups; ++g) {
      const ops::WeightsPtr& gemm = p->gemm_weights()[std::size_t(g)];
      ASSERT_EQ(gemm->k(), kh * kw * cig);
      ASSERT_EQ(gemm->n(), cog);
      EXPECT_EQ(gemm->dtype(), dt);
      const Tensor u = value_or_die(gemm->unpack());
      for (std::int64_t co = 0; co < cog; ++co)
        for (std::int64_t ci = 0; ci < cig; ++ci)
          for (std::int64_t i = 0; i < kh; ++i)
            for (std::int64_t j = 0; j < kw; ++j) {
              const float v = wv[(((g * cog + co) * cig + ci) * kh + i) * kw + j];
              ASSERT_EQ(u.data_as<float>()[((i * kw + j) * cig + ci) * cog + co], dt == DType::bf16 ? bf16_to_f32(f32_to_bf16(v)) : v)
                  << "group " << g << " co " << co << " ci " << ci << " kh " << i << " kw " << j;
            }
    }
  }
  EXPECT_LT(pack(w, groups, DType::bf16)->bytes(), pack(w, groups, DType::f32)->bytes());
}

TEST(ConvWeightsPack, DepthwiseKeepsF32KernelsChannelsLast) {
  const std::int64_t c = 17;
  const Tensor w = random_tensor(DType::f32, {c, 1, 3, 3}, 2);
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(to_string(dt));
    const ConvWeightsPtr p = pack(w, c, dt);
    EXPECT_TRUE(p->depthwise());
    EXPECT_EQ(p->out_channels(), c);
    EXPECT_EQ(p->in_channels_per_group(), 1);
    EXPECT_EQ(p->kernel_h(), 3);
    EXPECT_EQ(p->groups(), c);
    const Tensor& dw = p->depthwise_weights();
    ASSERT_TRUE(dw.shape() == (Shape{3, 3, c})) << dw.shape().to_string();
    ASSERT_EQ(dw.dtype(), DType::f32);
    const std::vector<double> got = values(dw);
    for (std::int64_t ch = 0; ch < c; ++ch)
      for (std::int64_t i = 0; i < 9; ++i)
        ASSERT_EQ(got[std::size_t(i * c + ch)], w.data_as<float>()[ch * 9 + i]) << "channel " << ch << " tap " << i;
  }
  // A channel multiplier (groups = C, Cout = 2C) is a GEMM per group, not depthwise.
  const ConvWeightsPtr multiplier = pack(random_tensor(DType::f32, {16, 1, 3, 3}, 3), 8);
  EXPECT_FALSE(multiplier->depthwise());
  EXPECT_EQ(multiplier->gemm_weights().size(), 8u);
}

TEST(ConvWeightsPack, OutputShape) {
  struct Expected {
    Shape x, w;
    ConvAttrs attrs;
    Shape y;
  };
  const Expected cases[] = {
      {{2, 9, 11, 8}, {16, 8, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}}, {2, 5, 6, 16}},
      {{1, 8, 8, 8}, {16, 8, 3, 3}, {.stride = {2, 2}}, {1, 3, 3, 16}},  // (8 - 3) / 2 + 1, rounded down
      {{1, 7, 7, 8}, {16, 8, 3, 3}, {.dilation = {2, 2}}, {1, 3, 3, 16}},
      {{1, 4, 5, 8}, {16, 8, 3, 3}, {.padding = {1, 1}, .upsample_nearest2x = true}, {1, 8, 10, 16}},
      {{1, 5, 9, 8}, {16, 8, 1, 3}, {.stride = {1, 2}, .padding = {0, 1}}, {1, 5, 5, 16}},
      {{1, 3, 3, 8}, {16, 8, 3, 3}, {}, {1, 1, 1, 16}},
      {{1, 2, 2, 8}, {16, 8, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}}, {1, 1, 1, 16}},
      {{3, 1, 1, 6}, {6, 2, 1, 1}, {.groups = 3}, {3, 1, 1, 6}},
  };
  for (const Expected& e : cases) {
    const ConvWeightsPtr w = pack(random_tensor(DType::f32, e.w, 1), e.attrs.groups);
    const Result<Shape> y = ops::conv2d_output_shape(e.x, *w, e.attrs);
    ASSERT_TRUE(y.ok()) << y.status().to_string();
    EXPECT_TRUE(*y == e.y) << e.x.to_string() << " * " << e.w.to_string() << ": " << y->to_string() << ", expected "
                           << e.y.to_string();
  }
}

// --------------------------------------------------------------------- errors

TEST(ConvErrors, PackNamesTheArgument) {
  const auto pack_of = [](const Tensor& w, std::int64_t groups, DType dtype = DType::f32) {
    return ConvWeights::pack(w, groups, dtype);
  };
  const Tensor w = random_tensor(DType::f32, {16, 8, 3, 3}, 1);
  EXPECT_TRUE(fails_naming(pack_of(random_tensor(DType::f32, {16, 8, 3}, 1), 1), "w"));
  EXPECT_TRUE(fails_naming(pack_of(random_tensor(DType::f32, {1, 16, 8, 3, 3}, 1), 1), "w"));
  for (const Shape& empty : {Shape{16, 8, 0, 3}, Shape{16, 8, 3, 0}, Shape{0, 8, 3, 3}, Shape{16, 0, 3, 3}})
    EXPECT_TRUE(fails_naming(pack_of(zeros(DType::f32, empty), 1), "w")) << empty.to_string();
  EXPECT_TRUE(fails_naming(pack_of(zeros(DType::i32, {16, 8, 3, 3}), 1), "w"));
  // groups must be positive and divide Cout (16).
  for (std::int64_t groups : {0, -2, 3, 32}) EXPECT_TRUE(fails_naming(pack_of(w, groups), "groups")) << groups;
  for (DType dt : {DType::f16, DType::i8, DType::i4}) EXPECT_TRUE(fails_naming(pack_of(w, 1, dt), "dtype")) << to_string(dt);
}

TEST(ConvErrors, PlanNamesTheArgument) {
  Context ctx;
  const auto d = [](DType t, Shape s) { return TensorDesc::contiguous(t, s); };
  const auto plan = [&](const TensorDesc& x, ConvWeightsPtr w, const TensorDesc& y, const ConvAttrs& attrs = {},
                        const ops::Epilogue& e = {}) { return ops::Conv2d::plan(ctx, x, std::move(w), y, attrs, e); };
  const ConvWeightsPtr w = pack(random_tensor(DType::f32, {16, 8, 3, 3}, 1), 1);
  const ConvWeightsPtr grouped = pack(random_tensor(DType::f32, {16, 4, 3, 3}, 2), 2);  // C = 8 in 2 groups
  const TensorDesc x = d(DType::f32, {1, 8, 8, 8}), y = d(DType::f32, {1, 6, 6, 16});
  const auto baseline = plan(x, w, y);  // what the errors below each vary
  ASSERT_TRUE(baseline.ok()) << baseline.status().to_string();
  // x's channels must be Cig * groups.
  EXPECT_TRUE(fails_naming(plan(d(DType::f32, {1, 8, 8, 12}), w, y), "x"));
  EXPECT_TRUE(fails_naming(plan(d(DType::f32, {1, 8, 8, 9}), grouped, y, {.groups = 2}), "x"));
  EXPECT_TRUE(fails_naming(plan(d(DType::f32, {1, 8, 8, 4}), grouped, y, {.groups = 2}), "x"));
  // The attributes' groups are the weights'.
  EXPECT_TRUE(fails_naming(plan(x, grouped, y), "attrs.groups"));
  EXPECT_TRUE(fails_naming(plan(x, w, y, {.groups = 0}), "attrs.groups"));
  for (std::array<std::int64_t, 2> bad : {std::array<std::int64_t, 2>{0, 1}, {1, 0}, {-1, 1}, {1, -2}}) {
    SCOPED_TRACE(fmt::format("{}x{}", bad[0], bad[1]));
    EXPECT_TRUE(fails_naming(plan(x, w, y, {.stride = bad}), "attrs.stride"));
    EXPECT_TRUE(fails_naming(plan(x, w, y, {.dilation = bad}), "attrs.dilation"));
  }
  EXPECT_TRUE(fails_naming(plan(x, w, y, {.padding = {-1, 0}}), "attrs.padding"));
  EXPECT_TRUE(fails_naming(plan(x, w, y, {.padding = {0, -1}}), "attrs.padding"));
  // No output pixel: the (dilated) kernel is larger than the padded input —
  // also at stride 2, where (2 - 3) / 2 + 1 rounds toward zero to 1.
  EXPECT_TRUE(fails_naming(plan(d(DType::f32, {1, 2, 2, 8}), w, d(DType::f32, {1, 1, 1, 16})), "x"));
  EXPECT_TRUE(fails_naming(plan(d(DType::f32, {1, 2, 2, 8}), w, d(DType::f32, {1, 1, 1, 16}), {.stride = {2, 2}}), "x"));
  EXPECT_TRUE(fails_naming(plan(d(DType::f32, {1, 4, 8, 8}), w, d(DType::f32, {1, 1, 6, 16}), {.dilation = {2, 1}}), "x"));
  // y's shape, rank and dtype.
  for (const Shape& bad : {Shape{1, 6, 6, 15}, Shape{1, 6, 5, 16}, Shape{2, 6, 6, 16}, Shape{6, 6, 16}})
    EXPECT_TRUE(fails_naming(plan(x, w, d(DType::f32, bad)), "y")) << bad.to_string();
  EXPECT_TRUE(fails_naming(plan(x, w, d(DType::i32, {1, 6, 6, 16})), "y"));
  // x's rank and dtype; the weights.
  EXPECT_TRUE(fails_naming(plan(d(DType::f32, {8, 8, 8}), w, y), "x"));
  EXPECT_TRUE(fails_naming(plan(d(DType::f32, {1, 1, 8, 8, 8}), w, y), "x"));
  EXPECT_TRUE(fails_naming(plan(d(DType::i8, {1, 8, 8, 8}), w, y), "x"));
  EXPECT_TRUE(fails_naming(plan(x, nullptr, y), "w"));
  // The epilogue: bias [Cout], residual shaped like y.
  EXPECT_TRUE(fails_naming(plan(x, w, y, {}, {.bias = d(DType::f32, {15})}), "bias"));
  EXPECT_TRUE(fails_naming(plan(x, w, y, {}, {.bias = d(DType::i32, {16})}), "bias"));
  EXPECT_TRUE(fails_naming(plan(x, w, y, {}, {.residual = d(DType::f32, {1, 6, 6, 15})}), "residual"));
  // Unit channel strides only: NCHW tensors' NHWC views.
  EXPECT_TRUE(fails_naming(plan(TensorDesc{DType::f32, {1, 8, 8, 8}, {512, 8, 1, 64}}, w, y), "x"));
  EXPECT_TRUE(fails_naming(plan(x, w, TensorDesc{DType::f32, {1, 6, 6, 16}, {576, 6, 1, 36}}), "y"));
  EXPECT_TRUE(fails_naming(plan(x, w, y, {}, {.residual = TensorDesc{DType::f32, {1, 6, 6, 16}, {576, 6, 1, 36}}}), "residual"));
  // conv2d_output_shape checks x as the plan does.
  EXPECT_TRUE(fails_naming(ops::conv2d_output_shape({1, 8, 8, 12}, *w), "x"));
  EXPECT_TRUE(fails_naming(ops::conv2d_output_shape({8, 8, 8}, *w), "x"));
  EXPECT_TRUE(fails_naming(ops::conv2d_output_shape({1, 2, 2, 8}, *w, {.stride = {2, 2}}), "x"));
  EXPECT_TRUE(fails_naming(ops::conv2d_output_shape({1, 8, 8, 8}, *w, {.stride = {0, 1}}), "attrs.stride"));
}

TEST(ConvErrors, OneShotNamesTheArgument) {
  Context ctx;
  Stream stream(ctx);
  const Tensor x = random_tensor(DType::f32, {1, 8, 8, 8}, 1);
  const ConvWeightsPtr w = pack(random_tensor(DType::f32, {16, 8, 3, 3}, 2), 1);
  EXPECT_TRUE(fails_naming(ops::conv2d(stream, x, nullptr, zeros(DType::f32, {1, 6, 6, 16})), "w"));
  EXPECT_TRUE(fails_naming(ops::conv2d(stream, x, w, zeros(DType::f32, {1, 6, 6, 15})), "y"));
  EXPECT_TRUE(fails_naming(ops::conv2d(stream, x, w, zeros(DType::f32, {1, 6, 6, 16}), {}, {.bias = zeros(DType::f32, {8})}), "bias"));
  // Only x is reordered from an NCHW view; y must have unit channel stride.
  EXPECT_TRUE(fails_naming(ops::conv2d(stream, x, w, value_or_die(zeros(DType::f32, {1, 16, 6, 6}).permute({0, 2, 3, 1}))), "y"));
  // y may be the residual's very view, no other input's memory.
  const ConvWeightsPtr pointwise = pack(random_tensor(DType::f32, {8, 8, 1, 1}, 3), 1);
  EXPECT_TRUE(fails_naming(ops::conv2d(stream, x, pointwise, x), "y"));
}

}  // namespace
}  // namespace tessera::testing
