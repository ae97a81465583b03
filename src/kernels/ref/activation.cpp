#include <cmath>

#include "kernels/activation.hpp"

namespace tessera::kernels::ref {

namespace {
double sigmoid(double x) {
  const double e = std::exp(-std::abs(x));
  return x >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);  // NaN takes the second branch and stays NaN
}
}  // namespace

double activate(double v, Act act) {
  switch (act) {
    case Act::none: return v;
    case Act::relu: return v < 0 ? 0.0 : v;  // NaN stays NaN
    case Act::gelu_erf: return 0.5 * v * (1.0 + std::erf(v * M_SQRT1_2));
    case Act::gelu_tanh: return 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    case Act::silu: return std::isinf(v) && v < 0 ? -0.0 : v * sigmoid(v);
    case Act::sigmoid: return sigmoid(v);
    case Act::tanh: return std::tanh(v);
    case Act::exp: return std::exp(v);
    case Act::quick_gelu: return std::isinf(v) && v < 0 ? -0.0 : v * sigmoid(kQuickGeluBeta * v);
  }
  return v;
}

}  // namespace tessera::kernels::ref
