#pragma once
// Winograd minimal filtering for stride-1 convs over NHWC (Lavin & Gray
// 2015), in three variants; a variant is named by its output tile m and
// works on (m + r - 1)^2 patches (r: the kernel's size), one plane each:
//   F(2x2, 3x3): 3x3 kernels, 4x4 patches, 16 multiplies per 2x2 output
//                tile and channel pair instead of 36;
//   F(3x3, 2x2): 2x2 kernels (an upsampling conv's sub-pixel phases), 4x4
//                patches, 16 per 3x3 tile instead of 36;
//   F(4x4, 3x3): 3x3 kernels, 6x6 patches, 36 per 4x4 tile instead of 144.
//                Its transforms scale by up to 5 and 1/24 and it loses about
//                3 decimal bits (C 1280: 10x the direct sum's error): taken
//                for convs held to the bf16 tolerance only.
// Per tile and channel, in f32:
//
//   V = B^T d B      (d: the patch, zeros outside x)   -> the planes
//   M_s = V_s . U_s  (U = G g G^T, the weights: one GEMM per plane over the
//                     channels, done by the conv with the matmul rows, or
//                     with U made per slice: WinogradKernelGemmFn)
//   y = A^T M A      (the tile's outputs), then the conv's epilogue
//
//   F(2x2, 3x3): B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
//                G   = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]
//                A^T = [1 1 1 0; 0 1 -1 -1]
//   F(3x3, 2x2): B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 -1 0 1]
//                G   = [1 0; 1/2 1/2; 1/2 -1/2; 0 1]
//                A^T = [1 1 1 0; 0 1 -1 0; 0 1 1 1]
//   F(4x4, 3x3): B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0;
//                       0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1]
//                G   = [1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6;
//                       1/24 1/12 1/6; 1/24 -1/12 1/6; 0 0 1]
//                A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1]
//
// Tile t of a sample covers output rows m (t / tiles_w) + [0, m) and columns
// m (t % tiles_w) + [0, m); those past the output are not written. A plane
// holds a block's tiles as rows: plane s (s = p i + j, element (i, j) of the
// p x p transform) of V at v + s * plane, tile t0 + r at row r, stride ld.
#include <cstdint>
#include <span>

#include "kernels/matmul.hpp"

namespace tessera::kernels {

// The variant of output tile m: its patch's size, and its plane count.
constexpr std::int64_t winograd_patch(std::int64_t tile) { return tile == 4 ? 6 : 4; }
constexpr std::int64_t winograd_planes(std::int64_t tile) { return winograd_patch(tile) * winograd_patch(tile); }

struct WinogradGeometry {
  std::int64_t tile;                  // 2: F(2x2, 3x3); 3: F(3x3, 2x2); 4: F(4x4, 3x3)
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
// V's planes.
using WinogradInputFn = void (*)(const WinogradGeometry& g, const void* x, std::int64_t t0, std::int64_t count, float* v,
                                 std::int64_t ld, std::int64_t plane);
// From the planes of sums m of tiles [t0, t0 + count), columns
// [n0, n1): the tiles' output pixels, through the epilogue.
using WinogradOutputFn = void (*)(const WinogradGeometry& g, const float* m, std::int64_t ld, std::int64_t plane,
                                  std::int64_t t0, std::int64_t count, std::int64_t n0, std::int64_t n1,
                                  const WinogradOutput& out);

// F(4x4, 3x3): the planes' GEMMs with U made as they go. From V's planes of
// `count` tiles and the 3x3 weights as the direct conv packs them (w [9 Cig,
// Cog], f32 or bf16, row (3 kh + kw) Cig + ci), the sums of output channels
// [n0, n1) (n0 a multiple of 32) into M's planes, whose rows hold
// padded_n(n1) columns: U = G g G^T is computed per slice of input channels
// and panel of 32 output channels, next to the GEMM that uses it, instead of
// read from a copy of all of U (36 / 9 of the f32 weights' bytes, 8x the
// bf16 ones'). Worth it when a block's few tiles would stream U from memory
// for little arithmetic (conv.cpp).
using WinogradKernelGemmFn = void (*)(const PackedB& w, std::int64_t cig, const float* v, std::int64_t ld_v,
                                      std::int64_t v_plane, std::int64_t count, float* m, std::int64_t ld_m,
                                      std::int64_t m_plane, std::int64_t n0, std::int64_t n1);

struct WinogradTransforms {
  WinogradInputFn input;
  WinogradOutputFn output;
  WinogradKernelGemmFn kernel_gemm;  // nullptr: U read from its copy (ConvWeights)
};

struct WinogradProblem {
  DType x, y, residual;  // residual: f32 when absent
  std::int64_t in_channels, out_channels;  // per group; in: of all the inputs (a stride-2 conv: 4 phases)
  std::int64_t tile;                       // the variant
};

// Tiles per block: the planes of V and of M (and a GEMM's A rows) kept
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

// U = G g G^T of one r x r kernel g (row-major; r = 3, or 2 for tile 3)
// into u (row-major p x p, p = winograd_patch(tile)), summed in double.
void winograd_weights(const float* g, std::int64_t tile, float* u);

#define TESSERA_WINOGRAD_KERNELS                                                                                    \
  void winograd_input(const WinogradGeometry&, const void*, std::int64_t, std::int64_t, float*, std::int64_t,        \
                      std::int64_t);                                                                                \
  void winograd_output(const WinogradGeometry&, const float*, std::int64_t, std::int64_t, std::int64_t, std::int64_t, \
                       std::int64_t, std::int64_t, const WinogradOutput&);
namespace ref { TESSERA_WINOGRAD_KERNELS }
namespace avx2 { TESSERA_WINOGRAD_KERNELS }
namespace avx512 {
TESSERA_WINOGRAD_KERNELS
void winograd_f43_kernel_gemm(const PackedB&, std::int64_t, const float*, std::int64_t, std::int64_t, std::int64_t, float*,
                              std::int64_t, std::int64_t, std::int64_t, std::int64_t);
}
#undef TESSERA_WINOGRAD_KERNELS

}  // namespace tessera::kernels
