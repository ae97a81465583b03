#pragma once
// Winograd F(2x2, 3x3) transforms for 3x3 stride-1 convs over NHWC (Lavin &
// Gray 2015): a 2x2 tile of output pixels from the 4x4 patch of input it
// reads, with 16 multiplies per input and output channel pair instead of 36.
// Per tile and channel:
//
//   V = B^T d B      (d: the 4x4 patch, zeros outside x)   -> 16 planes
//   M_s = V_s . U_s  (U = G g G^T, the weights: 16 GEMMs over the channels,
//                     done by the conv with the matmul rows)
//   y = A^T M A      (the 2x2 outputs), then the conv's epilogue
//
//   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
//   G   = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]
//   A^T = [1 1 1 0; 0 1 -1 -1]
//
// Tile t of a sample covers output rows 2 (t / tiles_w) + {0, 1} and columns
// 2 (t % tiles_w) + {0, 1}; those past the output are not written. A plane
// holds a block's tiles as rows: plane s (s = 4 i + j, element (i, j) of the
// 4x4 transform) of V at v + s * plane, tile t0 + r at row r, stride ld.
#include <cstdint>
#include <span>

#include "kernels/matmul.hpp"

namespace tessera::kernels {

struct WinogradGeometry {
  std::int64_t in_h, in_w, channels;  // channels: the group's Cig
  std::int64_t pad_h, pad_w;
  std::int64_t out_h, out_w, tiles_w;  // tiles_w = ceil(out_w / 2)
  std::int64_t x_row_stride, x_col_stride;  // elements; channel stride 1
  DType x_dtype;
};

// Where the output transform writes: y (the sample's and group's first
// element) with row and pixel strides, and the epilogue of its columns:
// ep.bias [Cog] and ep.residual at the same element as y, with
// ep.residual_row_stride its pixel stride and residual_h_stride its row
// stride (either may be 0: a broadcast residual).
struct WinogradOutput {
  void* y;
  DType y_dtype;
  std::int64_t y_row_stride, y_col_stride;
  EpilogueArgs ep;
  std::int64_t residual_h_stride;
};

// Tiles [t0, t0 + count) of one sample (x at the group's first channel) into
// V's 16 planes, in v_dtype (the GEMM's A: x's dtype).
using WinogradInputFn = void (*)(const WinogradGeometry& g, const void* x, std::int64_t t0, std::int64_t count, void* v,
                                 DType v_dtype, std::int64_t ld, std::int64_t plane);
// From the 16 planes of f32 sums m of tiles [t0, t0 + count), columns
// [n0, n1): the tiles' output pixels, through the epilogue.
using WinogradOutputFn = void (*)(const WinogradGeometry& g, const float* m, std::int64_t ld, std::int64_t plane,
                                  std::int64_t t0, std::int64_t count, std::int64_t n0, std::int64_t n1,
                                  const WinogradOutput& out);

struct WinogradTransforms {
  WinogradInputFn input;
  WinogradOutputFn output;
};

struct WinogradProblem {
  DType x, y, residual;  // residual: f32 when absent
  std::int64_t in_channels, out_channels;  // per group
};

// Tiles per block: the 16 planes of V and of M (and a GEMM's A rows) kept
// near the core.
struct WinogradTiling {
  std::int64_t tiles;
};

struct WinogradFamily {
  using Problem = WinogradProblem;
  using Tiling = WinogradTiling;
  using Run = WinogradTransforms;
};

std::span<const KernelRow<WinogradFamily>> rows(WinogradFamily);

// U = G g G^T of one 3x3 kernel g (row-major) into u[16] (row-major 4x4).
static inline void winograd_weights(const float* g, float* u) {
  float gg[4][3];  // G g
  for (int c = 0; c < 3; ++c) {
    gg[0][c] = g[c];
    gg[1][c] = 0.5f * (g[c] + g[3 + c] + g[6 + c]);
    gg[2][c] = 0.5f * (g[c] - g[3 + c] + g[6 + c]);
    gg[3][c] = g[6 + c];
  }
  for (int r = 0; r < 4; ++r) {
    u[4 * r + 0] = gg[r][0];
    u[4 * r + 1] = 0.5f * (gg[r][0] + gg[r][1] + gg[r][2]);
    u[4 * r + 2] = 0.5f * (gg[r][0] - gg[r][1] + gg[r][2]);
    u[4 * r + 3] = gg[r][2];
  }
}

#define TESSERA_WINOGRAD_KERNELS                                                                                    \
  void winograd_input(const WinogradGeometry&, const void*, std::int64_t, std::int64_t, void*, DType, std::int64_t, \
                      std::int64_t);                                                                                \
  void winograd_output(const WinogradGeometry&, const float*, std::int64_t, std::int64_t, std::int64_t, std::int64_t, \
                       std::int64_t, std::int64_t, const WinogradOutput&);
namespace ref { TESSERA_WINOGRAD_KERNELS }
namespace avx512 { TESSERA_WINOGRAD_KERNELS }
#undef TESSERA_WINOGRAD_KERNELS

}  // namespace tessera::kernels
