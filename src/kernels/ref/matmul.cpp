#include <algorithm>
#include <cmath>
#include <vector>

#include "core/element.hpp"
#include "kernels/matmul.hpp"

namespace tessera::kernels::ref {

using namespace tessera::detail;  // load / store

namespace {

// B[k, n] as the kernels compute with it: raw, or unpacked / dequantized.
double b_at(const MatmulArgs& a, std::int64_t k, std::int64_t n) {
  if (!a.packed) return load(a.b, a.b_dtype, k * a.b_row_stride + n * a.b_col_stride);
  return packed_value(*a.packed, k, n);
}

// Row m of A as the kernels see it: W8A8 gives the int8 steps of the row's scale.
void load_a_row(const MatmulArgs& a, std::int64_t m, std::vector<double>& row) {
  for (std::int64_t k = 0; k < a.k; ++k)
    row[std::size_t(k)] = a.a_q ? double(a.a_q[m * a.a_q_stride + k]) * a.a_scales[m]
                                : load(a.a, a.a_dtype, m * a.a_row_stride + k * a.a_col_stride);
}

}  // namespace

// f64 accumulation, i-k-j order so the inner loop walks a row of B and C.
void matmul(const MatmulArgs& a, const MatmulTiling&, std::int64_t m0, std::int64_t m1, std::int64_t n0, std::int64_t n1) {
  std::vector<double> acc(std::size_t(n1 - n0)), row(std::size_t(a.k));
  const EpilogueArgs& ep = a.ep;
  for (std::int64_t m = m0; m < m1; ++m) {
    std::fill(acc.begin(), acc.end(), 0.0);
    load_a_row(a, m, row);
    for (std::int64_t k = 0; k < a.k; ++k)
      for (std::int64_t n = n0; n < n1; ++n) acc[std::size_t(n - n0)] += row[std::size_t(k)] * b_at(a, k, n);
    for (std::int64_t n = n0; n < n1; ++n) {
      double v = double(ep.scale) * acc[std::size_t(n - n0)];
      if (ep.bias) v += load(ep.bias, ep.bias_dtype, n);
      v = activate(v, ep.act);
      if (ep.residual) v += load(ep.residual, ep.residual_dtype, residual_row_offset(a, m) + n * ep.residual_col_stride);
      store(a.c, a.c_dtype, c_row_offset(a, m) + n * a.c_col_stride, float(v));
    }
  }
}

void w8a8_quantize_rows(const MatmulArgs& a, std::int64_t m0, std::int64_t m1, std::int8_t* q, std::int64_t ldq,
                        float* scales) {
  for (std::int64_t m = m0; m < m1; ++m) {
    float absmax = 0.0f;
    bool finite = true;
    for (std::int64_t k = 0; k < a.k; ++k) {
      const float v = load(a.a, a.a_dtype, m * a.a_row_stride + k * a.a_col_stride);
      absmax = std::max(absmax, std::fabs(v));
      finite = finite && std::isfinite(v);
    }
    const float scale = w8a8_row_scale(absmax, finite), inv = 1.0f / scale;
    scales[m - m0] = scale;
    std::int8_t* out = q + (m - m0) * ldq;
    for (std::int64_t k = 0; k < ldq; ++k) {
      // NaN rounds like the vector conversion (to INT_MIN), then clamps to -127: the scale makes it NaN.
      const float r = k < a.k ? std::nearbyint(load(a.a, a.a_dtype, m * a.a_row_stride + k * a.a_col_stride) * inv) : 0.0f;
      out[k] = std::int8_t(std::isnan(r) ? -127.0f : std::clamp(r, -127.0f, 127.0f));
    }
  }
}

}  // namespace tessera::kernels::ref
