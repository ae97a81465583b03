#pragma once
// The kernels' activation codes (the values of ops::Activation) and the
// scalar reference of each, in f64.
#include <cstdint>
#include <type_traits>

namespace tessera::kernels {

enum class Act : std::uint8_t { none, relu, gelu_erf, gelu_tanh, silu, sigmoid, tanh, exp };

// Calls f(std::integral_constant<Act, A>{}) for the run-time `act`, so a
// kernel's loop is compiled once per activation with no switch inside it.
template <class F>
inline void dispatch_act(Act act, F&& f) {
  switch (act) {
    case Act::none: return f(std::integral_constant<Act, Act::none>{});
    case Act::relu: return f(std::integral_constant<Act, Act::relu>{});
    case Act::gelu_erf: return f(std::integral_constant<Act, Act::gelu_erf>{});
    case Act::gelu_tanh: return f(std::integral_constant<Act, Act::gelu_tanh>{});
    case Act::silu: return f(std::integral_constant<Act, Act::silu>{});
    case Act::sigmoid: return f(std::integral_constant<Act, Act::sigmoid>{});
    case Act::tanh: return f(std::integral_constant<Act, Act::tanh>{});
    case Act::exp: return f(std::integral_constant<Act, Act::exp>{});
  }
}

namespace ref {
// sigmoid and silu from exp(-|x|), exact in the tails; silu(-inf) = -0; NaN stays NaN.
double activate(double v, Act act);
}  // namespace ref

}  // namespace tessera::kernels
