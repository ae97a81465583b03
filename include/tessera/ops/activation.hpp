#pragma once
// The activation functions every elementwise path shares: the unary ops,
// the gated (GLU) ops and the matmul epilogues all take this one enum.
// none is the identity (between two dtypes: a cast). quick_gelu is
// x * sigmoid(1.702 x), the GELU approximation of OpenAI's CLIP (the text
// encoder of Stable Diffusion 1.x, CLIP ViT image towers).
#include <cstdint>
#include <string_view>

namespace tessera::ops {

enum class Activation : std::uint8_t { none, relu, gelu_erf, gelu_tanh, silu, sigmoid, tanh, exp, quick_gelu };
inline constexpr Activation kLastActivation = Activation::quick_gelu;
std::string_view to_string(Activation a);

}  // namespace tessera::ops
