#include "tessera/core/dtype.hpp"

#include <array>

namespace tessera {

namespace {
constexpr std::array<std::string_view, 8> kNames = {"f32", "f16", "bf16", "i8", "u8", "i32", "i64", "i4"};
}

std::string_view to_string(DType t) { return kNames[static_cast<int>(t)]; }

std::optional<DType> parse_dtype(std::string_view name) {
  for (std::size_t i = 0; i < kNames.size(); ++i)
    if (kNames[i] == name) return static_cast<DType>(i);
  return std::nullopt;
}

}  // namespace tessera
