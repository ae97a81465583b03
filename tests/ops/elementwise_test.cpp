#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "core/element.hpp"
#include "support/harness.hpp"

namespace tessera::testing {
namespace {

class ElementwiseTest : public IsaTest {};

TEST_P(ElementwiseTest, SiluMatchesReference) {
  for (DType dt : kFloatTypes) {
    for (std::int64_t n : {0L, 1L, 3L, 17L, 64L, 255L, 1000L, 1L << 20}) {
      SCOPED_TRACE(fmt::format("{} n={}", to_string(dt), n));
      Tensor x = random_tensor(dt, {n}, 1, -12.0f, 12.0f);
      Tensor y = zeros(dt, {n}), ref = zeros(dt, {n});
      ASSERT_TRUE(ops::silu(stream_, x, y).ok());
      ASSERT_TRUE(ops::silu(ref_stream_, x, ref).ok());
      EXPECT_TRUE(close(y, ref, tolerance_for(dt)));
    }
  }
}

TEST_P(ElementwiseTest, SiluOnStridedAndExtremeInputs) {
  Tensor x = padded_copy(random_tensor(DType::f32, {7, 33}, 2, -5.0f, 5.0f));
  Tensor y = zeros(DType::f32, {7, 33}), ref = zeros(DType::f32, {7, 33});
  ASSERT_TRUE(ops::silu(stream_, x, y).ok());
  ASSERT_TRUE(ops::silu(ref_stream_, x, ref).ok());
  EXPECT_TRUE(close(y, ref, tolerance_for(DType::f32)));

  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> special = {0.0f, -0.0f, inf, -inf, nan, 1e-40f, -1e-40f, 88.0f, -88.0f, 100.0f, -100.0f, 3.4e38f, -3.4e38f, -80.0f};
  Tensor xs = value_or_die(Tensor::wrap(special.data(), TensorDesc::contiguous(DType::f32, {std::int64_t(special.size())})));
  Tensor ys = zeros(DType::f32, xs.shape()), rs = zeros(DType::f32, xs.shape());
  ASSERT_TRUE(ops::silu(stream_, xs, ys).ok());
  ASSERT_TRUE(ops::silu(ref_stream_, xs, rs).ok());
  EXPECT_TRUE(close(ys, rs, tolerance_for(DType::f32)));
  const float* s = ys.data_as<float>();
  EXPECT_EQ(s[2], inf);                                       // silu(+inf) = +inf
  EXPECT_EQ(std::bit_cast<std::uint32_t>(s[3]), 0x80000000u);  // silu(-inf) = -0, the limit
  EXPECT_TRUE(std::isnan(s[4]));
  EXPECT_NEAR(s[13] / (-80.0 * std::exp(-80.0)), 1.0, 1e-5);  // the far tail (-1.4e-33) stays accurate
}

// The vectorized casts must agree bit for bit with the scalar conversions.
TEST_P(ElementwiseTest, CastIsBitExact) {
  // Every f16 and bf16 pattern -> f32 -> back.
  for (DType half : {DType::f16, DType::bf16}) {
    std::vector<std::uint16_t> bits(65536);
    for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = std::uint16_t(i);
    Tensor h = value_or_die(Tensor::wrap(bits.data(), TensorDesc::contiguous(half, {65536})));
    Tensor f = zeros(DType::f32, {65536}), ref = zeros(DType::f32, {65536});
    ASSERT_TRUE(ops::cast(stream_, h, f).ok());
    ASSERT_TRUE(ops::cast(ref_stream_, h, ref).ok());
    EXPECT_EQ(std::memcmp(f.data(), ref.data(), 65536 * 4), 0) << to_string(half) << " -> f32";
  }
  // Every pattern of one 16-bit type into the other (each pair of storage
  // types has its own loop), NaNs as any NaN.
  for (const auto& [from, to] : {std::pair{DType::f16, DType::bf16}, std::pair{DType::bf16, DType::f16}}) {
    std::vector<std::uint16_t> bits(65536);
    for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = std::uint16_t(i);
    Tensor h = value_or_die(Tensor::wrap(bits.data(), TensorDesc::contiguous(from, {65536})));
    Tensor out = zeros(to, {65536}), ref = zeros(to, {65536});
    ASSERT_TRUE(ops::cast(stream_, h, out).ok());
    ASSERT_TRUE(ops::cast(ref_stream_, h, ref).ok());
    const auto* a = out.data_as<std::uint16_t>();
    const auto* b = ref.data_as<std::uint16_t>();
    const std::uint16_t inf = to == DType::f16 ? 0x7c00 : 0x7f80;
    int shown = 0;
    for (std::size_t i = 0; i < bits.size() && shown < 5; ++i)
      if (a[i] != b[i] && !((a[i] & 0x7fff) > inf && (b[i] & 0x7fff) > inf)) {
        ADD_FAILURE() << to_string(from) << " " << i << " -> " << to_string(to) << ": " << a[i] << " vs " << b[i];
        ++shown;
      }
  }
  // f32 values of every magnitude, ties, specials -> f16 / bf16.
  std::vector<float> values;
  std::uint32_t u = 1;
  for (int i = 0; i < 200000; ++i, u = u * 1664525u + 1013904223u) values.push_back(std::bit_cast<float>(u));
  for (float v : {0.0f, -0.0f, 65504.0f, 65520.0f, 65519.996f, 6e-8f, 3e-8f, 2.98e-8f, 1e-45f, 3.4e38f}) values.push_back(v);
  for (std::uint32_t tie : {0x3f808000u, 0x3f818000u, 0x3f801000u, 0x3f803000u, 0x7f7fffffu, 0x7fc00001u, 0xff800000u})
    values.push_back(std::bit_cast<float>(tie));
  const std::int64_t n = std::int64_t(values.size());
  Tensor f = value_or_die(Tensor::wrap(values.data(), TensorDesc::contiguous(DType::f32, {n})));
  for (DType half : {DType::f16, DType::bf16}) {
    Tensor h = zeros(half, {n}), ref = zeros(half, {n});
    ASSERT_TRUE(ops::cast(stream_, f, h).ok());
    ASSERT_TRUE(ops::cast(ref_stream_, f, ref).ok());
    const auto* a = h.data_as<std::uint16_t>();
    const auto* b = ref.data_as<std::uint16_t>();
    int shown = 0;
    for (std::int64_t i = 0; i < n && shown < 5; ++i) {
      const bool both_nan = half == DType::f16 ? ((a[i] & 0x7fff) > 0x7c00 && (b[i] & 0x7fff) > 0x7c00)
                                                : ((a[i] & 0x7fff) > 0x7f80 && (b[i] & 0x7fff) > 0x7f80);
      if (a[i] != b[i] && !both_nan) {
        ADD_FAILURE() << to_string(half) << " cast of " << std::bit_cast<std::uint32_t>(values[std::size_t(i)]) << ": "
                      << a[i] << " vs " << b[i];
        ++shown;
      }
    }
  }
}

// Casts with an integer side, against the values cast() documents: wrap
// between integers, truncation and saturation from floats (NaN: 0), round
// to nearest even into floats; a transposed view too.
TEST_P(ElementwiseTest, IntegerCasts) {
  auto tensor = [](DType dt, auto values) {
    using V = typename decltype(values)::value_type;
    Tensor t = zeros(dt, {std::int64_t(values.size())});
    std::memcpy(t.data(), values.data(), values.size() * sizeof(V));
    return t;
  };
  auto cast_to = [&](const Tensor& x, DType dt) {
    Tensor y = zeros(dt, x.shape());
    EXPECT_TRUE(ops::cast(stream_, x, y).ok());
    return y;
  };
  auto ints = [](const Tensor& t) {
    std::vector<std::int64_t> v;
    for (std::int64_t i = 0; i < t.numel(); ++i) v.push_back(detail::load_index(t.data(), t.dtype(), i));
    return v;
  };
  auto floats = [](const Tensor& t) {
    std::vector<float> v;
    for (std::int64_t i = 0; i < t.numel(); ++i) v.push_back(detail::load(t.data(), t.dtype(), i));
    return v;
  };
  using V = std::vector<std::int64_t>;
  constexpr std::int64_t i32_min = std::numeric_limits<std::int32_t>::min(), i32_max = std::numeric_limits<std::int32_t>::max();
  constexpr std::int64_t i64_min = std::numeric_limits<std::int64_t>::min(), i64_max = std::numeric_limits<std::int64_t>::max();
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();

  const Tensor f = tensor(DType::f32, std::vector<float>{-1.9f, -0.5f, 0.5f, 1.9f, 127.9f, 128.0f, -129.0f, 300.0f, nan, inf, -inf, 1e20f});
  EXPECT_EQ(ints(cast_to(f, DType::i8)), (V{-1, 0, 0, 1, 127, 127, -128, 127, 0, 127, -128, 127}));
  EXPECT_EQ(ints(cast_to(f, DType::u8)), (V{0, 0, 0, 1, 127, 128, 0, 255, 0, 255, 0, 255}));
  EXPECT_EQ(ints(cast_to(f, DType::i32)), (V{-1, 0, 0, 1, 127, 128, -129, 300, 0, i32_max, i32_min, i32_max}));
  EXPECT_EQ(ints(cast_to(f, DType::i64)), (V{-1, 0, 0, 1, 127, 128, -129, 300, 0, i64_max, i64_min, i64_max}));
  // bf16 and f16 sources: the same rules on their values.
  EXPECT_EQ(ints(cast_to(cast_to(f, DType::bf16), DType::i8)), (V{-1, 0, 0, 1, 127, 127, -128, 127, 0, 127, -128, 127}));
  EXPECT_EQ(ints(cast_to(cast_to(f, DType::f16), DType::i32)), (V{-1, 0, 0, 1, 127, 128, -129, 300, 0, i32_max, i32_min, i32_max}));

  const Tensor w = tensor(DType::i64, std::vector<std::int64_t>{300, -1, (std::int64_t(1) << 40) + 5, i64_min, i64_max});
  EXPECT_EQ(ints(cast_to(w, DType::i8)), (V{44, -1, 5, 0, -1}));
  EXPECT_EQ(ints(cast_to(w, DType::u8)), (V{44, 255, 5, 0, 255}));
  EXPECT_EQ(ints(cast_to(w, DType::i32)), (V{300, -1, 5, 0, -1}));
  EXPECT_EQ(floats(cast_to(w, DType::f32)), (std::vector<float>{300.0f, -1.0f, 0x1p40f, -0x1p63f, 0x1p63f}));

  const Tensor b = tensor(DType::i8, std::vector<std::int8_t>{-128, -1, 0, 127});
  EXPECT_EQ(ints(cast_to(b, DType::i64)), (V{-128, -1, 0, 127}));
  EXPECT_EQ(ints(cast_to(b, DType::u8)), (V{128, 255, 0, 127}));
  EXPECT_EQ(floats(cast_to(b, DType::bf16)), (std::vector<float>{-128.0f, -1.0f, 0.0f, 127.0f}));
  EXPECT_EQ(ints(cast_to(tensor(DType::u8, std::vector<std::uint8_t>{0, 200, 255}), DType::i8)), (V{0, -56, -1}));
  // 2^24 + 1 and + 3 to f32: ties to even (2^24, 2^24 + 4).
  EXPECT_EQ(floats(cast_to(tensor(DType::i32, std::vector<std::int32_t>{16777217, 16777219}), DType::f32)),
            (std::vector<float>{16777216.0f, 16777220.0f}));

  // A transposed i32 view into a contiguous f32 y.
  Tensor m = zeros(DType::i32, {5, 7});
  for (std::int64_t i = 0; i < m.numel(); ++i) m.data_as<std::int32_t>()[i] = std::int32_t(i * 1000 - 17000);
  const Tensor mt = value_or_die(m.transpose(0, 1));
  const Tensor yt = cast_to(mt, DType::f32);
  for (std::int64_t r = 0; r < 7; ++r)
    for (std::int64_t c = 0; c < 5; ++c) EXPECT_EQ(yt.data_as<float>()[r * 5 + c], float((c * 7 + r) * 1000 - 17000));
}

TEST_P(ElementwiseTest, BinaryBroadcastsLikeNumpy) {
  struct Case {
    Shape a, b;
  };
  const std::vector<Case> cases = {{{1}, {1}},           {{17}, {17}},         {{1000}, {1}},        {{1}, {1000}},
                                   {{4, 1, 17}, {3, 17}}, {{64, 255}, {255}}, {{64, 255}, {64, 1}}, {{2, 3, 4, 5}, {2, 1, 4, 1}},
                                   {{0, 5}, {5}},        {{128, 4096}, {128, 4096}}};
  for (ops::BinaryOp op : {ops::BinaryOp::add, ops::BinaryOp::sub, ops::BinaryOp::mul, ops::BinaryOp::div,
                           ops::BinaryOp::max, ops::BinaryOp::min}) {
    for (DType dt : kFloatTypes) {
      for (const Case& c : cases) {
        SCOPED_TRACE(fmt::format("{} {} a={} b={}", ops::to_string(op), to_string(dt), c.a.to_string(), c.b.to_string()));
        Tensor a = random_tensor(dt, c.a, 3), b = random_tensor(DType::f32, c.b, 4);
        const Shape shape = value_or_die(ops::broadcast_shapes(c.a, c.b));
        Tensor y = zeros(dt, shape), ref = zeros(dt, shape);
        ASSERT_TRUE(ops::binary(stream_, op, a, b, y).ok());
        ASSERT_TRUE(ops::binary(ref_stream_, op, a, b, ref).ok());
        EXPECT_TRUE(close(y, ref, tolerance_for(dt)));
      }
    }
  }
}

TEST_P(ElementwiseTest, BinaryInPlaceAndStrided) {
  Tensor a = random_tensor(DType::f32, {33, 65}, 5), b = padded_copy(random_tensor(DType::f32, {33, 65}, 6));
  Tensor expected = zeros(DType::f32, {33, 65});
  ASSERT_TRUE(ops::add(ref_stream_, a, b, expected).ok());
  ASSERT_TRUE(ops::add(stream_, a, b, a).ok());  // in place
  EXPECT_TRUE(close(a, expected, tolerance_for(DType::f32)));
  // A transposed operand.
  Tensor at = value_or_die(random_tensor(DType::f32, {65, 33}, 7).transpose(0, 1));
  Tensor y = zeros(DType::f32, {33, 65}), ref = zeros(DType::f32, {33, 65});
  ASSERT_TRUE(ops::mul(stream_, at, b, y).ok());
  ASSERT_TRUE(ops::mul(ref_stream_, at, b, ref).ok());
  EXPECT_TRUE(close(y, ref, tolerance_for(DType::f32)));
}

const ops::Activation kActivations[] = {ops::Activation::none, ops::Activation::relu, ops::Activation::gelu_erf,
                                        ops::Activation::gelu_tanh, ops::Activation::silu, ops::Activation::sigmoid,
                                        ops::Activation::tanh, ops::Activation::exp, ops::Activation::quick_gelu};

TEST_P(ElementwiseTest, ActivationsMatchReference) {
  for (ops::Activation act : kActivations) {
    for (DType dt : kFloatTypes) {
      for (std::int64_t n : {1L, 3L, 17L, 255L, 4096L + 5}) {
        SCOPED_TRACE(fmt::format("{} {} n={}", ops::to_string(act), to_string(dt), n));
        Tensor x = random_tensor(dt, {n}, 21, -9.0f, 9.0f);
        Tensor y = zeros(dt, {n}), ref = zeros(dt, {n});
        ASSERT_TRUE(ops::activation(stream_, act, x, y).ok());
        ASSERT_TRUE(ops::activation(ref_stream_, act, x, ref).ok());
        EXPECT_TRUE(close(y, ref, tolerance_for(dt)));
      }
    }
  }
}

// Specials, and the inputs where an exp inside the activation leaves the
// normal range (|x| near 9.4 for erf, 10 for gelu_tanh, 44 for tanh, 87 for
// the rest), into every output type.
TEST_P(ElementwiseTest, ActivationsAtExtremes) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> special = {0.0f, -0.0f, inf, -inf, nan, 1e-40f, -1e-40f, 88.0f, -88.0f, 100.0f, -100.0f, 3.4e38f, -3.4e38f, 1e-5f,
                                9.4f, -9.4f, 10.2f, -10.2f, 44.0f, -44.0f, 60.0f, -60.0f, 87.5f, -87.5f, 95.0f, -95.0f};
  Tensor x = value_or_die(Tensor::wrap(special.data(), TensorDesc::contiguous(DType::f32, {std::int64_t(special.size())})));
  for (ops::Activation act : kActivations) {
    for (DType dt : kFloatTypes) {
      SCOPED_TRACE(fmt::format("{} {}", ops::to_string(act), to_string(dt)));
      Tensor y = zeros(dt, x.shape()), ref = zeros(dt, x.shape());
      ASSERT_TRUE(ops::activation(stream_, act, x, y).ok());
      ASSERT_TRUE(ops::activation(ref_stream_, act, x, ref).ok());
      EXPECT_TRUE(close(y, ref, tolerance_for(dt)));
      EXPECT_TRUE(std::isnan(detail::load(y.data(), dt, 4)));  // NaN propagates through every activation
    }
  }
}

// quick_gelu by its definition, x * sigmoid(1.702 x) (OpenAI CLIP's), in
// f64; within 0.021 of the erf GELU it approximates.
TEST_P(ElementwiseTest, QuickGeluIsClipsApproximation) {
  std::vector<float> xs;
  for (float v = -6.0f; v <= 6.0f; v += 0.25f) xs.push_back(v);
  Tensor x = value_or_die(Tensor::wrap(xs.data(), TensorDesc::contiguous(DType::f32, {std::int64_t(xs.size())})));
  Tensor y = zeros(DType::f32, x.shape()), gelu = zeros(DType::f32, x.shape());
  ASSERT_TRUE(ops::quick_gelu(stream_, x, y).ok());
  ASSERT_TRUE(ops::gelu(stream_, x, gelu).ok());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double v = xs[i], want = v / (1.0 + std::exp(-1.702 * v));
    EXPECT_NEAR(y.data_as<float>()[i], want, 2e-6 * std::max(1.0, std::abs(want))) << v;
    EXPECT_NEAR(y.data_as<float>()[i], gelu.data_as<float>()[i], 0.021) << v;
  }
}

TEST_P(ElementwiseTest, MaxMinPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> a = {1.0f, nan, 3.0f, -0.5f}, b = {nan, 2.0f, 1.0f, -0.25f};
  Tensor ta = value_or_die(Tensor::wrap(a.data(), TensorDesc::contiguous(DType::f32, {4})));
  Tensor tb = value_or_die(Tensor::wrap(b.data(), TensorDesc::contiguous(DType::f32, {4})));
  Tensor y = zeros(DType::f32, {4});
  ASSERT_TRUE(ops::maximum(stream_, ta, tb, y).ok());
  EXPECT_TRUE(std::isnan(y.data_as<float>()[0]) && std::isnan(y.data_as<float>()[1]));
  EXPECT_EQ(y.data_as<float>()[2], 3.0f);
  EXPECT_EQ(y.data_as<float>()[3], -0.25f);
  ASSERT_TRUE(ops::minimum(stream_, ta, tb, y).ok());
  EXPECT_TRUE(std::isnan(y.data_as<float>()[0]) && std::isnan(y.data_as<float>()[1]));
  EXPECT_EQ(y.data_as<float>()[2], 1.0f);
  EXPECT_EQ(y.data_as<float>()[3], -0.5f);
}

TEST_P(ElementwiseTest, GatedMatchesReferenceAndComposition) {
  for (ops::Activation act : {ops::Activation::silu, ops::Activation::gelu_erf, ops::Activation::gelu_tanh, ops::Activation::relu,
                              ops::Activation::quick_gelu}) {
    for (DType dt : kFloatTypes) {
      for (std::int64_t h : {1L, 17L, 64L, 1000L}) {
        SCOPED_TRACE(fmt::format("{} {} h={}", ops::to_string(act), to_string(dt), h));
        Tensor a = random_tensor(dt, {5, h}, 31, -4.0f, 4.0f), b = random_tensor(dt, {5, h}, 32);
        Tensor w = random_tensor(DType::f32, {h}, 33), bias = random_tensor(dt, {h}, 34);
        Tensor y = zeros(dt, {5, h}), ref = zeros(dt, {5, h});
        ASSERT_TRUE(ops::gated(stream_, act, a, b, y).ok());
        ASSERT_TRUE(ops::gated(ref_stream_, act, a, b, ref).ok());
        EXPECT_TRUE(close(y, ref, tolerance_for(dt)));
        // The seeds' act(a) * w + bias, w and bias broadcast per channel.
        ASSERT_TRUE(ops::gated(stream_, act, a, w, bias, y).ok());
        ASSERT_TRUE(ops::gated(ref_stream_, act, a, w, bias, ref).ok());
        EXPECT_TRUE(close(y, ref, tolerance_for(dt)));
        // Fused == the unfused chain (activation, mul, add) in f32.
        Tensor t = zeros(DType::f32, {5, h}), chain = zeros(DType::f32, {5, h}), fused = zeros(DType::f32, {5, h});
        ASSERT_TRUE(ops::activation(stream_, act, a, t).ok());
        ASSERT_TRUE(ops::mul(stream_, t, w, t).ok());
        ASSERT_TRUE(ops::add(stream_, t, bias, chain).ok());
        ASSERT_TRUE(ops::gated(stream_, act, a, w, bias, fused).ok());
        EXPECT_TRUE(close(fused, chain, tolerance_for(DType::f32)));
      }
    }
  }
}

TEST_P(ElementwiseTest, SwigluAndGegluFromOneTensor) {
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(to_string(dt));
    Tensor x = random_tensor(dt, {7, 2 * 96}, 41, -3.0f, 3.0f);
    Tensor lo = value_or_die(x.slice(1, 0, 96)), hi = value_or_die(x.slice(1, 96, 192));
    Tensor y = zeros(dt, {7, 96}), ref = zeros(dt, {7, 96});
    ASSERT_TRUE(ops::swiglu(stream_, x, y).ok());
    ASSERT_TRUE(ops::swiglu(ref_stream_, lo, hi, ref).ok());  // silu(first half) * second half
    EXPECT_TRUE(close(y, ref, tolerance_for(dt)));
    ASSERT_TRUE(ops::geglu(stream_, x, y).ok());
    ASSERT_TRUE(ops::geglu(ref_stream_, hi, lo, ref).ok());  // first half * gelu(second half)
    EXPECT_TRUE(close(y, ref, tolerance_for(dt)));
  }
}

TEST_P(ElementwiseTest, PicksTheRowOfItsLevel) {
  const TensorDesc d = TensorDesc::contiguous(DType::f32, {4096});
  auto plan = value_or_die(ops::Unary::plan(ctx_, ops::Activation::silu, d, d));
  const std::string expected = GetParam() == hw::Isa::scalar ? "unary_ref"
                               : GetParam() == hw::Isa::avx2 ? "unary_avx2"
                                                             : "unary_avx512";
  EXPECT_EQ(plan->kernel(), expected);
}

// Views laid out across y (transposed, permuted, strided along y's inner
// dim) are staged into y's layout and take the SIMD rows; views permuted like
// y are walked in y's order without a copy. Each against the scalar row.
TEST_P(ElementwiseTest, ViewsAcrossYsLayoutTakeTheVectorRows) {
  const bool scalar = GetParam() == hw::Isa::scalar;
  auto transposed = [](DType dt, std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
    return value_or_die(random_tensor(dt, {cols, rows}, seed).transpose(0, 1));  // [rows, cols], column-major
  };
  // The plan's row and workspace, then its result against the scalar row's.
  auto check = [&](const ops::PlanPtr& plan, std::span<const Tensor> in, const Tensor& y, bool staged,
                   const std::function<Status(Stream&, const Tensor&)>& run) {
    EXPECT_EQ(plan->kernel().ends_with("_ref"), scalar) << plan->kernel();
    EXPECT_EQ(plan->workspace_bytes() > 0, staged && !scalar);
    const Tensor ref = zeros(y.dtype(), y.shape());
    ASSERT_TRUE(plan->run(stream_, in, {&y, 1}).ok());  // the workspace from the pool
    ASSERT_TRUE(run(ref_stream_, ref).ok());
    EXPECT_TRUE(close(y, ref, tolerance_for(y.dtype())));
  };
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(to_string(dt));
    // A transposed x into a contiguous y, and into a y transposed alike (no copy).
    const Tensor xt = transposed(dt, 33, 65, 1), y = zeros(dt, {33, 65}), yt = value_or_die(zeros(dt, {65, 33}).transpose(0, 1));
    for (const Tensor& out : {y, yt}) {
      const bool staged = out.is_contiguous();
      SCOPED_TRACE(staged ? "into contiguous y" : "into y transposed alike");
      check(value_or_die(ops::Unary::plan(ctx_, ops::Activation::silu, xt.desc(), out.desc())), {{xt}}, out, staged,
            [&](Stream& s, const Tensor& r) { return ops::silu(s, xt, r); });
    }
    // A cast from a transposed bf16 x.
    const Tensor xb = transposed(DType::bf16, 33, 65, 2), yf = zeros(DType::f32, {33, 65});
    check(value_or_die(ops::Unary::plan(ctx_, ops::Activation::none, xb.desc(), yf.desc())), {{xb}}, yf, true,
          [&](Stream& s, const Tensor& r) { return ops::cast(s, xb, r); });
    // A permuted 3-D a and a row broadcast over it.
    const Tensor a = value_or_die(random_tensor(dt, {4, 5, 6}, 3).permute({2, 0, 1})), row = random_tensor(dt, {5}, 4);
    const Tensor y3 = zeros(dt, {6, 4, 5});
    check(value_or_die(ops::Binary::plan(ctx_, ops::BinaryOp::sub, a.desc(), row.desc(), y3.desc())), {{a, row}}, y3, true,
          [&](Stream& s, const Tensor& r) { return ops::sub(s, a, row, r); });
    // A slice taking every other element of the inner dim (stride 2).
    const Tensor wide = random_tensor(dt, {7, 18}, 5);
    const Tensor every_other = value_or_die(Tensor::wrap(wide.data(), {dt, {7, 9}, {18, 2}}));
    const Tensor y7 = zeros(dt, {7, 9}), b7 = random_tensor(dt, {7, 9}, 6);
    check(value_or_die(ops::Binary::plan(ctx_, ops::BinaryOp::mul, b7.desc(), every_other.desc(), y7.desc())),
          {{b7, every_other}}, y7, true, [&](Stream& s, const Tensor& r) { return ops::mul(s, b7, every_other, r); });
    // Gated, with and without c: b, then c transposed.
    const Tensor ga = random_tensor(dt, {33, 65}, 7), gb = transposed(dt, 33, 65, 8), gc = transposed(dt, 33, 65, 9);
    check(value_or_die(ops::Gated::plan(ctx_, ops::Activation::silu, ga.desc(), gb.desc(), std::nullopt, y.desc())), {{ga, gb}},
          y, true, [&](Stream& s, const Tensor& r) { return ops::gated(s, ops::Activation::silu, ga, gb, r); });
    check(value_or_die(ops::Gated::plan(ctx_, ops::Activation::silu, ga.desc(), ga.desc(), gc.desc(), y.desc())),
          {{ga, ga, gc}}, y, true, [&](Stream& s, const Tensor& r) { return ops::gated(s, ops::Activation::silu, ga, ga, gc, r); });
  }
}

TEST_P(ElementwiseTest, CopiesShowInTheProfiler) {
  // The op layer's copy of a transposed input is an entry of its own, before the op's.
  if (GetParam() == hw::Isa::scalar) GTEST_SKIP() << "nothing is copied at the scalar ISA ceiling";
  const Tensor x = value_or_die(random_tensor(DType::f32, {40, 30}, 1).transpose(0, 1)), y = zeros(DType::f32, {30, 40});
  ctx_.profiler().start();
  ASSERT_TRUE(ops::silu(stream_, x, y).ok());
  ctx_.profiler().stop();
  const std::vector<OpRecord> records = ctx_.profiler().records();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].op, "reorder");
  EXPECT_EQ(records[1].op, "silu");
  EXPECT_EQ(records[1].kernel.ends_with("_ref"), false) << records[1].kernel;
  EXPECT_LE(records[0].run_end_ns, records[1].run_begin_ns);
}

INSTANTIATE_TEST_SUITE_P(Isa, ElementwiseTest, ::testing::ValuesIn(isa_levels()), isa_name);

TEST(ElementwiseErrors, PlanNamesTheArgument) {
  Context ctx;
  const TensorDesc f = TensorDesc::contiguous(DType::f32, {4, 8});
  EXPECT_TRUE(fails_naming(ops::Unary::plan(ctx, ops::Activation::silu, TensorDesc::contiguous(DType::i32, {4, 8}), f), "x"));
  EXPECT_TRUE(fails_naming(ops::Unary::plan(ctx, ops::Activation::silu, f, TensorDesc::contiguous(DType::i32, {4, 8})), "y"));
  EXPECT_TRUE(fails_naming(ops::Unary::plan(ctx, ops::Activation::none, TensorDesc::contiguous(DType::i4, {4, 8}), f), "x"));
  EXPECT_TRUE(fails_naming(ops::Unary::plan(ctx, ops::Activation::none, f, TensorDesc::contiguous(DType::i4, {4, 8})), "y"));
  EXPECT_TRUE(fails_naming(ops::Unary::plan(ctx, ops::Activation::none, TensorDesc::contiguous(DType::i32, {4, 8}),
                                            TensorDesc::contiguous(DType::i8, {4, 9})), "y"));
  EXPECT_TRUE(fails_naming(ops::Unary::plan(ctx, ops::Activation::silu, f, TensorDesc::contiguous(DType::f32, {4, 9})), "y"));
  EXPECT_TRUE(fails_naming(ops::Binary::plan(ctx, ops::BinaryOp::add, f, TensorDesc::contiguous(DType::f32, {3}), f), "b"));
  EXPECT_TRUE(fails_naming(ops::Binary::plan(ctx, ops::BinaryOp::add, f, f, TensorDesc::contiguous(DType::u8, {4, 8})), "y"));
  // A broadcast (stride 0) output.
  const TensorDesc bcast{DType::f32, {4, 8}, {0, 1}};
  EXPECT_TRUE(fails_naming(ops::Binary::plan(ctx, ops::BinaryOp::add, f, f, bcast), "y"));
  // An output whose strides make elements share memory.
  const TensorDesc self_overlap{DType::f32, {64, 1024}, {1, 1}};
  EXPECT_TRUE(fails_naming(ops::Unary::plan(ctx, ops::Activation::silu, TensorDesc::contiguous(DType::f32, {64, 1024}), self_overlap), "y"));
  const TensorDesc overlap_3d{DType::f32, {4, 3, 8}, {16, 8, 1}};  // dim 1 (3 x 8) spans 24 > 16
  EXPECT_TRUE(fails_naming(ops::Unary::plan(ctx, ops::Activation::silu, TensorDesc::contiguous(DType::f32, {4, 3, 8}), overlap_3d), "y"));
  const TensorDesc gapped{DType::f32, {4, 3, 8}, {100, 1, 3}};  // interleaved but disjoint
  EXPECT_TRUE(ops::Unary::plan(ctx, ops::Activation::silu, TensorDesc::contiguous(DType::f32, {4, 3, 8}), gapped).ok());
  // Sizes that overflow, negative dims, bad strides.
  const TensorDesc huge = TensorDesc::contiguous(DType::f32, {std::int64_t(1) << 40, std::int64_t(1) << 40});
  EXPECT_TRUE(fails_naming(ops::Unary::plan(ctx, ops::Activation::silu, huge, huge), "x"));
  const TensorDesc negative{DType::f32, {-1, 8}, {8, 1}};
  EXPECT_TRUE(fails_naming(ops::Unary::plan(ctx, ops::Activation::silu, negative, f), "x"));
  EXPECT_TRUE(fails_naming(ops::Unary::plan(ctx, ops::Activation(200), f, f), "act"));
  EXPECT_TRUE(fails_naming(ops::Gated::plan(ctx, ops::Activation::silu, f, f, TensorDesc::contiguous(DType::f32, {5}), f), "c"));
  EXPECT_TRUE(fails_naming(ops::Gated::plan(ctx, ops::Activation::silu, f, TensorDesc::contiguous(DType::i8, {8}), std::nullopt, f), "b"));
  EXPECT_TRUE(fails_naming(ops::Gated::plan(ctx, ops::Activation::silu, f, f, std::nullopt, TensorDesc::contiguous(DType::f32, {8})), "y"));
  const TensorDesc bad_strides{DType::f32, {4, 8}, {8}};
  EXPECT_TRUE(fails_naming(ops::Unary::plan(ctx, ops::Activation::silu, f, bad_strides), "y"));
}

TEST(ElementwiseErrors, RunChecksTensorsAndAliasing) {
  Context ctx;
  Stream stream(ctx);
  Tensor a = random_tensor(DType::f32, {16, 16}, 1), b = random_tensor(DType::f32, {16, 16}, 2);
  auto plan = value_or_die(ops::Binary::plan(ctx, ops::BinaryOp::add, a.desc(), b.desc(), a.desc()));
  // Wrong shape at run time.
  Tensor small = zeros(DType::f32, {4, 4});
  EXPECT_TRUE(fails_naming(plan->run(stream, {a, small}, {a}), "b"));
  // Wrong count, and an undefined tensor.
  EXPECT_FALSE(plan->run(stream, {a}, {a}).ok());
  EXPECT_TRUE(fails_naming(plan->run(stream, {a, b}, {Tensor{}}), "y"));
  // Partial overlap: y is a shifted view of a's storage.
  Tensor big = random_tensor(DType::f32, {17, 16}, 3);
  Tensor view0 = value_or_die(big.slice(0, 0, 16)), view1 = value_or_die(big.slice(0, 1, 17));
  EXPECT_TRUE(fails_naming(ops::add(stream, view0, b, view1), "y"));
  // swiglu / geglu from one tensor need an even last dim.
  Tensor odd = random_tensor(DType::f32, {2, 5}, 4), half = zeros(DType::f32, {2, 2});
  EXPECT_TRUE(fails_naming(ops::swiglu(stream, odd, half), "x"));
}

}  // namespace
}  // namespace tessera::testing
