#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "kernels/group_norm.hpp"
#include "support/harness.hpp"

namespace tessera::testing {
namespace {

using OptTensor = std::optional<Tensor>;

// A problem in layout-free terms: x is [N, C, spatial...] or [N, spatial..., C].
struct Case {
  std::int64_t n, c, groups;
  Shape spatial;
  bool channels_last;

  Shape shape() const {
    Shape s{n};
    if (!channels_last) s.push_back(c);
    for (std::int64_t d : spatial) s.push_back(d);
    if (channels_last) s.push_back(c);
    return s;
  }
  std::int64_t group_size() const {
    std::int64_t p = c / groups;
    for (std::int64_t d : spatial) p *= d;
    return p;
  }
  ops::GroupNormAttrs attrs(bool silu = false, float eps = 1e-5f) const {
    return {.groups = groups, .eps = eps, .channels_last = channels_last, .silu = silu};
  }
  std::string name() const {
    return fmt::format("{} {} groups={}", channels_last ? "NHWC" : "NCHW", shape().to_string(), groups);
  }
};

// Minimum, odd, C not a multiple of 16, rank 2 and 3, typical UNet sizes.
std::vector<Case> cases(bool channels_last) {
  return {{1, 1, 1, {1, 1}, channels_last},      {2, 6, 3, {5, 7}, channels_last},
          {1, 72, 8, {9, 11}, channels_last},    {3, 24, 4, {}, channels_last},
          {2, 12, 6, {33}, channels_last},       {1, 320, 32, {16, 16}, channels_last}};
}

std::optional<TensorDesc> desc_of(const OptTensor& t) { return t ? std::optional(t->desc()) : std::nullopt; }

// The op through plan() and run(), every fused operand optional, tensors in the documented order.
Status run_plan(Stream& s, const Tensor& x, const OptTensor& residual, const OptTensor& gamma, const OptTensor& beta,
                const Tensor& y, const ops::GroupNormAttrs& attrs, const OptTensor& mul = std::nullopt,
                const OptTensor& sum = std::nullopt) {
  TESSERA_ASSIGN_OR_RETURN(auto plan, ops::GroupNorm::plan(s.context(), x.desc(), desc_of(gamma), desc_of(beta), y.desc(),
                                                           attrs, {desc_of(residual), desc_of(mul), desc_of(sum)}));
  std::vector<Tensor> in{x}, out{y};
  for (const OptTensor* t : {&residual, &gamma, &beta, &mul})
    if (*t) in.push_back(**t);
  if (sum) out.push_back(*sum);
  if (plan->workspace_bytes() == 0) return plan->run(s, in, out);
  TESSERA_ASSIGN_OR_RETURN(auto workspace, s.context().memory().allocate(plan->workspace_bytes()));
  return plan->run(s, in, out, workspace.data());
}

class GroupNormTest : public IsaTest {
 protected:
  // Runs at this ISA and at scalar (on contiguous copies) into fresh outputs; compares y and sum.
  void expect_matches_reference(const Case& k, DType dt, const Tensor& x, const OptTensor& residual, const OptTensor& gamma,
                                const OptTensor& beta, bool silu, const OptTensor& mul, bool with_sum) {
    const auto clone_of = [](const OptTensor& t) { return t ? std::optional(clone(*t)) : std::nullopt; };
    const Shape shape = k.shape();
    Tensor y = zeros(dt, shape), ry = zeros(dt, shape);
    const OptTensor sum = with_sum ? std::optional(zeros(dt, shape)) : std::nullopt;
    const OptTensor rsum = with_sum ? std::optional(zeros(dt, shape)) : std::nullopt;
    ASSERT_TRUE(run_plan(stream_, x, residual, gamma, beta, y, k.attrs(silu), mul, sum).ok());
    ASSERT_TRUE(run_plan(ref_stream_, clone(x), clone_of(residual), clone_of(gamma), clone_of(beta), ry, k.attrs(silu),
                         clone_of(mul), rsum).ok());
    EXPECT_TRUE(close(y, ry, tolerance_for(dt, k.group_size())));
    if (with_sum) {
      EXPECT_TRUE(identical(*sum, *rsum));
    }
  }
};

TEST_P(GroupNormTest, MatchesReference) {
  for (DType dt : kFloatTypes) {
    for (bool channels_last : {false, true}) {
      for (const Case& k : cases(channels_last)) {
        SCOPED_TRACE(fmt::format("{} {}", to_string(dt), k.name()));
        Tensor x = random_tensor(dt, k.shape(), 1, -3.0f, 3.0f);
        Tensor g = random_tensor(dt, {k.c}, 2), b = random_tensor(dt, {k.c}, 3);
        Tensor y = zeros(dt, k.shape()), ry = zeros(dt, k.shape());
        ASSERT_TRUE(ops::group_norm(stream_, x, g, b, y, k.attrs()).ok());
        ASSERT_TRUE(ops::group_norm(ref_stream_, x, g, b, ry, k.attrs()).ok());
        EXPECT_TRUE(close(y, ry, tolerance_for(dt, k.group_size())));
      }
    }
  }
}

TEST_P(GroupNormTest, FusionsAndAffine) {
  // Every combination of residual, silu, mul and sum, with and without gamma and beta.
  for (DType dt : kFloatTypes) {
    for (bool channels_last : {false, true}) {
      for (const Case& k : {Case{2, 6, 3, {5, 7}, channels_last}, Case{1, 40, 8, {9, 11}, channels_last}}) {
        Tensor x = random_tensor(dt, k.shape(), 1, -3.0f, 3.0f), res = random_tensor(dt, k.shape(), 2, -3.0f, 3.0f);
        Tensor m = random_tensor(dt, k.shape(), 3), g = random_tensor(dt, {k.c}, 4), b = random_tensor(dt, {k.c}, 5);
        for (int combo = 0; combo < 64; ++combo) {
          const bool with_res = combo & 1, silu = combo & 2, with_mul = combo & 4, with_sum = combo & 8;
          const bool with_gamma = combo & 16, with_beta = combo & 32;
          SCOPED_TRACE(fmt::format("{} {} residual={} silu={} mul={} sum={} gamma={} beta={}", to_string(dt), k.name(),
                                   with_res, silu, with_mul, with_sum, with_gamma, with_beta));
          expect_matches_reference(k, dt, x, with_res ? OptTensor(res) : std::nullopt, with_gamma ? OptTensor(g) : std::nullopt,
                                   with_beta ? OptTensor(b) : std::nullopt, silu, with_mul ? OptTensor(m) : std::nullopt,
                                   with_sum);
        }
      }
    }
  }
}

TEST_P(GroupNormTest, MixedDtypes) {
  // bf16 x, f16 residual, f32 gamma / beta / mul, f32 y, bf16 sum.
  for (bool channels_last : {false, true}) {
    const Case k{2, 48, 16, {7, 9}, channels_last};
    SCOPED_TRACE(k.name());
    Tensor x = random_tensor(DType::bf16, k.shape(), 1), res = random_tensor(DType::f16, k.shape(), 2);
    Tensor g = random_tensor(DType::f32, {k.c}, 3), b = random_tensor(DType::f32, {k.c}, 4);
    Tensor m = random_tensor(DType::f32, k.shape(), 5);
    Tensor y = zeros(DType::f32, k.shape()), sum = zeros(DType::bf16, k.shape());
    Tensor ry = zeros(DType::f32, k.shape()), rsum = zeros(DType::bf16, k.shape());
    ASSERT_TRUE(ops::residual_group_norm(stream_, x, res, g, b, y, k.attrs(true), m, sum).ok());
    ASSERT_TRUE(ops::residual_group_norm(ref_stream_, x, res, g, b, ry, k.attrs(true), m, rsum).ok());
    EXPECT_TRUE(close(y, ry, tolerance_for(DType::f32, k.group_size())));
    EXPECT_TRUE(identical(sum, rsum));
  }
}

TEST_P(GroupNormTest, LargeSplitsOverThePool) {
  // N = 1 with more data than one task takes: the units split over the pool.
  for (DType dt : {DType::f32, DType::bf16}) {
    for (bool channels_last : {false, true}) {
      const Case k{1, 128, 32, {48, 64}, channels_last};
      SCOPED_TRACE(fmt::format("{} {}", to_string(dt), k.name()));
      Tensor x = random_tensor(dt, k.shape(), 1, -2.0f, 4.0f), res = random_tensor(dt, k.shape(), 2);
      expect_matches_reference(k, dt, x, res, random_tensor(dt, {k.c}, 3), random_tensor(dt, {k.c}, 4), true, std::nullopt,
                               true);
    }
  }
}

// y = silu(gn(x + res) * gamma + beta) * mul, in double, for contiguous f32 tensors.
std::vector<double> naive(const Case& k, const Tensor& x, const Tensor& res, const Tensor& g, const Tensor& b, const Tensor& m) {
  std::int64_t p = 1;
  for (std::int64_t d : k.spatial) p *= d;
  const auto at = [&](std::int64_t n, std::int64_t c, std::int64_t i) {
    return k.channels_last ? (n * p + i) * k.c + c : (n * k.c + c) * p + i;
  };
  const auto v = [&](std::int64_t o) { return double(x.data_as<float>()[o] + res.data_as<float>()[o]); };
  std::vector<double> y(static_cast<std::size_t>(x.numel()));
  const std::int64_t cg = k.c / k.groups;
  for (std::int64_t n = 0; n < k.n; ++n)
    for (std::int64_t c0 = 0; c0 < k.c; c0 += cg) {
      double mean = 0, var = 0;
      for (std::int64_t c = c0; c < c0 + cg; ++c)
        for (std::int64_t i = 0; i < p; ++i) mean += v(at(n, c, i));
      mean /= double(cg * p);
      for (std::int64_t c = c0; c < c0 + cg; ++c)
        for (std::int64_t i = 0; i < p; ++i) var += (v(at(n, c, i)) - mean) * (v(at(n, c, i)) - mean);
      var /= double(cg * p);
      for (std::int64_t c = c0; c < c0 + cg; ++c)
        for (std::int64_t i = 0; i < p; ++i) {
          const std::int64_t o = at(n, c, i);
          const double t = (v(o) - mean) / std::sqrt(var + 1e-5) * g.data_as<float>()[c] + b.data_as<float>()[c];
          y[std::size_t(o)] = t / (1.0 + std::exp(-t)) * m.data_as<float>()[o];
        }
    }
  return y;
}

TEST_P(GroupNormTest, MatchesTheFormula) {
  for (bool channels_last : {false, true}) {
    for (const Case& k : {Case{2, 6, 3, {5, 7}, channels_last}, Case{1, 320, 32, {8, 8}, channels_last}}) {
      SCOPED_TRACE(k.name());
      Tensor x = random_tensor(DType::f32, k.shape(), 1, 5.0f, 9.0f), res = random_tensor(DType::f32, k.shape(), 2);
      Tensor g = random_tensor(DType::f32, {k.c}, 3), b = random_tensor(DType::f32, {k.c}, 4);
      Tensor m = random_tensor(DType::f32, k.shape(), 5), y = zeros(DType::f32, k.shape());
      ASSERT_TRUE(ops::residual_group_norm(stream_, x, res, g, b, y, k.attrs(true), m).ok());
      Tensor expected = zeros(DType::f32, k.shape());
      const std::vector<double> want = naive(k, x, res, g, b, m);
      for (std::size_t i = 0; i < want.size(); ++i) expected.data_as<float>()[i] = float(want[i]);
      EXPECT_TRUE(close(y, expected, tolerance_for(DType::f32, k.group_size())));
    }
  }
}

TEST_P(GroupNormTest, FusedEqualsComposition) {
  // residual_group_norm(silu, mul, sum) against add, group_norm, silu, mul at the same ISA.
  for (DType dt : kFloatTypes) {
    for (bool channels_last : {false, true}) {
      const Case k{2, 64, 32, {6, 10}, channels_last};
      SCOPED_TRACE(fmt::format("{} {}", to_string(dt), k.name()));
      const Shape shape = k.shape();
      Tensor x = random_tensor(dt, shape, 1, -3.0f, 3.0f), res = random_tensor(dt, shape, 2, -3.0f, 3.0f);
      Tensor g = random_tensor(dt, {k.c}, 3), b = random_tensor(dt, {k.c}, 4), m = random_tensor(dt, shape, 5);
      Tensor y = zeros(dt, shape), sum = zeros(dt, shape);
      ASSERT_TRUE(ops::residual_group_norm(stream_, x, res, g, b, y, k.attrs(true), m, sum).ok());
      Tensor sum2 = zeros(dt, shape), t = zeros(dt, shape), y2 = zeros(dt, shape);
      ASSERT_TRUE(ops::add(stream_, x, res, sum2).ok());
      ASSERT_TRUE(ops::group_norm(stream_, sum2, g, b, t, k.attrs()).ok());
      ASSERT_TRUE(ops::silu(stream_, t, t).ok());
      ASSERT_TRUE(ops::mul(stream_, t, m, y2).ok());
      EXPECT_TRUE(identical(sum, sum2));
      EXPECT_TRUE(close(y, y2, tolerance_for(dt, k.group_size())));
    }
  }
}

TEST_P(GroupNormTest, ConstantGroupsGiveBeta) {
  // No spread: y is beta exactly, also with eps = 0 (the naive formula gives 0/0),
  // and for values far from 0, where a mean taken without a shift would round.
  for (bool channels_last : {false, true}) {
    for (float eps : {0.0f, 1e-5f}) {
      const Case k{2, 8, 4, {5, 3}, channels_last};
      SCOPED_TRACE(fmt::format("{} eps={}", k.name(), eps));
      Tensor x = zeros(DType::f32, k.shape());
      for (std::int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = 1234.5f;
      Tensor b = random_tensor(DType::f32, {k.c}, 4), y = random_tensor(DType::f32, k.shape(), 5);
      ASSERT_TRUE(ops::group_norm(stream_, x, random_tensor(DType::f32, {k.c}, 3), b, y, k.attrs(false, eps)).ok());
      for (std::int64_t i = 0; i < y.numel(); ++i) {
        const std::int64_t c = channels_last ? i % k.c : i / 15 % k.c;
        ASSERT_EQ(y.data_as<float>()[i], b.data_as<float>()[c]) << "element " << i;
      }
    }
  }
  // A large offset with a small spread keeps its precision.
  for (bool channels_last : {false, true}) {
    const Case k{1, 32, 4, {16, 16}, channels_last};
    SCOPED_TRACE(k.name());
    expect_matches_reference(k, DType::f32, random_tensor(DType::f32, k.shape(), 6, 1e4f, 1e4f + 1.0f), std::nullopt,
                             std::nullopt, std::nullopt, false, std::nullopt, false);
  }
}

TEST_P(GroupNormTest, StridedViews) {
  // Padded rows in every x-shaped operand: channels first the spatial dims no
  // longer merge; channels last the pixels are C + pad apart.
  for (bool channels_last : {false, true}) {
    const Case k{2, 24, 6, {5, 9}, channels_last};
    SCOPED_TRACE(k.name());
    Tensor x = random_tensor(DType::f32, k.shape(), 1), res = random_tensor(DType::f32, k.shape(), 2);
    Tensor m = random_tensor(DType::f32, k.shape(), 3);
    Tensor g = value_or_die(random_tensor(DType::f32, {2 * k.c}, 4).slice(0, 0, 2 * k.c, 2));
    Tensor y = padded_copy(zeros(DType::f32, k.shape())), sum = padded_copy(zeros(DType::f32, k.shape()), 5);
    Tensor ry = zeros(DType::f32, k.shape()), rsum = zeros(DType::f32, k.shape());
    ASSERT_TRUE(ops::residual_group_norm(stream_, padded_copy(x), padded_copy(res, 7), g, std::nullopt, y, k.attrs(true),
                                         padded_copy(m, 2), sum).ok());
    ASSERT_TRUE(ops::residual_group_norm(ref_stream_, x, res, clone(g), std::nullopt, ry, k.attrs(true), m, rsum).ok());
    EXPECT_TRUE(close(y, ry, tolerance_for(DType::f32, k.group_size())));
    EXPECT_TRUE(close(sum, rsum, tolerance_for(DType::f32)));
  }
  // Channels last through a permuted view of an NCHW buffer (C not unit stride).
  const Case k{1, 16, 4, {6, 5}, true};
  Tensor nchw = random_tensor(DType::f32, {1, 16, 6, 5}, 8);
  Tensor x = value_or_die(nchw.permute({0, 2, 3, 1}));
  Tensor y = zeros(DType::f32, k.shape()), ry = zeros(DType::f32, k.shape());
  ASSERT_TRUE(ops::group_norm(stream_, x, std::nullopt, std::nullopt, y, k.attrs()).ok());
  ASSERT_TRUE(ops::group_norm(ref_stream_, clone(x), std::nullopt, std::nullopt, ry, k.attrs()).ok());
  EXPECT_TRUE(close(y, ry, tolerance_for(DType::f32, k.group_size())));
}

TEST_P(GroupNormTest, InPlace) {
  for (bool channels_last : {false, true}) {
    const Case k{2, 32, 8, {7, 6}, channels_last};
    SCOPED_TRACE(k.name());
    Tensor x = random_tensor(DType::f32, k.shape(), 1), res = random_tensor(DType::f32, k.shape(), 2);
    Tensor g = random_tensor(DType::f32, {k.c}, 3), b = random_tensor(DType::f32, {k.c}, 4);
    Tensor ry = zeros(DType::f32, k.shape()), rsum = zeros(DType::f32, k.shape());
    ASSERT_TRUE(ops::residual_group_norm(ref_stream_, x, res, g, b, ry, k.attrs(true), std::nullopt, rsum).ok());
    // y over x, without and with a sum.
    Tensor xy = clone(x);
    ASSERT_TRUE(ops::residual_group_norm(stream_, xy, res, g, b, xy, k.attrs(true)).ok());
    EXPECT_TRUE(close(xy, ry, tolerance_for(DType::f32, k.group_size())));
    Tensor xy2 = clone(x), sum = zeros(DType::f32, k.shape());
    ASSERT_TRUE(ops::residual_group_norm(stream_, xy2, res, g, b, xy2, k.attrs(true), std::nullopt, sum).ok());
    EXPECT_TRUE(close(xy2, ry, tolerance_for(DType::f32, k.group_size())));
    EXPECT_TRUE(identical(sum, rsum));
    // sum over x, and sum over residual.
    Tensor xs = clone(x), y = zeros(DType::f32, k.shape());
    ASSERT_TRUE(ops::residual_group_norm(stream_, xs, res, g, b, y, k.attrs(true), std::nullopt, xs).ok());
    EXPECT_TRUE(close(y, ry, tolerance_for(DType::f32, k.group_size())));
    EXPECT_TRUE(identical(xs, rsum));
    Tensor rs = clone(res);
    ASSERT_TRUE(ops::residual_group_norm(stream_, x, rs, g, b, y, k.attrs(true), std::nullopt, rs).ok());
    EXPECT_TRUE(close(y, ry, tolerance_for(DType::f32, k.group_size())));
    EXPECT_TRUE(identical(rs, rsum));
  }
}

TEST_P(GroupNormTest, EmptyDimsGiveAnEmptyResult) {
  for (const Shape& shape : {Shape{0, 8, 4, 4}, Shape{2, 8, 0, 4}, Shape{2, 0, 4}}) {
    for (bool channels_last : {false, true}) {
      SCOPED_TRACE(fmt::format("{} channels_last={}", shape.to_string(), channels_last));
      const std::int64_t c = shape[channels_last ? shape.rank() - 1 : 1];
      Tensor x = zeros(DType::f32, shape), y = zeros(DType::f32, shape), g = zeros(DType::f32, {c});
      EXPECT_TRUE(ops::residual_group_norm(stream_, x, x, g, g, y, {.groups = 2, .channels_last = channels_last}, x,
                                           zeros(DType::f32, shape)).ok());
    }
  }
}

TEST_P(GroupNormTest, KernelChoiceAndTraffic) {
  const std::string_view simd = ctx_.isa() >= hw::Isa::avx512 ? "group_norm_avx512"
                                : ctx_.isa() >= hw::Isa::avx2  ? "group_norm_avx2"
                                                               : "group_norm_ref";
  const TensorDesc x = TensorDesc::contiguous(DType::f32, {1, 64, 8, 8}), g = TensorDesc::contiguous(DType::bf16, {64});
  auto plan = value_or_die(ops::GroupNorm::plan(ctx_, x, g, g, x, {}, {.residual = x, .mul = x, .sum = x}));
  EXPECT_EQ(plan->kernel(), simd);
  EXPECT_EQ(plan->bytes_moved(), 5 * 4096 * 4 + 2 * 128);  // x, residual, mul, y, sum; gamma, beta
  // Channels last with C strided takes the reference row.
  const TensorDesc xt{DType::f32, {1, 8, 8, 64}, {4096, 8, 1, 64}};
  EXPECT_EQ(value_or_die(ops::GroupNorm::plan(ctx_, xt, std::nullopt, std::nullopt, xt, {.channels_last = true}))->kernel(),
            "group_norm_ref");
}

// Streaming stores for y run only past the L3, so the apply pass is called
// directly: this level's row with stream_y on against the reference row.
TEST_P(GroupNormTest, StreamingApplyMatchesTheReference) {
  for (DType dt : {DType::f32, DType::bf16})
    for (bool silu : {false, true}) {
      SCOPED_TRACE(fmt::format("{} silu={}", to_string(dt), silu));
      const std::int64_t lines = 3, len = 70;
      const Tensor x = random_tensor(dt, {lines, len}, 11, -3.0f, 3.0f);
      const Tensor mean = random_tensor(DType::f32, {len}, 12), scale = random_tensor(DType::f32, {len}, 13);
      const Tensor bias = random_tensor(DType::f32, {len}, 14);
      Tensor y = zeros(dt, {lines, len}), ref = zeros(dt, {lines, len});
      const kernels::GroupNormOperand none{nullptr, dt, 0, 1};
      kernels::GroupNormLines block{{x.data(), dt, len, 1}, none, none, {y.data(), dt, len, 1}, none, lines, len};
      const kernels::GroupNormCoefs coefs{mean.data_as<float>(), scale.data_as<float>(), bias.data_as<float>(), 1, silu, true};
      const kernels::GroupNormProblem problem{lines * len, 2 * std::int64_t(bytes_of(dt)), true};
      const auto* row = kernels::select<kernels::GroupNormFamily>(problem, GetParam());
      row->run.apply(block, coefs);
      block.y.data = ref.data();
      kernels::ref::group_norm_apply(block, coefs);
      EXPECT_TRUE(close(y, ref, tolerance_for(dt))) << row->name;
    }
}

// Channels last, the statistics read lines from memory only past the L3
// (from_memory, which changes the AVX2 row's loop order), so column_stats
// is called directly: both ways, with and without a residual written to a
// sum, against the reference row.
TEST_P(GroupNormTest, ColumnStatsFromMemoryAndCacheMatchTheReference) {
  for (DType dt : {DType::f32, DType::bf16})
    for (bool residual : {false, true})
      for (bool from_memory : {false, true}) {
        SCOPED_TRACE(fmt::format("{} residual={} from_memory={}", to_string(dt), residual, from_memory));
        const std::int64_t lines = 37, len = 70;  // len: two blocks of 32 columns and a tail
        const Tensor x = random_tensor(dt, {lines, len}, 21, -3.0f, 3.0f), r = random_tensor(dt, {lines, len}, 22, -3.0f, 3.0f);
        const Tensor shift = random_tensor(DType::f32, {len}, 23, -1.0f, 1.0f);
        Tensor sum = zeros(dt, {lines, len}), ref_sum = zeros(dt, {lines, len});
        const kernels::GroupNormOperand none{nullptr, dt, 0, 1};
        kernels::GroupNormLines block{{x.data(), dt, len, 1}, residual ? kernels::GroupNormOperand{r.data(), dt, len, 1} : none,
                                      none, none, residual ? kernels::GroupNormOperand{sum.data(), dt, len, 1} : none,
                                      lines, len, from_memory};
        std::vector<double> sums(2 * len), ref(2 * len);
        std::vector<float> scratch(2 * len);
        const kernels::GroupNormProblem problem{lines * len, 2 * std::int64_t(bytes_of(dt)), true};
        const auto* row = kernels::select<kernels::GroupNormFamily>(problem, GetParam());
        row->run.column_stats(block, shift.data_as<float>(), sums.data(), scratch.data());
        if (residual) block.sum.data = ref_sum.data();
        kernels::ref::group_norm_column_stats(block, shift.data_as<float>(), ref.data(), scratch.data());
        for (std::int64_t i = 0; i < 2 * len; ++i) EXPECT_NEAR(sums[i], ref[i], 1e-4 * (1.0 + std::abs(ref[i]))) << row->name << " " << i;
        if (residual) {
          EXPECT_TRUE(close(sum, ref_sum, tolerance_for(dt))) << row->name;
        }
      }
}

INSTANTIATE_TEST_SUITE_P(Isa, GroupNormTest, ::testing::ValuesIn(isa_levels()), isa_name);

TEST(GroupNormErrors, PlanNamesTheArgument) {
  Context ctx;
  const auto d = [](DType t, const Shape& s) { return TensorDesc::contiguous(t, s); };
  const TensorDesc x = d(DType::f32, {2, 8, 4, 4}), g = d(DType::f32, {8});
  const auto plan = [&](const TensorDesc& xd, const std::optional<TensorDesc>& gamma, const std::optional<TensorDesc>& beta,
                        const TensorDesc& y, const ops::GroupNormAttrs& attrs, const ops::GroupNormFusion& fusion = {}) {
    return ops::GroupNorm::plan(ctx, xd, gamma, beta, y, attrs, fusion);
  };
  EXPECT_TRUE(fails_naming(plan(x, g, g, x, {.groups = 3}), "groups"));  // 8 % 3
  EXPECT_TRUE(fails_naming(plan(d(DType::f32, {2, 4, 4, 6}), std::nullopt, std::nullopt, d(DType::f32, {2, 4, 4, 6}),
                                {.groups = 4, .channels_last = true}),
                           "groups"));  // C = 6 is the last dim
  EXPECT_TRUE(fails_naming(plan(x, g, g, x, {.groups = 0}), "groups"));
  EXPECT_TRUE(fails_naming(plan(x, g, g, x, {.groups = -2}), "groups"));
  EXPECT_TRUE(fails_naming(plan(x, d(DType::f32, {4}), g, x, {.groups = 2}), "gamma"));
  EXPECT_TRUE(fails_naming(plan(x, d(DType::f32, {8, 1}), g, x, {.groups = 2}), "gamma"));
  EXPECT_TRUE(fails_naming(plan(x, d(DType::i8, {8}), g, x, {.groups = 2}), "gamma"));
  EXPECT_TRUE(fails_naming(plan(x, g, d(DType::f32, {16}), x, {.groups = 2}), "beta"));
  EXPECT_TRUE(fails_naming(plan(x, g, g, x, {.groups = 2}, {.residual = d(DType::f32, {2, 8, 4, 5})}), "residual"));
  EXPECT_TRUE(fails_naming(plan(x, g, g, x, {.groups = 2}, {.residual = d(DType::i32, {2, 8, 4, 4})}), "residual"));
  EXPECT_TRUE(fails_naming(plan(x, g, g, x, {.groups = 2}, {.mul = d(DType::f32, {8, 4, 4})}), "mul"));
  EXPECT_TRUE(fails_naming(plan(x, g, g, x, {.groups = 2}, {.sum = d(DType::f32, {2, 8, 16})}), "sum"));
  EXPECT_TRUE(fails_naming(plan(x, g, g, x, {.groups = 2}, {.sum = TensorDesc{DType::f32, {2, 8, 4, 4}, {0, 0, 0, 1}}}), "sum"));
  EXPECT_TRUE(fails_naming(plan(x, g, g, d(DType::f32, {2, 8, 16}), {.groups = 2}), "y"));
  EXPECT_TRUE(fails_naming(plan(x, g, g, TensorDesc{DType::f32, {2, 8, 4, 4}, {0, 16, 4, 1}}, {.groups = 2}), "y"));
  EXPECT_TRUE(fails_naming(plan(d(DType::f32, {8}), g, g, d(DType::f32, {8}), {.groups = 2}), "x"));  // rank < 2
  EXPECT_TRUE(fails_naming(plan(d(DType::i8, {2, 8, 4, 4}), g, g, x, {.groups = 2}), "x"));
  EXPECT_TRUE(fails_naming(plan(x, g, g, d(DType::i32, {2, 8, 4, 4}), {.groups = 2}), "y"));
  EXPECT_TRUE(fails_naming(plan(x, g, g, x, {.groups = 2, .eps = -1e-5f}), "eps"));
  EXPECT_TRUE(fails_naming(plan(x, g, g, x, {.groups = 2, .eps = std::numeric_limits<float>::quiet_NaN()}), "eps"));
  EXPECT_TRUE(fails_naming(plan(x, g, g, x, {.groups = 2, .eps = std::numeric_limits<float>::infinity()}), "eps"));
}

TEST(GroupNormErrors, RunChecksOverlapAndTensors) {
  Context ctx;
  Stream stream(ctx);
  const ops::GroupNormAttrs attrs{.groups = 2};
  Tensor x = random_tensor(DType::f32, {1, 4, 3, 3}, 1), res = random_tensor(DType::f32, {1, 4, 3, 3}, 2);
  Tensor g = random_tensor(DType::f32, {4}, 3), y = zeros(DType::f32, {1, 4, 3, 3});
  EXPECT_TRUE(fails_naming(ops::residual_group_norm(stream, x, res, g, std::nullopt, res, attrs), "y"));  // y over residual
  EXPECT_TRUE(fails_naming(ops::residual_group_norm(stream, x, res, g, std::nullopt, y, attrs, std::nullopt, y), "sum"));
  EXPECT_TRUE(fails_naming(ops::residual_group_norm(stream, x, res, g, std::nullopt, y, attrs, x, x), "sum"));  // sum over mul
  // run() with the tensors in the wrong number.
  auto plan = value_or_die(ops::GroupNorm::plan(ctx, x.desc(), g.desc(), std::nullopt, y.desc(), attrs));
  EXPECT_FALSE(plan->run(stream, {x}, {y}).ok());
  EXPECT_TRUE(plan->run(stream, {x, g}, {y}).ok());
}

}  // namespace
}  // namespace tessera::testing
