#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "core/element.hpp"
#include "core/strided.hpp"
#include "kernels/quantize.hpp"
#include "support/harness.hpp"

namespace tessera::testing {
namespace {

using tessera::detail::load;

// Element i of a contiguous integer tensor (i8, u8, i4, i32) set to v.
void set_int(const Tensor& t, std::int64_t i, int v) {
  auto* bytes = t.data_as<std::uint8_t>();
  switch (t.dtype()) {
    case DType::i32: t.data_as<std::int32_t>()[i] = v; break;
    case DType::i4: {
      std::uint8_t& byte = bytes[i >> 1];
      byte = std::uint8_t((i & 1) ? (byte & 0x0f) | (v << 4) : (byte & 0xf0) | (v & 0x0f));
      break;
    }
    default: bytes[i] = std::uint8_t(v); break;
  }
}

// Integers uniform in [lo, hi], deterministic in `seed`.
Tensor int_tensor(DType dtype, const Shape& shape, std::uint64_t seed, int lo, int hi) {
  Tensor t = zeros(dtype, shape);
  std::uint64_t state = seed * 0x9e3779b97f4a7c15ull + 1;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    set_int(t, i, lo + int((state >> 33) % std::uint64_t(hi - lo + 1)));
  }
  return t;
}

Tensor wrap_floats(std::vector<float>& v) {
  return value_or_die(Tensor::wrap(v.data(), TensorDesc::contiguous(DType::f32, {std::int64_t(v.size())})));
}

// A zeroed view of `shape` whose rows are padded to an even length: a
// non-contiguous i4 output that still starts every row on a byte.
Tensor padded_zeros(DType dtype, const Shape& shape) {
  Shape big = shape;
  const int last = shape.rank() - 1;
  big[last] += shape[last] % 2 ? 1 : 2;
  return value_or_die(zeros(dtype, big).slice(last, 0, shape[last]));
}

// Two integer tensors of one shape (any strides) hold the same values.
::testing::AssertionResult same_ints(const Tensor& got, const Tensor& ref) {
  const auto dims = tessera::detail::collapse<2>(got.shape(), {got.strides(), ref.strides()});
  for (std::int64_t i = 0; i < got.numel(); ++i) {
    const auto off = dims.offsets(i);
    const float g = load(got.data(), got.dtype(), off[0]), r = load(ref.data(), ref.dtype(), off[1]);
    if (g != r) return ::testing::AssertionFailure() << "element " << i << ": " << g << ", reference " << r;
  }
  return ::testing::AssertionSuccess();
}

// Zero points near the middle of each type's range, so few values saturate.
Tensor zero_points(DType dtype, const Shape& shape, std::uint64_t seed) {
  switch (dtype) {
    case DType::u8: return int_tensor(dtype, shape, seed, 100, 150);
    case DType::i4: return int_tensor(dtype, shape, seed, -3, 3);
    default: return int_tensor(dtype, shape, seed, -20, 20);
  }
}

std::pair<int, int> full_range(DType t) {
  switch (t) {
    case DType::u8: return {0, 255};
    case DType::i4: return {-8, 7};
    case DType::i32: return {-1 << 20, 1 << 20};
    default: return {-128, 127};
  }
}

struct Granularity {
  const char* name;
  Shape x;
  ops::QuantAttrs attrs;
  Shape scale;
};

// Odd and even run lengths, ragged last blocks (293 = 9 * 32 + 5, 300 = 2 * 128 + 44).
const std::vector<Granularity> kGranularities = {
    {"per_tensor_scalar", {5, 37}, {}, {}},
    {"per_tensor_1", {4, 66}, {}, {1}},
    {"channel_axis0", {6, 37}, {.axis = 0}, {6}},
    {"channel_middle", {3, 5, 38}, {.axis = 1}, {5}},
    {"channel_last", {3, 67}, {.axis = -1}, {67}},
    {"group32_last", {3, 293}, {.axis = 1, .group_size = 32}, {3, 10}},
    {"group64_last", {4, 256}, {.axis = -1, .group_size = 64}, {4, 4}},
    {"group128_last", {3, 293}, {.axis = 1, .group_size = 128}, {3, 3}},
    {"group32_axis0", {300, 10}, {.axis = 0, .group_size = 32}, {10, 10}},
    {"group64_axis0", {300, 9}, {.axis = 0, .group_size = 64}, {5, 9}},
    {"group128_axis0", {300, 10}, {.axis = 0, .group_size = 128}, {3, 10}},
    {"group32_middle", {2, 70, 5}, {.axis = 1, .group_size = 32}, {2, 3, 5}},
};

const std::vector<DType> kQuantTypes = {DType::i8, DType::u8, DType::i4};

class QuantizeTest : public IsaTest {};

// Integers must match the scalar run exactly, for every granularity, type,
// zero point or none, contiguous and padded outputs.
TEST_P(QuantizeTest, QuantizeMatchesReferenceExactly) {
  int seed = 0;
  for (const Granularity& g : kGranularities) {
    for (DType qt : kQuantTypes) {
      for (std::size_t f = 0; f < kFloatTypes.size(); ++f) {
        const DType xt = kFloatTypes[f], st = kFloatTypes[(f + 1) % kFloatTypes.size()];
        for (bool with_zp : {false, true}) {
          for (bool padded : {false, true}) {
            SCOPED_TRACE(fmt::format("{} y={} x={} scale={} zp={} padded={}", g.name, to_string(qt), to_string(xt),
                                     to_string(st), with_zp, padded));
            ++seed;
            Tensor x = random_tensor(xt, g.x, seed, -3.0f, 3.0f);
            if (padded) x = padded_copy(x);
            // x / scale reaches about +-300: i8, u8 and i4 all saturate somewhere.
            Tensor scale = random_tensor(st, g.scale, seed + 1000, 0.01f, 0.05f);
            const std::optional<Tensor> zp = with_zp ? std::optional(zero_points(qt, g.scale, seed)) : std::nullopt;
            Tensor y = padded ? padded_zeros(qt, g.x) : zeros(qt, g.x), ref = zeros(qt, g.x);
            ASSERT_TRUE(ops::quantize(stream_, x, scale, zp, y, g.attrs).ok());
            ASSERT_TRUE(ops::quantize(ref_stream_, x, scale, zp, ref, g.attrs).ok());
            EXPECT_TRUE(same_ints(y, ref));
          }
        }
      }
    }
  }
}

TEST_P(QuantizeTest, DequantizeMatchesReference) {
  int seed = 0;
  for (const Granularity& g : kGranularities) {
    for (DType qt : {DType::i8, DType::u8, DType::i4, DType::i32}) {
      for (std::size_t f = 0; f < kFloatTypes.size(); ++f) {
        const DType yt = kFloatTypes[f], st = kFloatTypes[(f + 2) % kFloatTypes.size()];
        for (bool with_zp : {false, true}) {
          SCOPED_TRACE(fmt::format("{} x={} y={} scale={} zp={}", g.name, to_string(qt), to_string(yt), to_string(st), with_zp));
          ++seed;
          const auto [lo, hi] = full_range(qt);
          Tensor x = int_tensor(qt, g.x, seed, lo, hi);
          Tensor scale = random_tensor(st, g.scale, seed + 1000, -0.05f, 0.05f);
          const std::optional<Tensor> zp = with_zp ? std::optional(zero_points(qt, g.scale, seed)) : std::nullopt;
          Tensor y = zeros(yt, g.x), ref = zeros(yt, g.x);
          ASSERT_TRUE(ops::dequantize(stream_, x, scale, zp, y, g.attrs).ok());
          ASSERT_TRUE(ops::dequantize(ref_stream_, x, scale, zp, ref, g.attrs).ok());
          EXPECT_TRUE(close(y, ref, tolerance_for(yt)));
        }
      }
    }
  }
}

// Streaming stores for y run only past the L3, so the rows are called
// directly: this level's row with stream_y on against the reference, for
// runs that start on a line (streamed) or off one (stored), end inside one,
// with one scale or one per element.
TEST_P(QuantizeTest, StreamingDequantizeRows) {
  const std::int64_t n = 203;
  for (DType qt : {DType::i8, DType::u8})
    for (DType yt : {DType::f32, DType::bf16})
      for (bool per_element : {false, true}) {
        SCOPED_TRACE(fmt::format("x={} y={} per_element={}", to_string(qt), to_string(yt), per_element));
        const auto [lo, hi] = full_range(qt);
        const Tensor x = int_tensor(qt, {n}, 5, lo, hi);
        const Tensor scale = random_tensor(DType::f32, {per_element ? n : 1}, 6, -0.05f, 0.05f);
        Tensor y = zeros(yt, {n}), ref = zeros(yt, {n});
        kernels::QuantArgs args{qt, yt, DType::f32, qt, x.data(), 0, 1, y.data(), 0, 1, scale.data(), 0, per_element ? 1 : 0,
                                nullptr, 0, 0, 1, true};
        const kernels::QuantProblem problem{qt, yt, DType::f32, qt, true, true, n};
        const auto* row = kernels::select<kernels::DequantizeFamily>(problem, GetParam());
        for (std::int64_t start : {0, 3}) {
          args.y = y.data();
          row->run(args, start, n);
          args.y = ref.data();
          kernels::ref::dequantize(args, start, n);
          EXPECT_TRUE(close(y, ref, {.atol = 0, .rtol = 0, .min_cosine = 1})) << row->name << " from " << start;
        }
      }
}

TEST_P(QuantizeTest, TiesSaturationAndNaN) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  // With scale 1: ties go to even, large values and infinities saturate, NaN gives the zero point.
  const std::vector<float> values = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 3.5f, 0.49999997f, -0.50000006f, 6.5f, 7.5f, -8.5f,
                                     127.5f, -128.5f, 254.5f, 1e30f, -1e30f, inf, -inf, nan, 0.0f, -0.0f, 1000.0f};
  struct Case {
    DType type;
    int zero;
  };
  for (const Case c : {Case{DType::i8, 0}, Case{DType::u8, 10}, Case{DType::i4, -3}, Case{DType::i4, 0}}) {
    const int lo = c.type == DType::u8 ? 0 : c.type == DType::i4 ? -8 : -128;
    const int hi = c.type == DType::u8 ? 255 : c.type == DType::i4 ? 7 : 127;
    // Repeated past two vector lengths, so vector bodies and tails both see every value.
    std::vector<float> xs;
    for (int rep = 0; rep < 3; ++rep) xs.insert(xs.end(), values.begin(), values.end());
    for (DType xt : kFloatTypes) {
      SCOPED_TRACE(fmt::format("y={} zero={} x={}", to_string(c.type), c.zero, to_string(xt)));
      Tensor x32 = wrap_floats(xs), x = zeros(xt, x32.shape());
      ASSERT_TRUE(ops::cast(stream_, x32, x).ok());
      Tensor scale = random_tensor(DType::f32, {}, 1, 1.0f, 1.0f), zp = zeros(c.type, {});
      set_int(zp, 0, c.zero);
      Tensor y = zeros(c.type, x.shape());
      ASSERT_TRUE(ops::quantize(stream_, x, scale, zp, y, {}).ok());
      for (std::size_t i = 0; i < xs.size(); ++i) {
        const float v = load(x.data(), xt, std::int64_t(i));  // as stored in x's dtype
        const int expected = std::isnan(v) ? c.zero : int(std::clamp(std::nearbyint(double(v)) + c.zero, double(lo), double(hi)));
        EXPECT_EQ(load(y.data(), c.type, std::int64_t(i)), float(expected)) << "x = " << v;
      }
    }
  }
  // Spot checks of the rule itself, independent of the loop above.
  std::vector<float> ties = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 1e30f, -inf, nan};
  Tensor x = wrap_floats(ties), scale = random_tensor(DType::f32, {1}, 2, 1.0f, 1.0f), y = zeros(DType::i8, x.shape());
  ASSERT_TRUE(ops::quantize(stream_, x, scale, std::nullopt, y, {}).ok());
  const std::int8_t expected[] = {0, 2, 2, 0, -2, -2, 127, -128, 0};
  for (int i = 0; i < 9; ++i) EXPECT_EQ(y.data_as<std::int8_t>()[i], expected[i]) << "x = " << ties[i];
}

TEST_P(QuantizeTest, ZeroScaleGivesZeroPointOrSaturates) {
  std::vector<float> xs = {0.0f, 1.0f, -1.0f};
  Tensor x = wrap_floats(xs), scale = zeros(DType::f32, {}), zp = zeros(DType::u8, {}), y = zeros(DType::u8, {3});
  set_int(zp, 0, 7);
  ASSERT_TRUE(ops::quantize(stream_, x, scale, zp, y, {}).ok());
  EXPECT_EQ(y.data_as<std::uint8_t>()[0], 7);  // 0 / 0 is NaN: the zero point
  EXPECT_EQ(y.data_as<std::uint8_t>()[1], 255);
  EXPECT_EQ(y.data_as<std::uint8_t>()[2], 0);
}

// quantize -> dequantize lands within scale / 2 of x when nothing saturates.
TEST_P(QuantizeTest, RoundTripWithinHalfAScale) {
  struct Case {
    DType type;
    Granularity g;
    float scale_lo, scale_hi;  // |x| <= 1: |x / scale| stays inside the type's range
  };
  const std::vector<Case> cases = {
      {DType::i8, {"per_tensor", {7, 100}, {}, {}}, 0.01f, 0.02f},
      {DType::u8, {"channel", {7, 100}, {.axis = 0}, {7}}, 0.01f, 0.02f},
      {DType::i4, {"group32", {7, 100}, {.axis = 1, .group_size = 32}, {7, 4}}, 0.15f, 0.3f},
      {DType::i4, {"group64_axis0", {130, 8}, {.axis = 0, .group_size = 64}, {3, 8}}, 0.15f, 0.3f},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{} {}", to_string(c.type), c.g.name));
    Tensor x = random_tensor(DType::f32, c.g.x, 3, -1.0f, 1.0f);
    Tensor scale = random_tensor(DType::f32, c.g.scale, 4, c.scale_lo, c.scale_hi);
    // u8 needs its zero point in the middle to hold negative values.
    const std::optional<Tensor> zp = c.type == DType::u8 ? std::optional(int_tensor(DType::u8, c.g.scale, 5, 120, 136)) : std::nullopt;
    Tensor q = zeros(c.type, c.g.x), back = zeros(DType::f32, c.g.x);
    ASSERT_TRUE(ops::quantize(stream_, x, scale, zp, q, c.g.attrs).ok());
    ASSERT_TRUE(ops::dequantize(stream_, q, scale, zp, back, c.g.attrs).ok());
    // The scale of each element: dequantize ones with zero point 0.
    Tensor ones = zeros(DType::i8, c.g.x), s = zeros(DType::f32, c.g.x);
    for (std::int64_t i = 0; i < ones.numel(); ++i) set_int(ones, i, 1);
    ASSERT_TRUE(ops::dequantize(stream_, ones, scale, std::nullopt, s, c.g.attrs).ok());
    // Beyond scale / 2: f32 rounding of x / scale and of the product, < 1e-6 here.
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const float err = std::abs(back.data_as<float>()[i] - x.data_as<float>()[i]);
      EXPECT_LE(err, s.data_as<float>()[i] * 0.5f + 1e-6f) << "element " << i;
    }
  }
}

// Transposed x (a non-unit run stride: the reference row at every level),
// i4 outputs whose rows start mid-byte (written by one task), and tensors
// large enough to be split across threads, mid-run for i4.
TEST_P(QuantizeTest, StridedAndThreadedLayouts) {
  Tensor base = random_tensor(DType::f32, {40, 33}, 6, -2.0f, 2.0f);
  Tensor xt = value_or_die(base.transpose(0, 1));  // [33, 40], run stride 33
  Tensor scale = random_tensor(DType::f32, {33}, 7, 0.01f, 0.3f);
  for (DType qt : kQuantTypes) {
    SCOPED_TRACE(to_string(qt));
    Tensor y = zeros(qt, {33, 40}), ref = zeros(qt, {33, 40});
    ASSERT_TRUE(ops::quantize(stream_, xt, scale, std::nullopt, y, {.axis = 0}).ok());
    ASSERT_TRUE(ops::quantize(ref_stream_, xt, scale, std::nullopt, ref, {.axis = 0}).ok());
    EXPECT_TRUE(same_ints(y, ref));
  }
  struct Big {
    Shape shape;
    ops::QuantAttrs attrs;
    Shape scale;
  };
  // [3, 100001] per tensor: one run of 300003 split at even positions;
  // [40, 9999] per channel: odd row starts, one task; [40, 10000]: even rows, split mid-row.
  for (const Big& b : {Big{{3, 100001}, {}, {}}, Big{{40, 9999}, {.axis = 0}, {40}}, Big{{40, 10000}, {.axis = 0}, {40}},
                       Big{{40, 10000}, {.axis = 1, .group_size = 128}, {40, 79}}}) {
    SCOPED_TRACE(b.shape.to_string());
    Tensor x = random_tensor(DType::f32, b.shape, 8, -2.0f, 2.0f);
    Tensor s = random_tensor(DType::f32, b.scale, 9, 0.2f, 0.4f);
    Tensor y = zeros(DType::i4, b.shape), ref = zeros(DType::i4, b.shape);
    ASSERT_TRUE(ops::quantize(stream_, x, s, std::nullopt, y, b.attrs).ok());
    ASSERT_TRUE(ops::quantize(ref_stream_, x, s, std::nullopt, ref, b.attrs).ok());
    EXPECT_TRUE(same_ints(y, ref));
    Tensor back = zeros(DType::f32, b.shape), back_ref = zeros(DType::f32, b.shape);
    ASSERT_TRUE(ops::dequantize(stream_, y, s, std::nullopt, back, b.attrs).ok());
    ASSERT_TRUE(ops::dequantize(ref_stream_, ref, s, std::nullopt, back_ref, b.attrs).ok());
    EXPECT_TRUE(close(back, back_ref, tolerance_for(DType::f32)));
  }
}

TEST_P(QuantizeTest, VectorRowsAreChosen) {
  const TensorDesc x = TensorDesc::contiguous(DType::f32, {8, 64}), s = TensorDesc::contiguous(DType::f32, {8});
  const TensorDesc q = TensorDesc::contiguous(DType::i4, {8, 64});
  auto quant = value_or_die(ops::Quantize::plan(ctx_, x, s, std::nullopt, q, {.axis = 0}));
  auto dequant = value_or_die(ops::Dequantize::plan(ctx_, q, s, std::nullopt, x, {.axis = 0}));
  if (GetParam() >= hw::Isa::avx2) {
    EXPECT_NE(quant->kernel(), "quantize_ref");
    EXPECT_NE(dequant->kernel(), "dequantize_ref");
  }
  // Traffic: x (4 bytes), y (half a byte) per element, 8 scales.
  EXPECT_EQ(quant->bytes_moved(), 8 * 64 * 4 + 8 * 64 / 2 + 8 * 4);
}

TEST_P(QuantizeTest, ScalarAndEmptyTensors) {
  std::vector<float> one = {2.5f};
  Tensor x = value_or_die(Tensor::wrap(one.data(), TensorDesc::contiguous(DType::f32, {})));
  Tensor scale = random_tensor(DType::f32, {}, 1, 0.5f, 0.5f), y = zeros(DType::i8, {});
  ASSERT_TRUE(ops::quantize(stream_, x, scale, std::nullopt, y, {}).ok());
  EXPECT_EQ(y.data_as<std::int8_t>()[0], 5);
  Tensor ex = zeros(DType::f32, {0, 8}), ey = zeros(DType::i4, {0, 8});
  EXPECT_TRUE(ops::quantize(stream_, ex, scale, std::nullopt, ey, {}).ok());
  EXPECT_TRUE(ops::dequantize(stream_, ey, scale, std::nullopt, ex, {}).ok());
  Tensor gs = zeros(DType::f32, {0, 1});
  EXPECT_TRUE(ops::quantize(stream_, ex, gs, std::nullopt, ey, {.axis = 1, .group_size = 32}).ok());
}

INSTANTIATE_TEST_SUITE_P(Isa, QuantizeTest, ::testing::ValuesIn(isa_levels()), isa_name);

TEST(QuantizeErrors, PlanNamesTheArgument) {
  Context ctx;
  auto desc = [](DType t, const Shape& s) { return TensorDesc::contiguous(t, s); };
  const TensorDesc x = desc(DType::f32, {4, 64}), y = desc(DType::i8, {4, 64}), s = desc(DType::f32, {4});
  const ops::QuantAttrs axis0{.axis = 0};
  // Scale shapes that fit no granularity.
  EXPECT_TRUE(fails_naming(ops::Quantize::plan(ctx, x, desc(DType::f32, {3}), std::nullopt, y, axis0), "scale"));
  EXPECT_TRUE(fails_naming(ops::Quantize::plan(ctx, x, desc(DType::f32, {4, 1}), std::nullopt, y, axis0), "scale"));
  EXPECT_TRUE(fails_naming(ops::Quantize::plan(ctx, x, desc(DType::f32, {4, 3}), std::nullopt, y, {.axis = 1, .group_size = 32}), "scale"));
  EXPECT_TRUE(fails_naming(ops::Quantize::plan(ctx, x, desc(DType::f32, {4}), std::nullopt, y, {.axis = 1, .group_size = 32}), "scale"));
  EXPECT_TRUE(fails_naming(ops::Quantize::plan(ctx, x, desc(DType::i8, {4}), std::nullopt, y, axis0), "scale"));
  EXPECT_TRUE(fails_naming(ops::Quantize::plan(ctx, x, s, std::nullopt, y, {.axis = 0, .group_size = -1}), "group_size"));
  // A ragged last block is fine: 64 = 48 + 16.
  EXPECT_TRUE(ops::Quantize::plan(ctx, x, desc(DType::f32, {4, 2}), std::nullopt, y, {.axis = 1, .group_size = 48}).ok());
  // Zero point: dtype and shape.
  EXPECT_TRUE(fails_naming(ops::Quantize::plan(ctx, x, s, desc(DType::u8, {4}), y, axis0), "zero_point"));
  EXPECT_TRUE(fails_naming(ops::Quantize::plan(ctx, x, s, desc(DType::i8, {5}), y, axis0), "zero_point"));
  EXPECT_TRUE(fails_naming(ops::Dequantize::plan(ctx, y, s, desc(DType::i4, {4}), x, axis0), "zero_point"));
  // Dtypes of x and y.
  EXPECT_TRUE(fails_naming(ops::Quantize::plan(ctx, desc(DType::i8, {4, 64}), s, std::nullopt, y, axis0), "x"));
  EXPECT_TRUE(fails_naming(ops::Quantize::plan(ctx, x, s, std::nullopt, desc(DType::f32, {4, 64}), axis0), "y"));
  EXPECT_TRUE(fails_naming(ops::Quantize::plan(ctx, x, s, std::nullopt, desc(DType::i32, {4, 64}), axis0), "y"));
  EXPECT_TRUE(fails_naming(ops::Dequantize::plan(ctx, x, s, std::nullopt, x, axis0), "x"));
  EXPECT_TRUE(fails_naming(ops::Dequantize::plan(ctx, y, s, std::nullopt, desc(DType::i8, {4, 64}), axis0), "y"));
  // Axis.
  EXPECT_TRUE(fails_naming(ops::Quantize::plan(ctx, x, s, std::nullopt, y, {.axis = 2}), "axis"));
  EXPECT_TRUE(fails_naming(ops::Quantize::plan(ctx, x, s, std::nullopt, y, {.axis = -3}), "axis"));
  EXPECT_TRUE(ops::Quantize::plan(ctx, x, s, std::nullopt, y, {.axis = -2}).ok());
  // Per tensor ignores the axis, as ONNX does.
  EXPECT_TRUE(ops::Quantize::plan(ctx, x, desc(DType::f32, {}), std::nullopt, y, {.axis = 7}).ok());
  // y: shape, and no self-overlap.
  EXPECT_TRUE(fails_naming(ops::Quantize::plan(ctx, x, s, std::nullopt, desc(DType::i8, {64, 4}), axis0), "y"));
  EXPECT_TRUE(fails_naming(ops::Quantize::plan(ctx, x, s, std::nullopt, TensorDesc{DType::i8, {4, 64}, {0, 1}}, axis0), "y"));
}

TEST(QuantizeErrors, RunChecksTheTensors) {
  Context ctx;
  Stream stream(ctx);
  Tensor x = random_tensor(DType::f32, {4, 8}, 1), s = random_tensor(DType::f32, {4}, 2), y = zeros(DType::i8, {4, 8});
  auto plan = value_or_die(ops::Quantize::plan(ctx, x.desc(), s.desc(), std::nullopt, y.desc(), {.axis = 0}));
  EXPECT_TRUE(fails_naming(plan->run(stream, {x, s}, {zeros(DType::i8, {4, 9})}), "y"));
  EXPECT_TRUE(fails_naming(plan->run(stream, {x, zeros(DType::f32, {5})}, {y}), "scale"));
  // y may not overlap an input.
  Tensor yx = value_or_die(Tensor::wrap(x.data(), y.desc()));
  EXPECT_TRUE(fails_naming(plan->run(stream, {x, s}, {yx}), "y"));
}

}  // namespace
}  // namespace tessera::testing
