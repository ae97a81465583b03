#pragma once
// The activation functions every elementwise path shares: the unary ops,
// the gated (GLU) ops and the matmul epilogues all take this one enum.
// none is the identity (between two dtypes: a cast).
#include <cstdint>
#include <string_view>

namespace tessera::ops {

enum class Activation : std::uint8_t { none, relu, gelu_erf, gelu_tanh, silu, sigmoid, tanh, exp };
inline constexpr Activation kLastActivation = Activation::exp;
std::string_view to_string(Activation a);

}  // namespace tessera::ops
