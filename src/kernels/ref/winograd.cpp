#include "core/element.hpp"
#include "kernels/activation.hpp"
#include "kernels/winograd.hpp"

namespace tessera::kernels::ref {

using namespace tessera::detail;  // load / store

// In f32, in the order of the AVX-512 row, so both round alike.
void winograd_input(const WinogradGeometry& g, const void* x, std::int64_t t0, std::int64_t count, void* v, DType v_dtype,
                    std::int64_t ld, std::int64_t plane) {
  for (std::int64_t r = 0; r < count; ++r) {
    const std::int64_t t = t0 + r, ih0 = 2 * (t / g.tiles_w) - g.pad_h, iw0 = 2 * (t % g.tiles_w) - g.pad_w;
    for (std::int64_t c = 0; c < g.channels; ++c) {
      float d[4][4], u[4][4];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) {
          const std::int64_t ih = ih0 + i, iw = iw0 + j;
          const bool inside = ih >= 0 && ih < g.in_h && iw >= 0 && iw < g.in_w;
          d[i][j] = inside ? load(x, g.x_dtype, ih * g.x_row_stride + iw * g.x_col_stride + c) : 0.0f;
        }
      for (int j = 0; j < 4; ++j) {  // B^T d
        u[0][j] = d[0][j] - d[2][j];
        u[1][j] = d[1][j] + d[2][j];
        u[2][j] = d[2][j] - d[1][j];
        u[3][j] = d[1][j] - d[3][j];
      }
      for (int i = 0; i < 4; ++i) {  // (B^T d) B
        const float w[4] = {u[i][0] - u[i][2], u[i][1] + u[i][2], u[i][2] - u[i][1], u[i][1] - u[i][3]};
        for (int j = 0; j < 4; ++j) store(v, v_dtype, (4 * i + j) * plane + r * ld + c, w[j]);
      }
    }
  }
}

void winograd_output(const WinogradGeometry& g, const float* m, std::int64_t ld, std::int64_t plane, std::int64_t t0,
                     std::int64_t count, std::int64_t n0, std::int64_t n1, const WinogradOutput& out) {
  const EpilogueArgs& ep = out.ep;
  for (std::int64_t r = 0; r < count; ++r) {
    const std::int64_t t = t0 + r, oh0 = 2 * (t / g.tiles_w), ow0 = 2 * (t % g.tiles_w);
    for (std::int64_t n = n0; n < n1; ++n) {
      float s[4][4], w[2][4];
      for (int i = 0; i < 16; ++i) s[i / 4][i % 4] = m[i * plane + r * ld + n];
      for (int j = 0; j < 4; ++j) {  // A^T M
        w[0][j] = s[0][j] + s[1][j] + s[2][j];
        w[1][j] = s[1][j] - s[2][j] - s[3][j];
      }
      for (int i = 0; i < 2; ++i) {  // (A^T M) A
        const float y[2] = {w[i][0] + w[i][1] + w[i][2], w[i][1] - w[i][2] - w[i][3]};
        for (int j = 0; j < 2; ++j) {
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
