#include "core/element.hpp"
#include "kernels/activation.hpp"
#include "kernels/winograd.hpp"

namespace tessera::kernels::ref {

using namespace tessera::detail;  // load / store

namespace {

// B^T v of one column (or row) of a patch: the variants differ in the last row's sign.
void input_rows(const float* v, std::int64_t step, std::int64_t tile, float* out) {
  out[0] = v[0] - v[2 * step];
  out[1] = v[step] + v[2 * step];
  out[2] = v[2 * step] - v[step];
  out[3] = tile == 2 ? v[step] - v[3 * step] : v[3 * step] - v[step];
}

// A^T v: the tile's outputs from one column (or row) of M.
void output_rows(const float* v, std::int64_t step, std::int64_t tile, float* out) {
  out[0] = v[0] + v[step] + v[2 * step];
  if (tile == 2) {
    out[1] = v[step] - v[2 * step] - v[3 * step];
  } else {
    out[1] = v[step] - v[2 * step];
    out[2] = v[step] + v[2 * step] + v[3 * step];
  }
}

}  // namespace

// In f32, in the order of the AVX-512 row, so both round alike.
void winograd_input(const WinogradGeometry& g, const void* x, std::int64_t t0, std::int64_t count, void* v, DType v_dtype,
                    std::int64_t ld, std::int64_t plane) {
  for (std::int64_t r = 0; r < count; ++r) {
    const std::int64_t t = t0 + r, ih0 = g.tile * (t / g.tiles_w) - g.pad_h, iw0 = g.tile * (t % g.tiles_w) - g.pad_w;
    for (std::int64_t c = 0; c < g.channels; ++c) {
      float d[16], u[16], w[4];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) {
          const std::int64_t ih = ih0 + i, iw = iw0 + j;
          const bool inside = ih >= 0 && ih < g.in_h && iw >= 0 && iw < g.in_w;
          d[4 * i + j] = inside ? load(x, g.x_dtype, ih * g.x_row_stride + iw * g.x_col_stride + c) : 0.0f;
        }
      for (int j = 0; j < 4; ++j) {  // B^T d, column j
        input_rows(d + j, 4, g.tile, w);
        for (int i = 0; i < 4; ++i) u[4 * i + j] = w[i];
      }
      for (int i = 0; i < 4; ++i) {  // (B^T d) B, row i
        input_rows(u + 4 * i, 1, g.tile, w);
        for (int j = 0; j < 4; ++j) store(v, v_dtype, (4 * i + j) * plane + r * ld + c, w[j]);
      }
    }
  }
}

void winograd_output(const WinogradGeometry& g, const float* m, std::int64_t ld, std::int64_t plane, std::int64_t t0,
                     std::int64_t count, std::int64_t n0, std::int64_t n1, const WinogradOutput& out) {
  const EpilogueArgs& ep = out.ep;
  const std::int64_t tile = g.tile;
  for (std::int64_t r = 0; r < count; ++r) {
    const std::int64_t t = t0 + r, oh0 = tile * (t / g.tiles_w), ow0 = tile * (t % g.tiles_w);
    for (std::int64_t n = n0; n < n1; ++n) {
      float s[16], w[12], col[3], y[3];
      for (int i = 0; i < 16; ++i) s[i] = m[i * plane + r * ld + n];
      for (int j = 0; j < 4; ++j) {  // A^T M, column j
        output_rows(s + j, 4, tile, col);
        for (int i = 0; i < tile; ++i) w[4 * i + j] = col[i];
      }
      for (std::int64_t i = 0; i < tile; ++i) {  // (A^T M) A, row i
        output_rows(w + 4 * i, 1, tile, y);
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
