#pragma once
// Element types and the scalar f16/bf16 conversions (round to nearest even,
// NaN stays NaN, overflow goes to Inf). Bulk, vectorized conversion is the
// `cast` op (tessera/ops/cast.hpp).
#include <bit>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tessera {

// i64 serves as index type (ids, positions) as in ONNX.
// i4: two signed 4-bit values per byte, element 2k in the low nibble.
enum class DType : std::uint8_t { f32, f16, bf16, i8, u8, i32, i64, i4 };

constexpr int bits_of(DType t) {
  switch (t) {
    case DType::f32: return 32;
    case DType::f16: return 16;
    case DType::bf16: return 16;
    case DType::i8: return 8;
    case DType::u8: return 8;
    case DType::i32: return 32;
    case DType::i64: return 64;
    case DType::i4: return 4;
  }
  return 0;
}

// Bytes per element of the byte-addressable types (i4 packs two per byte: 1).
constexpr int bytes_of(DType t) { return bits_of(t) >= 8 ? bits_of(t) / 8 : 1; }

constexpr bool is_floating(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

std::string_view to_string(DType t);
std::optional<DType> parse_dtype(std::string_view name);

// Storage types for the 16-bit floats: distinct types so that overloads and
// templates cannot confuse them with integers or with each other.
struct bf16_t {
  std::uint16_t bits;
};
struct f16_t {
  std::uint16_t bits;
};

constexpr float bf16_to_f32(bf16_t v) { return std::bit_cast<float>(std::uint32_t(v.bits) << 16); }

constexpr bf16_t f32_to_bf16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return {std::uint16_t((x >> 16) | 0x40u)};  // quiet the NaN
  const std::uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);  // ties to even
  return {std::uint16_t((x + rounding) >> 16)};
}

constexpr float f16_to_f32(f16_t v) {
  const std::uint32_t h = v.bits;
  const std::uint32_t sign = (h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // zero or subnormal: mant * 2^-24, exact in f32
    const float mag = float(mant) * 0x1p-24f;
    return std::bit_cast<float>(std::bit_cast<std::uint32_t>(mag) | sign);
  }
  // Inf, or NaN made quiet (as the F16C instructions do), payload kept.
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0u));
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

constexpr f16_t f32_to_f16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  std::uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return {std::uint16_t(sign | 0x7e00u | ((ax >> 13) & 0x3ffu))};  // NaN, quiet
  if (ax >= 0x477ff000u) return {std::uint16_t(sign | 0x7c00u)};  // >= 65520 rounds to Inf
  if (ax < 0x38800000u) {
    // Below the smallest normal f16 (2^-14): the result counts units of 2^-24.
    // Adding 0.5f puts 2^-24 at the last mantissa bit of the sum, so the FPU's
    // own round-to-nearest-even does the rounding.
    const float sum = std::bit_cast<float>(ax) + 0.5f;
    return {std::uint16_t(sign | (std::bit_cast<std::uint32_t>(sum) - 0x3f000000u))};
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to even.
  ax += 0xc8000fffu + ((ax >> 13) & 1u);
  return {std::uint16_t(sign | (ax >> 13))};
}

}  // namespace tessera
