#include <cmath>

#include "core/element.hpp"
#include "kernels/activation.hpp"
#include "kernels/winograd.hpp"

namespace tessera::kernels::ref {

using namespace tessera::detail;  // load / store

namespace {

// B^T v of one column (or row) of a patch. The F(2x2, 3x3) and F(3x3, 2x2)
// rows differ in the last row's sign.
void input_rows(const float* v, std::int64_t step, std::int64_t tile, float* out) {
  if (tile == 4) {
    const float t1 = std::fma(-4.0f, v[2 * step], v[4 * step]), t2 = std::fma(-4.0f, v[step], v[3 * step]);
    const float t3 = v[4 * step] - v[2 * step], t4 = 2.0f * (v[3 * step] - v[step]);
    out[0] = std::fma(4.0f, v[0], std::fma(-5.0f, v[2 * step], v[4 * step]));
    out[1] = t1 + t2, out[2] = t1 - t2, out[3] = t3 + t4, out[4] = t3 - t4;
    out[5] = std::fma(4.0f, v[step], std::fma(-5.0f, v[3 * step], v[5 * step]));
    return;
  }
  out[0] = v[0] - v[2 * step];
  out[1] = v[step] + v[2 * step];
  out[2] = v[2 * step] - v[step];
  out[3] = tile == 2 ? v[step] - v[3 * step] : v[3 * step] - v[step];
}

// A^T v: the tile's outputs from one column (or row) of M.
void output_rows(const float* v, std::int64_t step, std::int64_t tile, float* out) {
  if (tile == 4) {
    const float a = v[step] + v[2 * step], b = v[step] - v[2 * step], c = v[3 * step] + v[4 * step], d = v[3 * step] - v[4 * step];
    out[0] = v[0] + a + c, out[1] = std::fma(2.0f, d, b), out[2] = std::fma(4.0f, c, a);
    out[3] = std::fma(8.0f, d, b) + v[5 * step];
    return;
  }
  out[0] = v[0] + v[step] + v[2 * step];
  if (tile == 2) {
    out[1] = v[step] - v[2 * step] - v[3 * step];
  } else {
    out[1] = v[step] - v[2 * step];
    out[2] = v[step] + v[2 * step] + v[3 * step];
  }
}

}  // namespace

// In f32, in the order of the vector rows, so all round alike.
void winograd_input(const WinogradGeometry& g, const void* x, std::int64_t t0, std::int64_t count, float* v, std::int64_t ld,
                    std::int64_t plane) {
  const std::int64_t p = winograd_patch(g.tile);
  for (std::int64_t r = 0; r < count; ++r) {
    const std::int64_t t = t0 + r, ih0 = g.tile * (t / g.tiles_w) - g.pad_h, iw0 = g.tile * (t % g.tiles_w) - g.pad_w;
    for (std::int64_t c = 0; c < g.channels; ++c) {
      float d[36], u[36], w[6];
      for (std::int64_t i = 0; i < p; ++i)
        for (std::int64_t j = 0; j < p; ++j) {
          const std::int64_t ih = ih0 + i, iw = iw0 + j;
          const bool inside = ih >= 0 && ih < g.in_h && iw >= 0 && iw < g.in_w;
          d[p * i + j] = inside ? load(x, g.x_dtype, ih * g.x_row_stride + iw * g.x_col_stride + c) : 0.0f;
        }
      for (std::int64_t j = 0; j < p; ++j) {  // B^T d, column j
        input_rows(d + j, p, g.tile, w);
        for (std::int64_t i = 0; i < p; ++i) u[p * i + j] = w[i];
      }
      for (std::int64_t i = 0; i < p; ++i) {  // (B^T d) B, row i
        input_rows(u + p * i, 1, g.tile, w);
        for (std::int64_t j = 0; j < p; ++j) v[(p * i + j) * plane + r * ld + c] = w[j];
      }
    }
  }
}

void winograd_output(const WinogradGeometry& g, const float* m, std::int64_t ld, std::int64_t plane, std::int64_t t0,
                     std::int64_t count, std::int64_t n0, std::int64_t n1, const WinogradOutput& out) {
  const EpilogueArgs& ep = out.ep;
  const std::int64_t tile = g.tile, p = winograd_patch(tile);
  for (std::int64_t r = 0; r < count; ++r) {
    const std::int64_t t = t0 + r, oh0 = tile * (t / g.tiles_w), ow0 = tile * (t % g.tiles_w);
    for (std::int64_t n = n0; n < n1; ++n) {
      float s[36], w[24], col[4] = {}, y[4] = {};
      for (std::int64_t i = 0; i < p * p; ++i) s[i] = m[i * plane + r * ld + n];
      for (std::int64_t j = 0; j < p; ++j) {  // A^T M, column j
        output_rows(s + j, p, tile, col);
        for (std::int64_t i = 0; i < tile; ++i) w[p * i + j] = col[i];
      }
      for (std::int64_t i = 0; i < tile; ++i) {  // (A^T M) A, row i
        output_rows(w + p * i, 1, tile, y);
        for (std::int64_t j = 0; j < tile; ++j) {
          const std::int64_t oh = oh0 + i, ow = ow0 + j;
          if (oh >= g.out_h || ow >= g.out_w) continue;
          double v = double(ep.scale) * y[j];
          if (ep.bias) v += load(ep.bias, ep.bias_dtype, n);
          v = activate(v, ep.act);
          if (ep.residual) v += load(ep.residual, ep.residual_dtype, oh * out.residual_h_stride + ow * ep.residual_row_stride + n);
          store(out.y, out.y_dtype, oh * out.y_row_stride + ow * out.y_col_stride + n, float(v));
        }
      }
    }
  }
}

}  // namespace tessera::kernels::ref
