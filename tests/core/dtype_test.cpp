#include <cmath>
#include <limits>

#include "support/harness.hpp"

namespace tessera::testing {
namespace {

TEST(DType, NamesAndSizes) {
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::i8, DType::u8, DType::i32, DType::i64, DType::i4})
    EXPECT_EQ(parse_dtype(to_string(t)), t);
  EXPECT_FALSE(parse_dtype("f64").has_value());
  EXPECT_EQ(bits_of(DType::i4), 4);
  EXPECT_EQ(bits_of(DType::bf16), 16);
}

TEST(DType, F16RoundTripsEveryPattern) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32({std::uint16_t(h)});
    const std::uint16_t back = f32_to_f16(f).bits;
    if ((h & 0x7fff) > 0x7c00) {
      EXPECT_TRUE(std::isnan(f));
      EXPECT_GT(back & 0x7fff, 0x7c00);  // still NaN
    } else {
      ASSERT_EQ(back, h) << "pattern " << h;
    }
  }
}

TEST(DType, F16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_f16(1.0f).bits, 0x3c00);
  EXPECT_EQ(f32_to_f16(65504.0f).bits, 0x7bff);              // max finite
  EXPECT_EQ(f32_to_f16(65519.99f).bits, 0x7bff);             // below the halfway point
  EXPECT_EQ(f32_to_f16(65520.0f).bits, 0x7c00);              // halfway rounds to Inf
  EXPECT_EQ(f32_to_f16(1e6f).bits, 0x7c00);
  EXPECT_EQ(f32_to_f16(-1e6f).bits, 0xfc00);
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f).bits, 0x3c00);       // tie -> even (down)
  EXPECT_EQ(f32_to_f16(1.0f + 3 * 0x1p-11f).bits, 0x3c02);   // tie -> even (up)
  EXPECT_EQ(f32_to_f16(0x1p-24f).bits, 0x0001);              // smallest subnormal
  EXPECT_EQ(f32_to_f16(0x1p-25f).bits, 0x0000);              // tie -> even zero
  EXPECT_EQ(f32_to_f16(0x1.8p-25f).bits, 0x0001);
  EXPECT_EQ(f32_to_f16(-0.0f).bits, 0x8000);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()).bits, 0x7c00);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(f16_to_f32({0x0001}), 0x1p-24f);
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808000u)).bits, 0x3f80);  // tie -> even (down)
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f818000u)).bits, 0x3f82);  // tie -> even (up)
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808001u)).bits, 0x3f81);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()).bits, 0x7f80);  // rounds up to Inf
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()).bits, 0xff80);
  // A NaN whose payload sits only in the low bits must stay NaN, not become Inf.
  const bf16_t n = f32_to_bf16(std::bit_cast<float>(0x7f800001u));
  EXPECT_TRUE(std::isnan(bf16_to_f32(n)));
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_f32({std::uint16_t(h)});
    if (!std::isnan(f)) {
      ASSERT_EQ(f32_to_bf16(f).bits, h);
    }
  }
}

}  // namespace
}  // namespace tessera::testing
