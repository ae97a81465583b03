#include <array>
#include <climits>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/element.hpp"
#include "kernels/resize.hpp"
#include "support/harness.hpp"

namespace tessera::testing {
namespace {

using ops::CoordinateMode;
using ops::NearestRounding;
using ops::ResizeAttrs;
using ops::ResizeMode;

constexpr CoordinateMode kCoords[] = {CoordinateMode::half_pixel, CoordinateMode::align_corners,
                                      CoordinateMode::asymmetric, CoordinateMode::pytorch_half_pixel};

// Nearest with each rounding, bilinear and cubic (PyTorch's -0.75, and
// TensorFlow's -0.5 with exclude_outside), under every coordinate mode.
std::vector<ResizeAttrs> all_attrs(bool channels_last) {
  std::vector<ResizeAttrs> v;
  for (CoordinateMode c : kCoords) {
    v.push_back({ResizeMode::nearest, c, NearestRounding::floor, channels_last});
    v.push_back({ResizeMode::nearest, c, NearestRounding::round_prefer_floor, channels_last});
    v.push_back({ResizeMode::bilinear, c, NearestRounding::floor, channels_last});
    v.push_back({ResizeMode::cubic, c, NearestRounding::floor, channels_last});
    v.push_back({ResizeMode::cubic, c, NearestRounding::floor, channels_last, -0.5f, true});
  }
  return v;
}

std::string describe(const ResizeAttrs& a) {
  return fmt::format("mode={} coord={} rounding={} nhwc={} a={} exclude_outside={}", int(a.mode), int(a.coord), int(a.rounding),
                     a.channels_last, a.cubic_coeff_a, a.exclude_outside);
}

Shape image(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, bool nhwc) {
  return nhwc ? Shape{n, h, w, c} : Shape{n, c, h, w};
}

// Element [n, c, h, w] in either layout, as f32.
float at(const Tensor& t, bool nhwc, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) {
  const Strides& s = t.strides();
  const std::int64_t off = nhwc ? n * s[0] + h * s[1] + w * s[2] + c * s[3] : n * s[0] + c * s[1] + h * s[2] + w * s[3];
  return tessera::detail::load(t.data(), t.dtype(), off);
}

// Nearest copies values; bilinear sums two weighted taps along each axis, cubic four.
Tolerance tolerance(DType dt, const ResizeAttrs& a) {
  return a.mode == ResizeMode::bilinear ? tolerance_for(dt, 4) : a.mode == ResizeMode::cubic ? tolerance_for(dt, 16) : tolerance_for(dt);
}

class ResizeTest : public IsaTest {
 protected:
  // Resizes x into y at this test's ISA and into a contiguous tensor at scalar; the two must agree.
  void expect_matches_reference(const Tensor& x, const Tensor& y, const ResizeAttrs& attrs) {
    Tensor ref = zeros(y.dtype(), y.shape());
    ASSERT_TRUE(ops::resize(stream_, x, y, attrs).ok());
    ASSERT_TRUE(ops::resize(ref_stream_, x, ref, attrs).ok());
    EXPECT_TRUE(close(y, ref, tolerance(y.dtype(), attrs)));
  }
};

struct Case {
  std::int64_t h, w, ho, wo;
  std::vector<std::int64_t> channels;
};

TEST_P(ResizeTest, MatchesReferenceAcrossModesLayoutsAndScales) {
  const std::vector<std::int64_t> all_c = {1, 3, 17, 64, 320};
  const Case cases[] = {
      {4, 6, 8, 12, all_c},    // x2
      {5, 7, 15, 21, all_c},   // x3
      {8, 10, 4, 5, all_c},    // /2
      {7, 7, 10, 10, all_c},   // 7 -> 10
      {10, 10, 7, 7, all_c},   // 10 -> 7
      {7, 10, 10, 7, all_c},   // up one axis, down the other
      {1, 1, 5, 5, all_c},     // 1x1 -> 5x5
      {5, 5, 1, 1, all_c},     // 5x5 -> 1x1
      // Wide rows, for the NCHW kernels that vectorize along them: many
      // blocks and a tail; sources of a block in one register (up), two
      // (100 -> 60) or gathered (100 -> 45, 200 -> 37).
      {3, 100, 5, 250, {1, 3}},
      {4, 100, 3, 60, {1, 3}},
      {4, 100, 3, 45, {1, 3}},
      {4, 200, 3, 37, {1, 3}},
      // x2 along wide rows (the NCHW half-pixel x2 path): whole blocks of 16
      // outputs, and a row whose last block is partial (37 -> 74).
      {3, 64, 6, 128, {1, 3}},
      {2, 37, 4, 74, {1, 3}},
  };
  for (DType dt : kFloatTypes)
    for (const Case& k : cases)
      for (std::int64_t c : k.channels)
        for (bool nhwc : {false, true}) {
          const std::int64_t n = c < 64 ? 2 : 1;
          Tensor x = random_tensor(dt, image(n, c, k.h, k.w, nhwc), 1, -2.0f, 2.0f);
          for (const ResizeAttrs& attrs : all_attrs(nhwc)) {
            SCOPED_TRACE(fmt::format("{} {}x{} -> {}x{} C={} {}", to_string(dt), k.h, k.w, k.ho, k.wo, c, describe(attrs)));
            expect_matches_reference(x, zeros(dt, image(n, c, k.ho, k.wo, nhwc)), attrs);
          }
        }
}

TEST_P(ResizeTest, StridedAndPermutedViews) {
  for (DType dt : kFloatTypes)
    for (bool nhwc : {false, true}) {
      // Gaps between rows of x and of y.
      Tensor x = padded_copy(random_tensor(dt, image(2, 5, 6, 9, nhwc), 2));
      for (const ResizeAttrs& attrs : all_attrs(nhwc)) {
        SCOPED_TRACE(fmt::format("{} padded {}", to_string(dt), describe(attrs)));
        expect_matches_reference(x, padded_copy(zeros(dt, image(2, 5, 13, 4, nhwc))), attrs);
      }
    }
  // The same images stored NHWC and viewed as NCHW (W stride C), and the
  // other way round (C stride H*W): both layouts give the same result.
  Tensor nhwc = random_tensor(DType::f32, {2, 6, 9, 5}, 3);
  Tensor nchw = value_or_die(value_or_die(nhwc.permute({0, 3, 1, 2})).contiguous());
  for (const ResizeAttrs& attrs : all_attrs(false)) {
    SCOPED_TRACE(describe(attrs));
    ResizeAttrs last = attrs;
    last.channels_last = true;
    Tensor y_nchw = zeros(DType::f32, {2, 5, 13, 4}), y_nhwc = zeros(DType::f32, {2, 13, 4, 5});
    ASSERT_TRUE(ops::resize(stream_, nchw, y_nchw, attrs).ok());
    ASSERT_TRUE(ops::resize(stream_, nhwc, y_nhwc, last).ok());
    EXPECT_TRUE(close(value_or_die(y_nhwc.permute({0, 3, 1, 2})), y_nchw, tolerance(DType::f32, attrs)));
    Tensor y_view = zeros(DType::f32, {2, 5, 13, 4});
    ASSERT_TRUE(ops::resize(stream_, value_or_die(nhwc.permute({0, 3, 1, 2})), y_view, attrs).ok());
    EXPECT_TRUE(close(y_view, y_nchw, tolerance(DType::f32, attrs)));
    Tensor y_last_view = zeros(DType::f32, {2, 13, 4, 5});
    ASSERT_TRUE(ops::resize(stream_, value_or_die(nchw.permute({0, 2, 3, 1})), y_last_view, last).ok());
    EXPECT_TRUE(close(y_last_view, y_nhwc, tolerance(DType::f32, attrs)));
  }
}

TEST_P(ResizeTest, NearestX2IsPixelDuplication) {
  for (DType dt : kFloatTypes)
    for (std::int64_t c : {1L, 3L, 17L})
      for (bool nhwc : {false, true}) {
        SCOPED_TRACE(fmt::format("{} C={} nhwc={}", to_string(dt), c, nhwc));
        Tensor x = random_tensor(dt, image(2, c, 5, 19, nhwc), 4);
        Tensor y = zeros(dt, image(2, c, 10, 38, nhwc));
        ASSERT_TRUE(ops::resize(stream_, x, y, {.channels_last = nhwc}).ok());  // the defaults: asymmetric + floor
        for (std::int64_t n = 0; n < 2; ++n)
          for (std::int64_t ch = 0; ch < c; ++ch)
            for (std::int64_t h = 0; h < 10; ++h)
              for (std::int64_t w = 0; w < 38; ++w)
                ASSERT_EQ(at(y, nhwc, n, ch, h, w), at(x, nhwc, n, ch, h / 2, w / 2)) << n << " " << ch << " " << h << " " << w;
      }
}

TEST_P(ResizeTest, HandComputedBilinear) {
  for (bool nhwc : {false, true}) {
    SCOPED_TRACE(fmt::format("nhwc={}", nhwc));
    const ResizeAttrs corners{.mode = ResizeMode::bilinear, .coord = CoordinateMode::align_corners, .channels_last = nhwc};
    // align_corners: the output's corners are the input's corners.
    Tensor x = random_tensor(DType::f32, image(1, 3, 4, 6, nhwc), 5);
    Tensor y = zeros(DType::f32, image(1, 3, 9, 11, nhwc));
    ASSERT_TRUE(ops::resize(stream_, x, y, corners).ok());
    for (std::int64_t c = 0; c < 3; ++c) {
      EXPECT_EQ(at(y, nhwc, 0, c, 0, 0), at(x, nhwc, 0, c, 0, 0));
      EXPECT_EQ(at(y, nhwc, 0, c, 0, 10), at(x, nhwc, 0, c, 0, 5));
      EXPECT_EQ(at(y, nhwc, 0, c, 8, 0), at(x, nhwc, 0, c, 3, 0));
      EXPECT_EQ(at(y, nhwc, 0, c, 8, 10), at(x, nhwc, 0, c, 3, 5));
    }
    // [[0, 1], [2, 3]] -> 3x3 with align_corners: the midpoints average their neighbours.
    Tensor sq = zeros(DType::f32, image(1, 1, 2, 2, nhwc)), sq3 = zeros(DType::f32, image(1, 1, 3, 3, nhwc));
    for (int i = 0; i < 4; ++i) sq.data_as<float>()[i] = float(i);
    ASSERT_TRUE(ops::resize(stream_, sq, sq3, corners).ok());
    const float expected3[] = {0.0f, 0.5f, 1.0f, 1.0f, 1.5f, 2.0f, 2.0f, 2.5f, 3.0f};
    for (int i = 0; i < 9; ++i) EXPECT_EQ(sq3.data_as<float>()[i], expected3[i]) << i;
    // half_pixel [0, 1] -> 4: source coordinates -0.25 (clamped), 0.25, 0.75, 1.25 (clamped).
    Tensor row = zeros(DType::f32, image(1, 1, 1, 2, nhwc)), row4 = zeros(DType::f32, image(1, 1, 1, 4, nhwc));
    row.data_as<float>()[1] = 1.0f;
    ASSERT_TRUE(ops::resize(stream_, row, row4, {.mode = ResizeMode::bilinear, .coord = CoordinateMode::half_pixel,
                                                 .channels_last = nhwc}).ok());
    const float expected4[] = {0.0f, 0.25f, 0.75f, 1.0f};
    for (int i = 0; i < 4; ++i) EXPECT_EQ(row4.data_as<float>()[i], expected4[i]) << i;
  }
}

TEST_P(ResizeTest, HandComputedNearestRounding) {
  // Row [0, 1, 2, 3] -> 8 with half_pixel: source coordinates o / 2 - 0.25.
  Tensor x = zeros(DType::f32, {1, 1, 1, 4}), y = zeros(DType::f32, {1, 1, 1, 8});
  for (int i = 0; i < 4; ++i) x.data_as<float>()[i] = float(i);
  const auto expect_row = [&](const ResizeAttrs& attrs, std::initializer_list<float> expected) {
    Tensor out = zeros(DType::f32, {1, 1, 1, std::int64_t(expected.size())});
    ASSERT_TRUE(ops::resize(stream_, x, out, attrs).ok());
    for (std::size_t i = 0; i < expected.size(); ++i)
      EXPECT_EQ(out.data_as<float>()[i], expected.begin()[i]) << describe(attrs) << " at " << i;
  };
  expect_row({.coord = CoordinateMode::half_pixel, .rounding = NearestRounding::round_prefer_floor}, {0, 0, 1, 1, 2, 2, 3, 3});
  expect_row({.coord = CoordinateMode::half_pixel, .rounding = NearestRounding::floor}, {0, 0, 0, 1, 1, 2, 2, 3});
  // 4 -> 3 asymmetric: coordinates 0, 4/3, 8/3.
  expect_row({.coord = CoordinateMode::asymmetric, .rounding = NearestRounding::round_prefer_floor}, {0, 1, 3});
  expect_row({.coord = CoordinateMode::asymmetric, .rounding = NearestRounding::floor}, {0, 1, 2});
  // 4 -> 2 half_pixel: coordinates 0.5 and 2.5, ties going down.
  expect_row({.coord = CoordinateMode::half_pixel, .rounding = NearestRounding::round_prefer_floor}, {0, 2});
  // 4 -> 7 align_corners: coordinates o / 2 (ties 0.5, 1.5, 2.5 go down).
  expect_row({.coord = CoordinateMode::align_corners, .rounding = NearestRounding::round_prefer_floor}, {0, 0, 1, 1, 2, 2, 3});
}

TEST_P(ResizeTest, OnePixelInAndOut) {
  for (bool nhwc : {false, true})
    for (const ResizeAttrs& attrs : all_attrs(nhwc)) {
      SCOPED_TRACE(describe(attrs));
      // 1x1 -> 5x5: every output is the one input pixel (cubic: its four
      // weights, each rounded to f32, sum to 1 within a few ulps).
      Tensor one = random_tensor(DType::f32, image(2, 3, 1, 1, nhwc), 6), five = zeros(DType::f32, image(2, 3, 5, 5, nhwc));
      ASSERT_TRUE(ops::resize(stream_, one, five, attrs).ok());
      const float ulps = attrs.mode == ResizeMode::cubic ? 1e-6f : 0.0f;
      for (std::int64_t n = 0; n < 2; ++n)
        for (std::int64_t c = 0; c < 3; ++c)
          for (std::int64_t i = 0; i < 25; ++i) {
            const float v = at(one, nhwc, n, c, 0, 0);
            EXPECT_NEAR(at(five, nhwc, n, c, i / 5, i % 5), v, ulps * std::abs(v));
          }
      // 5x5 -> 1x1: half_pixel looks at the centre (coordinate 2, exact for
      // bilinear too); the others at the corner (coordinate 0).
      Tensor big = random_tensor(DType::f32, image(2, 3, 5, 5, nhwc), 7), dot = zeros(DType::f32, image(2, 3, 1, 1, nhwc));
      ASSERT_TRUE(ops::resize(stream_, big, dot, attrs).ok());
      const std::int64_t src = attrs.coord == CoordinateMode::half_pixel ? 2 : 0;
      for (std::int64_t n = 0; n < 2; ++n)
        for (std::int64_t c = 0; c < 3; ++c) EXPECT_EQ(at(dot, nhwc, n, c, 0, 0), at(big, nhwc, n, c, src, src));
    }
}

// The streaming-store paths run only past the L3, so the rows are called
// directly: stream_y on against off, x2 along both axes, for pixels of one
// element (NCHW) and of several (NHWC; 40 f32 channels fill whole lines).
TEST_P(ResizeTest, StreamingRowsMatchPlainStores) {
  constexpr std::int64_t h = 5, w = 7, ho = 10, wo = 14;
  // Cubic's taps (half_pixel, a = -0.75), the first two also read as bilinear's.
  struct Table {
    std::vector<std::int32_t> i[4];
    std::vector<float> w[4];
    kernels::ResizeTable view() const {
      return {i[0].data(), i[1].data(), w[0].data(), w[1].data(), i[2].data(), i[3].data(), w[2].data(), w[3].data()};
    }
  };
  const auto table = [](std::int64_t in, std::int64_t out) {
    Table t;
    for (std::int64_t o = 0; o < (out + kernels::kResizeTableAlign - 1) / kernels::kResizeTableAlign * kernels::kResizeTableAlign; ++o) {
      const kernels::CubicTaps c = kernels::resize_cubic_taps(std::min(o, out - 1), in, out, CoordinateMode::half_pixel, -0.75f, false);
      for (int k = 0; k < 4; ++k) t.i[k].push_back(std::int32_t(c.i[k])), t.w[k].push_back(c.w[k]);
    }
    return t;
  };
  const Table row_taps = table(h, ho), col_taps = table(w, wo);
  const kernels::ResizeTable rows = row_taps.view(), cols = col_taps.view();
  for (DType dt : {DType::f32, DType::bf16})
    for (int taps : {1, 2, 4})
      for (std::int64_t channels : {1L, 3L, 40L}) {
        SCOPED_TRACE(fmt::format("{} taps={} channels={}", to_string(dt), taps, channels));
        Tensor x = random_tensor(dt, {h, w, channels}, 8);
        Tensor y = zeros(dt, {ho, wo, channels}), plain = zeros(dt, {ho, wo, channels});
        kernels::ResizeArgs args{dt, taps, w, wo, channels, x.data(), w * channels, channels, 1,
                                 y.data(), wo * channels, channels, 1, rows, cols, true};
        const kernels::ResizeProblem problem{{dt, dt, dt, ho, wo * channels, true}, args.taps};
        const auto* row = kernels::select<kernels::ResizeFamily>(problem, GetParam());
        row->run(args, 0, ho);
        args.y = plain.data();
        args.stream_y = false;
        row->run(args, 0, ho);
        EXPECT_TRUE(identical(y, plain)) << row->name;
      }
}

// Keys' cubic with a = -0.5 (the coefficient of third-order accuracy)
// reproduces a linear function wherever its four taps lie inside the image:
// a ramp's resize, away from the borders, is the ramp at the source
// coordinates (half_pixel). Other coefficients only keep constants.
TEST_P(ResizeTest, CubicReproducesARampInside) {
  const std::int64_t h = 12, w = 40;
  for (bool nhwc : {false, true})
    for (auto [ho, wo] : {std::pair<std::int64_t, std::int64_t>{23, 97}, {7, 29}}) {
      SCOPED_TRACE(fmt::format("nhwc {} {}x{}", nhwc, ho, wo));
      const std::int64_t c = 3;
      Tensor x = zeros(DType::f32, image(1, c, h, w, nhwc)), y = zeros(DType::f32, image(1, c, ho, wo, nhwc));
      const Strides& xs = x.strides();
      for (std::int64_t ch = 0; ch < c; ++ch)
        for (std::int64_t i = 0; i < h; ++i)
          for (std::int64_t j = 0; j < w; ++j) {
            const std::int64_t off = nhwc ? i * xs[1] + j * xs[2] + ch * xs[3] : ch * xs[1] + i * xs[2] + j * xs[3];
            x.data_as<float>()[off] = 0.5f * float(i) - 0.25f * float(j) + float(ch);
          }
      ASSERT_TRUE(ops::resize(stream_, x, y, {.mode = ResizeMode::cubic, .coord = CoordinateMode::half_pixel, .channels_last = nhwc,
                                              .cubic_coeff_a = -0.5f}).ok());
      int checked = 0;
      for (std::int64_t i = 0; i < ho; ++i)
        for (std::int64_t j = 0; j < wo; ++j) {
          const double si = (double(i) + 0.5) * double(h) / double(ho) - 0.5, sj = (double(j) + 0.5) * double(w) / double(wo) - 0.5;
          if (si < 1 || si >= double(h - 2) || sj < 1 || sj >= double(w - 2)) continue;  // a tap past the border
          for (std::int64_t ch = 0; ch < c; ++ch, ++checked)
            EXPECT_NEAR(at(y, nhwc, 0, ch, i, j), 0.5 * si - 0.25 * sj + double(ch), 1e-5) << i << ", " << j;
        }
      EXPECT_GT(checked, 0);
    }
}

INSTANTIATE_TEST_SUITE_P(Isa, ResizeTest, ::testing::ValuesIn(isa_levels()), isa_name);

// The mapping the kernels' tables (and a conv reading a resized input) use.
TEST(ResizeMapping, NearestIndexAndLinearTaps) {
  using kernels::resize_linear_taps;
  using kernels::resize_nearest_index;
  for (std::int64_t o = 0; o < 8; ++o)
    EXPECT_EQ(resize_nearest_index(o, 4, 8, CoordinateMode::asymmetric, NearestRounding::floor), o / 2);
  // Exact ratios: 3 * 14 / 6 is 7, though 3 * float(14 / 6.0) is below it.
  EXPECT_EQ(resize_nearest_index(3, 14, 6, CoordinateMode::asymmetric, NearestRounding::floor), 7);
  EXPECT_EQ(resize_nearest_index(0, 5, 1, CoordinateMode::half_pixel, NearestRounding::floor), 2);
  EXPECT_EQ(resize_nearest_index(0, 5, 1, CoordinateMode::pytorch_half_pixel, NearestRounding::floor), 0);
  EXPECT_EQ(resize_nearest_index(0, 5, 1, CoordinateMode::align_corners, NearestRounding::floor), 0);
  // Clamped below 0 and at in - 1.
  EXPECT_EQ(resize_nearest_index(0, 4, 8, CoordinateMode::half_pixel, NearestRounding::floor), 0);
  EXPECT_EQ(resize_nearest_index(7, 4, 8, CoordinateMode::half_pixel, NearestRounding::round_prefer_floor), 3);

  const auto expect_taps = [](kernels::LinearTaps got, std::int64_t i0, std::int64_t i1, float w0, float w1) {
    EXPECT_EQ(got.i0, i0);
    EXPECT_EQ(got.i1, i1);
    EXPECT_EQ(got.w0, w0);
    EXPECT_EQ(got.w1, w1);
  };
  // align_corners 3 -> 5: coordinates 0, 0.5, 1, 1.5, 2.
  expect_taps(resize_linear_taps(0, 3, 5, CoordinateMode::align_corners), 0, 0, 1.0f, 0.0f);  // on a pixel: one tap
  expect_taps(resize_linear_taps(1, 3, 5, CoordinateMode::align_corners), 0, 1, 0.5f, 0.5f);
  expect_taps(resize_linear_taps(3, 3, 5, CoordinateMode::align_corners), 1, 2, 0.5f, 0.5f);
  expect_taps(resize_linear_taps(4, 3, 5, CoordinateMode::align_corners), 2, 2, 1.0f, 0.0f);
  // half_pixel 2 -> 4: -0.25 clamps to 0, 0.25, 1.25 clamps to 1.
  expect_taps(resize_linear_taps(0, 2, 4, CoordinateMode::half_pixel), 0, 0, 1.0f, 0.0f);
  expect_taps(resize_linear_taps(1, 2, 4, CoordinateMode::half_pixel), 0, 1, 0.75f, 0.25f);
  expect_taps(resize_linear_taps(3, 2, 4, CoordinateMode::half_pixel), 1, 1, 1.0f, 0.0f);
  // asymmetric 3 -> 2: coordinate 1.5.
  expect_taps(resize_linear_taps(1, 3, 2, CoordinateMode::asymmetric), 1, 2, 0.5f, 0.5f);
}

TEST(ResizeMapping, CubicTaps) {
  using kernels::resize_cubic_taps;
  const auto expect_taps = [](kernels::CubicTaps got, std::array<std::int64_t, 4> i, std::array<float, 4> w) {
    for (int k = 0; k < 4; ++k) {
      EXPECT_EQ(got.i[k], i[std::size_t(k)]) << k;
      EXPECT_FLOAT_EQ(got.w[k], w[std::size_t(k)]) << k;
    }
  };
  // align_corners 3 -> 5: on pixel 0 (one tap), then coordinate 0.5 (Keys,
  // a = -0.75, at distances 1.5 and 0.5), taps -1 and past 2 clamped.
  expect_taps(resize_cubic_taps(0, 3, 5, CoordinateMode::align_corners, -0.75f, false), {0, 0, 1, 2}, {0, 1, 0, 0});
  expect_taps(resize_cubic_taps(1, 3, 5, CoordinateMode::align_corners, -0.75f, false), {0, 0, 1, 2},
              {-0.09375f, 0.59375f, 0.59375f, -0.09375f});
  // a = -0.5 with exclude_outside: tap -1 drops, the others scaled by 1 / 1.0625.
  expect_taps(resize_cubic_taps(1, 3, 5, CoordinateMode::align_corners, -0.5f, true), {0, 0, 1, 2},
              {0, 0.5625f / 1.0625f, 0.5625f / 1.0625f, -0.0625f / 1.0625f});
  // half_pixel 2 -> 4: coordinate -0.25 stays unclamped (floor -1, fraction
  // 0.75), its taps -2 .. 1 clamped to the axis; the weights sum to 1.
  const kernels::CubicTaps edge = resize_cubic_taps(0, 2, 4, CoordinateMode::half_pixel, -0.75f, false);
  EXPECT_EQ(edge.i[0], 0);
  EXPECT_EQ(edge.i[2], 0);
  EXPECT_EQ(edge.i[3], 1);
  EXPECT_NEAR(edge.w[0] + edge.w[1] + edge.w[2] + edge.w[3], 1.0, 1e-6);
  EXPECT_FLOAT_EQ(edge.w[2], float(((1.25 * 0.25 - 2.25) * 0.25 * 0.25) + 1));  // Keys' near side at distance 0.25
}

TEST(ResizeErrors, PlanNamesTheArgument) {
  Context ctx;
  const TensorDesc x = TensorDesc::contiguous(DType::f32, {2, 3, 4, 5}), y = TensorDesc::contiguous(DType::f32, {2, 3, 8, 10});
  EXPECT_TRUE(ops::Resize::plan(ctx, x, y).ok());
  EXPECT_TRUE(fails_naming(ops::Resize::plan(ctx, TensorDesc{DType::f32, {2, 3, 4, 5}, {60, 20, 5}}, y), "x"));
  EXPECT_TRUE(fails_naming(ops::Resize::plan(ctx, x, TensorDesc{DType::f32, {2, 3, 8, -1}, {24, 8, 1, 1}}), "y"));
  EXPECT_TRUE(fails_naming(ops::Resize::plan(ctx, TensorDesc::contiguous(DType::i8, {2, 3, 4, 5}), y), "x"));
  EXPECT_TRUE(fails_naming(ops::Resize::plan(ctx, TensorDesc::contiguous(DType::f32, {3, 4, 5}), y), "x"));
  EXPECT_TRUE(fails_naming(ops::Resize::plan(ctx, x, TensorDesc::contiguous(DType::f32, {3, 8, 10})), "y"));
  EXPECT_TRUE(fails_naming(ops::Resize::plan(ctx, x, TensorDesc::contiguous(DType::bf16, {2, 3, 8, 10})), "y"));
  EXPECT_TRUE(fails_naming(ops::Resize::plan(ctx, x, y, {.mode = static_cast<ResizeMode>(3)}), "mode"));
  EXPECT_TRUE(fails_naming(ops::Resize::plan(ctx, x, y, {.mode = ResizeMode::cubic, .cubic_coeff_a = NAN}), "cubic_coeff_a"));
  EXPECT_TRUE(fails_naming(ops::Resize::plan(ctx, x, y, {.coord = static_cast<CoordinateMode>(-1)}), "coord"));
  EXPECT_TRUE(fails_naming(ops::Resize::plan(ctx, x, y, {.rounding = static_cast<NearestRounding>(7)}), "rounding"));
  // N and C must match (C is the last dim when channels_last).
  EXPECT_TRUE(fails_naming(ops::Resize::plan(ctx, x, TensorDesc::contiguous(DType::f32, {1, 3, 8, 10})), "y"));
  EXPECT_TRUE(fails_naming(ops::Resize::plan(ctx, x, TensorDesc::contiguous(DType::f32, {2, 4, 8, 10})), "y"));
  EXPECT_TRUE(fails_naming(ops::Resize::plan(ctx, x, TensorDesc::contiguous(DType::f32, {2, 8, 10, 3}), {.channels_last = true}), "y"));
  // Empty output, and an empty input for a non-empty output.
  EXPECT_TRUE(fails_naming(ops::Resize::plan(ctx, x, TensorDesc::contiguous(DType::f32, {2, 3, 0, 10})), "y"));
  EXPECT_TRUE(fails_naming(ops::Resize::plan(ctx, x, TensorDesc::contiguous(DType::f32, {2, 3, 8, 0})), "y"));
  EXPECT_TRUE(fails_naming(ops::Resize::plan(ctx, TensorDesc::contiguous(DType::f32, {2, 3, 0, 5}), y), "x"));
  EXPECT_TRUE(fails_naming(ops::Resize::plan(ctx, TensorDesc::contiguous(DType::f32, {2, 0, 5, 10}), y, {.channels_last = true}), "x"));
  // Spatial sizes the 32-bit tables cannot index.
  const std::int64_t huge = std::int64_t(INT32_MAX) + 1;
  const TensorDesc pixel = TensorDesc::contiguous(DType::f32, {1, 1, 1, 1});
  EXPECT_TRUE(fails_naming(ops::Resize::plan(ctx, TensorDesc::contiguous(DType::f32, {1, 1, 1, huge}), pixel), "x"));
  EXPECT_TRUE(fails_naming(ops::Resize::plan(ctx, pixel, TensorDesc::contiguous(DType::f32, {1, 1, huge, 1})), "y"));
  // An output whose elements share memory.
  EXPECT_TRUE(fails_naming(ops::Resize::plan(ctx, x, TensorDesc{DType::f32, {2, 3, 8, 10}, {240, 80, 0, 1}}), "y"));
}

TEST(ResizeErrors, RunChecksAliasingAndEmptyBatchesAreEmpty) {
  Context ctx;
  Stream stream(ctx);
  Tensor x = random_tensor(DType::f32, {1, 2, 4, 4}, 8);
  EXPECT_TRUE(fails_naming(ops::resize(stream, x, x), "y"));  // same size: in place is not allowed
  Tensor other = zeros(DType::f32, {1, 2, 4, 4});
  auto plan = value_or_die(ops::Resize::plan(ctx, x.desc(), other.desc()));
  EXPECT_TRUE(fails_naming(plan->run(stream, {x}, {zeros(DType::f32, {1, 2, 4, 5})}), "y"));
  EXPECT_TRUE(plan->run(stream, {x}, {other}).ok());

  EXPECT_TRUE(ops::resize(stream, zeros(DType::f32, {0, 3, 4, 4}), zeros(DType::f32, {0, 3, 8, 8})).ok());
  EXPECT_TRUE(ops::resize(stream, zeros(DType::f32, {2, 0, 4, 4}), zeros(DType::f32, {2, 0, 8, 8}),
                          {.mode = ResizeMode::bilinear}).ok());
  EXPECT_TRUE(ops::resize(stream, zeros(DType::f32, {2, 4, 4, 0}), zeros(DType::f32, {2, 8, 8, 0}),
                          {.channels_last = true}).ok());
}

}  // namespace
}  // namespace tessera::testing
