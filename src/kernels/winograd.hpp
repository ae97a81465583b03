#pragma once
// Winograd minimal filtering for stride-1 convs over NHWC (Lavin & Gray
// 2015), in two variants on the same 4x4 input patches, 16 planes:
//   F(2x2, 3x3): 3x3 kernels, 2x2 output tiles: 16 multiplies per tile and
//                channel pair instead of 36;
//   F(3x3, 2x2): 2x2 kernels (an upsampling conv's sub-pixel phases), 3x3
//                output tiles: 16 instead of 36.
// Per tile and channel:
//
//   V = B^T d B      (d: the 4x4 patch, zeros outside x)   -> 16 planes
//   M_s = V_s . U_s  (U = G g G^T, the weights: 16 GEMMs over the channels,
//                     done by the conv with the matmul rows)
//   y = A^T M A      (the tile's outputs), then the conv's epilogue
//
//   F(2x2, 3x3): B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
//                G   = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]
//                A^T = [1 1 1 0; 0 1 -1 -1]
//   F(3x3, 2x2): B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 -1 0 1]
//                G   = [1 0; 1/2 1/2; 1/2 -1/2; 0 1]
//                A^T = [1 1 1 0; 0 1 -1 0; 0 1 1 1]
//
// Tile t of a sample covers output rows m (t / tiles_w) + [0, m) and columns
// m (t % tiles_w) + [0, m), m the tile size; those past the output are not
// written. A plane holds a block's tiles as rows: plane s (s = 4 i + j,
// element (i, j) of the 4x4 transform) of V at v + s * plane, tile t0 + r at
// row r, stride ld.
#include <cstdint>
#include <span>

#include "kernels/matmul.hpp"

namespace tessera::kernels {

struct WinogradGeometry {
  std::int64_t tile;                  // 2: F(2x2, 3x3); 3: F(3x3, 2x2)
  std::int64_t in_h, in_w, channels;  // channels: the group's Cig
  std::int64_t pad_h, pad_w;          // x's row of a tile's patch: tile * (t / tiles_w) - pad_h
  std::int64_t out_h, out_w, tiles_w;  // tiles_w = ceil(out_w / tile)
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

// U = G g G^T of one r x r kernel g (row-major; r = 3 or 2, the variant's)
// into u[16] (row-major 4x4). G's rows: g_0; (sum of g) / 2; (alternating
// sum) / 2; g_last.
static inline void winograd_weights(const float* g, int r, float* u) {
  const auto g_times = [r](const float* v, std::int64_t step, float* out) {
    const float last = v[(r - 1) * step];
    float sum = 0.0f, alt = 0.0f;
    for (int i = 0; i < r; ++i) sum += v[i * step], alt += (i % 2 ? -1.0f : 1.0f) * v[i * step];
    out[0] = v[0], out[1] = 0.5f * sum, out[2] = 0.5f * alt, out[3] = last;
  };
  float gg[4][3] = {};  // G g: column c of g through G
  for (int c = 0; c < r; ++c) {
    float col[4];
    g_times(g + c, r, col);
    for (int i = 0; i < 4; ++i) gg[i][c] = col[i];
  }
  for (int i = 0; i < 4; ++i) g_times(gg[i], 1, u + 4 * i);
}

#define TESSERA_WINOGRAD_KERNELS                                                                                    \
  void winograd_input(const WinogradGeometry&, const void*, std::int64_t, std::int64_t, void*, DType, std::int64_t, \
                      std::int64_t);                                                                                \
  void winograd_output(const WinogradGeometry&, const float*, std::int64_t, std::int64_t, std::int64_t, std::int64_t, \
                       std::int64_t, std::int64_t, const WinogradOutput&);
namespace ref { TESSERA_WINOGRAD_KERNELS }
namespace avx2 { TESSERA_WINOGRAD_KERNELS }
namespace avx512 { TESSERA_WINOGRAD_KERNELS }
#undef TESSERA_WINOGRAD_KERNELS

}  // namespace tessera::kernels
