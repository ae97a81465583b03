#pragma once
// Layouts of weights B [K, N] packed once for the GEMM kernels. Columns are
// grouped in panels of 32 (zero-padded at the N edge) so that a kernel
// streams one panel as one contiguous run of memory.
//
//   f32  [panel][k][32]
//   bf16 [panel][k/32][half][k%32/2][16][2]: the AMX B-tile layout, K padded
//        to 32 with zeros. A tile (16 k-pairs x 16 columns) is 1 KiB; each
//        64-byte row holds the pairs (k, k+1) of 16 columns, which is also
//        what vdpbf16ps wants.
//   i8   [panel][k/64][half][k%64/4][16][4]: the AMX int8 B-tile layout (K
//        padded to 64), signed when symmetric, unsigned with zero points
//   i4   [panel][k/4][16][4] bytes (K padded to 4 with zero bytes): byte
//        (j, e) holds k = 4 * (k/4) + e of column j in its low nibble and of
//        column j+16 in its high nibble, unsigned (symmetric: zero point 8).
//        Each 64 bytes are four k of the panel's 32 columns; either nibble
//        masked out leaves the u8 operand of vpdpbusd (4 k per 4-byte lane).
//
// Quantized weights carry scales (f32, f16 or bf16) and, when asymmetric,
// zero points (u8), w = (q - zero) * scale, both [panel][group][32]: a
// panel's parameters lie in the order a decode loop reads them, one stream
// beside the panel's. (One row of all N per group put a panel's next group
// 16 KiB on at N = 4096, f32 scales: a line from another DRAM page every
// 2 KiB of int4 weights, and the decode loop over them ran at 20 GB/s
// against 26 with all groups read from one row; AMD EPYC Turin, 1 thread.)
// Symmetric int8 weights also carry their column offsets [n_pad] (i32):
// 128 x the sum of each column's q over K, what the +128 that makes A's
// int8 steps unsigned (vpdpbusd's u8 operand) adds to a column's dot
// products.
//
// Only static functions here: ISA translation units include this header, and
// an inline function would give the linker ISA-specific copies to pick from.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "tessera/core/dtype.hpp"

namespace tessera::kernels {

constexpr std::int64_t kPanelCols = 32;
constexpr std::int64_t kBf16KStep = 32;  // K rows of one AMX bf16 B tile
constexpr std::int64_t kI8KStep = 64;    // K rows of one AMX int8 B tile
constexpr std::int64_t kI4KStep = 4;     // K rows of one 64-byte block of i4

struct PackedB {
  DType dtype;  // f32, bf16, i8, i4
  std::int64_t k, n;
  const void* values;
  const void* scales = nullptr;
  DType scale_dtype = DType::f32;
  const std::uint8_t* zeros = nullptr;
  std::int64_t group_size = 0;  // K for one group per column
  const std::int32_t* column_offsets = nullptr;  // symmetric i8: 128 x the columns' sums
};

static inline std::int64_t round_up(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }
static inline std::int64_t panels_of(std::int64_t n) { return (n + kPanelCols - 1) / kPanelCols; }
static inline std::int64_t padded_n(std::int64_t n) { return panels_of(n) * kPanelCols; }
// K rows of one B tile for the tile layouts (bf16, i8), else 1.
static inline std::int64_t tile_k_step(DType dtype) {
  return dtype == DType::bf16 ? kBf16KStep : dtype == DType::i8 ? kI8KStep : 1;
}
static inline std::int64_t padded_k(DType dtype, std::int64_t k) {
  return round_up(k, dtype == DType::i4 ? kI4KStep : tile_k_step(dtype));
}

// Bytes of one packed panel row (one k) and of the whole value array.
static inline std::int64_t panel_row_bytes(DType dtype) {
  return dtype == DType::i4 ? kPanelCols / 2 : kPanelCols * bytes_of(dtype);
}
static inline std::int64_t packed_value_bytes(DType dtype, std::int64_t k, std::int64_t n) {
  return panels_of(n) * padded_k(dtype, k) * panel_row_bytes(dtype);
}

// Element index of (k, n) in a tile layout (bf16: pairs of k, i8: quads of k).
static inline std::int64_t tile_packed_index(DType dtype, std::int64_t k_pad, std::int64_t k, std::int64_t n) {
  const std::int64_t step = tile_k_step(dtype), group = step / 16;  // k values side by side in one 4-byte lane
  const std::int64_t p = n / kPanelCols, col = n % kPanelCols, half = col / 16, j = col % 16;
  const std::int64_t kb = k / step, kq = (k % step) / group, e = k % group;
  return (((((p * (k_pad / step) + kb) * 2 + half) * 16 + kq) * 16 + j) * group) + e;
}

// Scale groups (of `group` k, out of k) of whole quads of k — int4's 64-byte
// blocks, int8's 64-byte tile rows — or one group over K: a block or row
// never straddles two scales.
static inline bool groups_in_quads(std::int64_t group, std::int64_t k) { return group % 4 == 0 || group >= k; }

// Rows [g0, g1) of a panel in a tile layout (bf16: Step 2, TileK 32; i8:
// Step 4, TileK 64), in the order of memory: each 2 KiB tile's first column
// half (1 KiB: its 64-byte rows of Step k), then its second. `row(half, k,
// at)` gets half as std::integral_constant<int, 0 / 1> and `at`, the byte
// offset of the row holding k (a multiple of Step) in the panel. Streaming
// kernels walk this way so that a panel is one sequential run: both halves
// of a row side by side make two streams 1 KiB apart, which held an AMD
// EPYC (Zen 4) core to 55-60 % of its read bandwidth.
template <std::int64_t Step, std::int64_t TileK, class Row>
__attribute__((always_inline)) static inline void walk_halves(std::int64_t g0, std::int64_t g1, Row&& row) {
  for (std::int64_t t0 = g0 / TileK * TileK; t0 < g1; t0 += TileK) {
    const std::int64_t k0 = std::max(g0, t0), k1 = std::min(g1, t0 + TileK);
    auto half = [&]<int H>(std::integral_constant<int, H> h) __attribute__((always_inline)) {
      for (std::int64_t k = k0; k < k1; k += Step) row(h, k, t0 / TileK * 2048 + H * 1024 + (k - t0) / Step * 64);
    };
    half(std::integral_constant<int, 0>());
    half(std::integral_constant<int, 1>());
  }
}

// The largest int16 step of activations quantized for the VNNI rows'
// integer dot products with quantized weights: s + 128 stays below 2^15, so
// s = 256 hi + lo with both bytes signed (their int16_row; the AVX2 decode
// row splits s = 255 hi + lo, for vpsignb, under a step of its own).
constexpr float kMaxInt16Step = 32639.0f;
// Quads (4 k) per i32 sum with int16 activations: 32639 x 15 x 4 x 1024 <
// 2^31 for int4 weights, 32639 x 255 x 4 x 32 for int8 (unsigned bytes).
constexpr std::int64_t max_block_quads(DType w) { return w == DType::i4 ? 1024 : 32; }

// K in blocks whose integer sums are exact in i32: the scale groups (whole
// quads, or one group over K and its zero padding), cut into equal blocks
// of at most max_block_quads.
namespace {  // member functions: see the unnamed namespace in x86/attention_rows.hpp
struct Blocks {
  std::int64_t quads, group_quads, per_group, block_quads, count;
  explicit Blocks(const PackedB& b) {
    quads = padded_k(b.dtype, std::max<std::int64_t>(b.k, 1)) / 4;
    group_quads = b.group_size < b.k ? b.group_size / 4 : quads;  // whole quads (groups_in_quads)
    per_group = (group_quads + max_block_quads(b.dtype) - 1) / max_block_quads(b.dtype);
    block_quads = (group_quads + per_group - 1) / per_group;
    count = (quads + group_quads - 1) / group_quads * per_group;
  }
  std::int64_t begin(std::int64_t i) const { return i / per_group * group_quads + i % per_group * block_quads; }
  std::int64_t end(std::int64_t i) const {
    return std::min({quads, begin(i) + block_quads, (i / per_group + 1) * group_quads});
  }
};
}  // namespace

// i4: the byte holding (k, n) (the low nibble for n % 32 < 16, else the high).
static inline std::int64_t i4_byte_index(std::int64_t k_pad, std::int64_t k, std::int64_t n) {
  const std::int64_t p = n / kPanelCols, j = n % 16;
  return ((p * (k_pad / kI4KStep) + k / kI4KStep) * 16 + j) * kI4KStep + k % kI4KStep;
}

// The stored integer of (k, n) for i8 / i4, and the zero point it is measured from.
static inline int quantized_at(const PackedB& b, std::int64_t k, std::int64_t n) {
  const auto* v = static_cast<const std::uint8_t*>(b.values);
  if (b.dtype == DType::i4) {
    const std::uint8_t byte = v[i4_byte_index(padded_k(b.dtype, b.k), k, n)];
    return n % kPanelCols < 16 ? byte & 0xf : byte >> 4;
  }
  const std::uint8_t byte = v[tile_packed_index(b.dtype, padded_k(b.dtype, b.k), k, n)];
  return b.zeros ? int(byte) : int(std::int8_t(byte));
}
// Index of group g's scale (and zero point) of column n among `groups` groups.
static inline std::int64_t group_param_index(std::int64_t groups, std::int64_t g, std::int64_t n) {
  return (n / kPanelCols * groups + g) * kPanelCols + n % kPanelCols;
}
static inline std::int64_t group_param_index(const PackedB& b, std::int64_t g, std::int64_t n) {
  return group_param_index((b.k + b.group_size - 1) / b.group_size, g, n);
}
static inline int zero_point_at(const PackedB& b, std::int64_t group, std::int64_t n) {
  if (b.zeros) return b.zeros[group_param_index(b, group, n)];
  return b.dtype == DType::i4 ? 8 : 0;
}

// B[k, n] as the kernels compute with it (dequantized: (q - zero) * scale in
// f32). Baseline code only: the reference kernel and PackedWeights::unpack().
float packed_value(const PackedB& p, std::int64_t k, std::int64_t n);

}  // namespace tessera::kernels
