#pragma once
// The kernels' activation codes (the values of ops::Activation) and the
// scalar reference of each, in f64.
#include <cstdint>
#include <type_traits>

namespace tessera::kernels {

enum class Act : std::uint8_t { none, relu, gelu_erf, gelu_tanh, silu, sigmoid, tanh, exp, quick_gelu };

// quick_gelu(x) = x * sigmoid(kQuickGeluBeta x) (OpenAI CLIP's constant, as f32 in every row).
inline constexpr float kQuickGeluBeta = 1.702f;

// What the SIMD exps make of results below FLT_MIN. subnormal: the true
// value. normal: the argument is clamped at -87, so they come out as
// ~1.6e-38, for callers that cannot tell the two apart (1 + e, 1 - e, a
// weight that a mask zeroes or a sum >= 1 divides). A subnormal result costs
// a microcode assist per vector: tanh and gelu ran 2-2.6x slower with 1 % of
// their inputs near +-60, and cross-attention's -inf lanes (13 keys in a
// block of 64) made it 3x slower.
enum class ExpTiny { subnormal, normal };

// What an exp's argument is known to be: a nonpositive one (softmax's x -
// max, -|x|) needs no clamp against overflow.
enum class ExpArg { any, nonpositive };

// The SIMD exps' lower clamp for each: below it the result rounds to 0
// (subnormal), or would leave the normal range (normal).
constexpr float exp_floor(ExpTiny tiny) { return tiny == ExpTiny::normal ? -87.0f : -103.972084f; }

// Vector instructions per 16 elements of each activation's SIMD loop, its
// loads and stores included (rough counts of the AVX-512 f32 forms), for
// tiling's arithmetic_bound.
constexpr int act_work(Act act) {
  switch (act) {
    case Act::none: return 3;
    case Act::relu: return 4;
    case Act::exp: return 16;
    case Act::sigmoid: return 21;
    case Act::silu: return 20;
    case Act::quick_gelu: return 21;
    case Act::tanh: return 23;
    case Act::gelu_tanh: return 28;
    case Act::gelu_erf: return 30;
  }
  return 0;
}

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
    case Act::quick_gelu: return f(std::integral_constant<Act, Act::quick_gelu>{});
  }
}

namespace ref {
// sigmoid, silu and quick_gelu from exp(-|x|), exact in the tails; silu(-inf)
// = quick_gelu(-inf) = -0; NaN stays NaN.
double activate(double v, Act act);
}  // namespace ref

}  // namespace tessera::kernels
