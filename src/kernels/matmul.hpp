#pragma once
// Matmul family: C[m, n] = epilogue(sum_k A[m, k] * B[k, n]) for one matrix
// of a batch, computing the tile [m0, m1) x [n0, n1). A is any float dtype
// with any strides. B is either a strided float matrix or weights packed
// once (packed_weights.hpp). Accumulation is f32 (i32 for int8 x int8).
#include <algorithm>
#include <cstdint>
#include <span>

#include "kernels/activation.hpp"
#include "kernels/packed_weights.hpp"
#include "kernels/registry.hpp"
#include "tessera/core/dtype.hpp"

namespace tessera::kernels {

// c = act(scale * acc + bias[n]) + residual[m, n], rounded to c's dtype.
struct EpilogueArgs {
  float scale = 1.0f;
  Act act = Act::none;
  const void* bias = nullptr;  // [N], unit stride
  DType bias_dtype = DType::f32;
  const void* residual = nullptr;  // unit column stride
  DType residual_dtype = DType::f32;
  std::int64_t residual_row_stride = 0, residual_col_stride = 1;
  std::int64_t residual_run_stride = 0;  // with MatmulArgs::c_run
};

struct MatmulProblem {
  DType a, b, c;  // b: the raw dtype, or the packed weights' dtype
  bool b_packed;
  bool quantize_a;  // W8A8: A comes quantized per token (int8 packed B only)
  std::int64_t m, n, k;
  std::int64_t a_col_stride, b_col_stride, c_col_stride;
  bool residual_unit;  // no residual, or one with unit column stride
  std::int64_t b_group = 0;  // quantized weights: K per group of scales (K: one group)
};

// Whether rows `row_bytes` apart can be read in place by a register-blocked
// micro-kernel (14 rows, gemm_blocked.hpp): its rows must fall in different
// sets of L1 (64 sets of 64-byte lines), or rows 4 KiB apart (K = 1024 f32,
// 2048 bf16, ...) evict each other's lines: 20 % slower than packing them.
static inline bool rows_spread_in_l1(std::int64_t row_bytes) {
  int per_set[64] = {};
  for (std::int64_t i = 0; i < 14; ++i)
    if (++per_set[(i * row_bytes) >> 6 & 63] > 2) return false;
  return true;
}

// Whether the register-blocked rows read A as stored: rows of their dtype t,
// whole units of unit_k elements contiguous, spread over L1.
static inline bool blocked_reads_a_in_place(DType a, DType t, std::int64_t row_stride, std::int64_t col_stride, std::int64_t k,
                                            std::int64_t unit_k) {
  return a == t && col_stride == 1 && k % unit_k == 0 && row_stride % unit_k == 0 &&
         rows_spread_in_l1(row_stride * std::int64_t(bytes_of(t)));
}

// The row stride (elements) of rows of k elements that a register-blocked
// micro-kernel reads in place: a multiple of 16 at which a micro-tile's rows
// spread over L1 (C 1280 im2col rows: 11520 f32, 1 KiB short of a multiple
// of 4 KiB, spread with 16 more).
static inline std::int64_t in_place_row_stride(std::int64_t k, DType t) {
  std::int64_t ld = round_up(k, 16);
  while (!rows_spread_in_l1(ld * std::int64_t(bytes_of(t)))) ld += 16;
  return ld;
}

// Whether the AMX bf16 row reads A's rows in place as tiles: bf16 rows of
// whole 16-row tiles and 32-deep steps, not a multiple of 1 KiB apart (a
// block's 32 rows would then fall in at most four groups of L1 sets and
// evict each other: K = 4096 read in place measured 12-19 % slower than
// copied; K = 11008, M = 512 8-21 % faster).
static inline bool amx_reads_a_in_place(DType a, std::int64_t row_stride, std::int64_t col_stride, std::int64_t rows,
                                        std::int64_t k) {
  return a == DType::bf16 && col_stride == 1 && k % 32 == 0 && rows % 16 == 0 && row_stride * 2 % 1024 != 0;
}

struct MatmulArgs {
  DType a_dtype, b_dtype, c_dtype;
  std::int64_t k;
  const void* a;
  std::int64_t a_row_stride, a_col_stride;
  const void* b;  // raw B (when packed == nullptr)
  std::int64_t b_row_stride, b_col_stride;
  const PackedB* packed;
  // W8A8: A quantized beforehand by w8a8_quantize_rows (null otherwise):
  // int8 rows with stride a_q_stride, zero from K up to a multiple of 64 and
  // in whole zero rows up to a multiple of 16; one scale per row. Indexed by
  // the matrix's row m, like A.
  const std::int8_t* a_q;
  const float* a_scales;
  std::int64_t a_q_stride;
  // AMX bf16: A rounded to bf16 beforehand by amx::round_a_rows, once for
  // every task (null: each task rounds its own rows, per K slice): its
  // columns in blocks of a_bf16_slice (the kernel's K slice), each block
  // a_bf16_rows rows of a_bf16_slice elements, zero from K up to a multiple
  // of 32 and in whole zero rows up to a multiple of 16. Indexed by the
  // matrix's row m, like A.
  const std::uint16_t* a_bf16;
  std::int64_t a_bf16_rows, a_bf16_slice;
  void* c;
  std::int64_t c_row_stride, c_col_stride;
  EpilogueArgs ep;
  // C's rows, and the residual's, in runs of c_run rows (0: one run), the
  // runs c_run_stride (ep.residual_run_stride) elements apart: an upsampling
  // conv's sub-pixel phase writes every other pixel of every other row.
  std::int64_t c_run = 0, c_run_stride = 0;
  // C outgrows the last-level cache: the AVX-512 epilogues write its whole
  // aligned vectors with streaming stores (no read for ownership: a third
  // of C's traffic), and the kernels end with _mm_sfence().
  bool stream_c = false;
};

// Element offset of row m of rows in runs of `run` (0: one run), row_stride
// apart within a run and run_stride between runs.
static inline std::int64_t run_row_offset(std::int64_t m, std::int64_t run, std::int64_t row_stride, std::int64_t run_stride) {
  return run ? m / run * run_stride + m % run * row_stride : m * row_stride;
}
// Element offsets of row m of C and of the residual.
static inline std::int64_t c_row_offset(const MatmulArgs& a, std::int64_t m) {
  return run_row_offset(m, a.c_run, a.c_row_stride, a.c_run_stride);
}
static inline std::int64_t residual_row_offset(const MatmulArgs& a, std::int64_t m) {
  return run_row_offset(m, a.c_run, a.ep.residual_row_stride, a.ep.residual_run_stride);
}

// Splits m into the fewest blocks of at most max_block, evened out and
// rounded up to a multiple of step (a micro-tile's rows, a K grain).
std::int64_t balanced_block(std::int64_t m, std::int64_t max_block, std::int64_t step);

// Tile of C per task, and the K slice a kernel keeps on chip (0: the row's choice).
struct MatmulTiling {
  std::int64_t m_block, n_block, k_block;
};

struct MatmulFamily {
  using Problem = MatmulProblem;
  using Tiling = MatmulTiling;
  using Run = void (*)(const MatmulArgs&, const MatmulTiling&, std::int64_t m0, std::int64_t m1, std::int64_t n0,
                       std::int64_t n1);
};

std::span<const KernelRow<MatmulFamily>> rows(MatmulFamily);

// W8A8: each row of A is rounded to q = clamp(rne(a * (1 / scale)), -127, 127)
// with scale = max|a| / 127 (1 for an all-zero row). A row holding NaN or Inf
// gets a NaN scale, so its outputs are NaN. One definition for both passes.
// A float's magnitude bits (sign cleared) at or above this are Inf or NaN:
// per-row quantizers take the largest magnitude as integer bits and flag a
// row that is not all finite with it.
constexpr std::int32_t kNonFiniteBits = 0x7f800000;
static inline float w8a8_row_scale(float absmax, bool finite) {
  if (!finite) return __builtin_nanf("");
  return absmax > 0.0f ? absmax / 127.0f : 1.0f;
}

#define TESSERA_MATMUL_KERNEL(name) \
  void name(const MatmulArgs&, const MatmulTiling&, std::int64_t, std::int64_t, std::int64_t, std::int64_t)
namespace ref { TESSERA_MATMUL_KERNEL(matmul); }
namespace avx2 { TESSERA_MATMUL_KERNEL(matmul_f32); TESSERA_MATMUL_KERNEL(matmul_decode); TESSERA_MATMUL_KERNEL(matmul_int8); }
namespace avx512 { TESSERA_MATMUL_KERNEL(matmul_f32); TESSERA_MATMUL_KERNEL(matmul_decode); }
namespace avx512_bf16 {
TESSERA_MATMUL_KERNEL(matmul_bf16_dot);
TESSERA_MATMUL_KERNEL(matmul_int8_vnni);
TESSERA_MATMUL_KERNEL(matmul_decode_vnni);
TESSERA_MATMUL_KERNEL(matmul_i4_vnni);
TESSERA_MATMUL_KERNEL(matmul_w8_vnni);
}  // namespace avx512_bf16
namespace amx { TESSERA_MATMUL_KERNEL(matmul_bf16); TESSERA_MATMUL_KERNEL(matmul_int8); }
#undef TESSERA_MATMUL_KERNEL

// The W8A8 pre-pass: rows [m0, m1) of A quantized per token into q (row
// stride ldq, zero-padded past K) and scales.
#define TESSERA_W8A8_QUANTIZE(name) \
  void name(const MatmulArgs&, std::int64_t m0, std::int64_t m1, std::int8_t* q, std::int64_t ldq, float* scales)
namespace ref { TESSERA_W8A8_QUANTIZE(w8a8_quantize_rows); }
namespace avx2 { TESSERA_W8A8_QUANTIZE(w8a8_quantize_rows); }
namespace avx512 { TESSERA_W8A8_QUANTIZE(w8a8_quantize_rows); }
#undef TESSERA_W8A8_QUANTIZE
// The best pre-pass under an ISA ceiling, and its name.
struct W8A8Quantizer {
  const char* name;
  decltype(&ref::w8a8_quantize_rows) run;
};
W8A8Quantizer w8a8_quantizer(hw::Isa ceiling);

// The AMX rows' K slice: the tiling's k_block in whole steps, at most K's.
static inline std::int64_t amx_k_slice(std::int64_t k_block, std::int64_t k, std::int64_t step) {
  return std::max(step, std::min(k_block, round_up(k, step)));
}

// The GEMMs' A pre-pass, once for every task: rows [m0, m1) of A into dst
// in blocks of `slice` columns, each `rows` rows of `slice` elements (the
// layout of MatmulArgs::a_bf16). AMX and AVX512-BF16 round them to bf16,
// zero past K up to a multiple of 32; the f32 row copies them as f32, in
// one block (slice >= K). The register-blocked rows read one block of
// slice >= K in place, as A.
#define TESSERA_A_PRE_PASS(name) \
  void name(const MatmulArgs&, std::int64_t m0, std::int64_t m1, void* dst, std::int64_t rows, std::int64_t slice)
namespace amx { TESSERA_A_PRE_PASS(round_a_rows); }
namespace avx512_bf16 { TESSERA_A_PRE_PASS(round_a_rows); }
namespace avx512 { TESSERA_A_PRE_PASS(copy_a_rows); }
#undef TESSERA_A_PRE_PASS

}  // namespace tessera::kernels
