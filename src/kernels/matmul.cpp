#include "kernels/matmul.hpp"

#include <algorithm>

namespace tessera::kernels {

W8A8Quantizer w8a8_quantizer(hw::Isa ceiling) {
  if (ceiling >= hw::Isa::avx512) return {"w8a8_quantize_rows_avx512", avx512::w8a8_quantize_rows};
  if (ceiling >= hw::Isa::avx2) return {"w8a8_quantize_rows_avx2", avx2::w8a8_quantize_rows};
  return {"w8a8_quantize_rows_ref", ref::w8a8_quantize_rows};
}

std::int64_t balanced_block(std::int64_t m, std::int64_t max_block, std::int64_t step) {
  const std::int64_t blocks = std::max<std::int64_t>(1, (m + max_block - 1) / max_block);
  return round_up(std::max<std::int64_t>(1, (m + blocks - 1) / blocks), step);
}

namespace {

bool unit_output(const MatmulProblem& p) { return p.c_col_stride == 1 && p.residual_unit; }

// AVX-512 f32: any float A, raw float B or any packed weights (dequantized
// into f32 panels); W8A8 is computed in f32 on the int8-rounded values.
bool f32_supports(const MatmulProblem& p) { return unit_output(p); }

// Decode: a few rows against packed weights, dequantized in registers (bf16
// too: at M <= 4 streaming beats padding A to 16-row AMX tiles); W8A8 too
// (int8 x int8 products are exact in f32).
bool decode_supports(const MatmulProblem& p) { return unit_output(p) && p.b_packed && p.m <= 4; }

// AMX bf16: bf16 activations with bf16 B (raw or packed), or any float
// activations with packed bf16 weights, or (prefill, M >= 16) with
// quantized weights dequantized to bf16 tiles on chip. Activations are
// rounded to bf16 on the way into the tiles.
bool amx_bf16_supports(const MatmulProblem& p) {
  if (!unit_output(p) || p.quantize_a) return false;
  if (p.b_packed) return p.b == DType::bf16 || ((p.b == DType::i8 || p.b == DType::i4) && p.m >= 16);
  return p.a == DType::bf16 && p.b == DType::bf16;
}

// W8A8 (AMX-INT8, AVX512-VNNI): int8 weights with one scale per output channel.
bool int8_supports(const MatmulProblem& p) { return unit_output(p) && p.quantize_a && p.b_packed && p.b == DType::i8; }

// W8A8 decode: integer dot products straight from the tile layout.
bool int8_decode_supports(const MatmulProblem& p) { return int8_supports(p) && p.m <= 4; }

// int4 in integers, 4 rows of A per pass over the weights: W4A8 at any M
// (int8 dot products outrun the f32 rows at every M: 2.5 against 7 ms at
// M = 16), weight-only (int16 activations) up to 15 rows, where the AMX bf16
// row takes over (3.3 against 4.3 ms at M = 16). Weights whose groups are
// whole 64-byte blocks of 4 k (or one group covers K); other group sizes
// take the f32 rows.
bool i4_vnni_layout(const MatmulProblem& p) {
  return unit_output(p) && p.b_packed && p.b == DType::i4 && groups_in_quads(p.b_group, p.k);
}
bool i4_vnni_supports(const MatmulProblem& p) { return i4_vnni_layout(p) && (p.quantize_a || p.m < 16); }
// The same kernel, ranked below the AMX rows: weight-only from 16 to 31 rows
// where AMX is absent, ahead of the bf16 dot-product row (AMD EPYC, Zen 4,
// M = 16 cold, 1 thread: 155 against 120 GFLOP/s; from M = 32 on within
// noise, and at M = 64 the bf16 row leads, 188 against 155).
bool i4_vnni_few_rows(const MatmulProblem& p) { return i4_vnni_layout(p) && !p.quantize_a && p.m < 32; }

// Weight-only int8 the same way (int16 activations, two vpdpbusd per 64
// weights where dequantizing them to f32 costs ~20 instructions): up to 15
// rows ahead of the AMX rows, as int4; where AMX is absent, up to 47 ahead
// of the bf16 dot-product row (it streams the weights once per 4 rows of A,
// the bf16 row once per K slice). AMD EPYC Turin, 4096 x 4096 per channel,
// cold, one process alternating, bf16 row over this one: 1 thread M 16
// 1.51x the time, 32 1.10x, 40 1.02x, 48 0.95x, 64 0.88x, 96 0.81x; 2
// threads M 48 0.93x, 64 0.86x (before the bf16 row's int8 tiles were built
// a block of 4 k at a time, Zen 4 had it even at M = 128). Below 16 the f32
// decode rows took it (Zen 4, M 1 / 4 / 8: 0.95-1.07 / 1.7-1.9 / 7.1-7.4
// ms against 0.78-0.86 / 0.77-0.90 / 1.5-1.6).
bool w8_vnni_layout(const MatmulProblem& p) {
  return unit_output(p) && p.b_packed && p.b == DType::i8 && !p.quantize_a && groups_in_quads(p.b_group, p.k);
}
bool w8_vnni_supports(const MatmulProblem& p) { return w8_vnni_layout(p) && p.m < 16; }
bool w8_vnni_few_rows(const MatmulProblem& p) { return w8_vnni_layout(p) && p.m < 48; }

// vdpbf16ps, as the AMX bf16 row where AMX is absent: bf16 weights (packed,
// any float activations), bf16 x bf16, or (prefill, M >= 16) quantized
// weights dequantized to bf16 per K slice. Measured on an AMD EPYC (Zen 4)
// at M = 16, int4 weights: the f32 row that took them before reached 57
// GFLOP/s, 0.66x its own f32 weights.
bool bf16_dot_supports(const MatmulProblem& p) {
  if (!unit_output(p) || p.quantize_a) return false;
  if (p.b_packed) return p.b == DType::bf16 || ((p.b == DType::i8 || p.b == DType::i4) && p.m >= 16);
  return p.a == DType::bf16 && p.b == DType::bf16;
}

// AVX2 decode: as decode_supports, in passes of up to two rows over the
// weights; quantized weights in groups of whole quads of k (the i4 and i8
// layouts' 4 k per lane), others take the f32 row. f32 weights from 3 rows
// on take the f32 row too: it reads them once for all rows, and a second
// pass over them came from memory (AMD EPYC, Zen 2, 4096 x 4096, M = 4, 1
// thread: 7.9-8.0 ms against 10.2-11.0; bf16, int8 and int4 2-4x faster
// there in two passes, their weights dequantized in registers). Integer
// weights up to 16 rows (8 passes over panels held in L2), where the f32
// row converts the weights to f32 per K slice: 4096 x 4096, 1 / 2 threads,
// ms: W8A8 M 8 12.2 / 6.6 -> 3.9 / 2.1, M 16 16.1 / 8.5 -> 7.6 / 4.1; W4A8
// M 8 6.6 / 3.7 -> 3.3 / 1.8, M 16 9.9 / 5.7 -> 6.5 / 3.6; weight-only
// (int16 steps of A, one vpmaddwd per two bytes of weights) int4 M 8 7.3 /
// 3.8 -> 3.8 / 1.9, M 16 10.8 / 5.5 -> 7.5 / 3.9, int8 M 8 13.7 / 6.8 ->
// 4.5 / 2.5, M 16 16.9 / 8.5 -> 9.1 / 4.9. bf16 weights up to 16 rows too,
// widened in registers where the f32 row converts them per K slice: M 6
// 14.2 / 7.3 -> 6.7 / 3.9, M 8 14.0 / 7.4 -> 8.1 / 4.6, M 12 16.4 / 9.8 ->
// 11.7 / 6.6, M 16 17.4 / 8.7 -> 15.0 / 8.0-10.4. W8A8 from 8 rows on
// takes the integer row (matmul_int8_avx2), which reads the weights once:
// AMD EPYC Zen 3, cold, ms at 1 / 2 threads, two runs each: M 4 2.9 / 1.6
// against 2.9-3.2 / 1.5-1.8, M 8 5.4-5.6 / 3.1-3.2 against 4.8-5.1 / 2.7-3.0,
// M 16 9.6-11.4 / 6.1-6.3 against 7.5-8.3 / 4.5-4.8.
bool decode_avx2_supports(const MatmulProblem& p) {
  if (!unit_output(p) || !p.b_packed) return false;
  if (p.b == DType::f32) return p.m <= 2;
  if (p.b == DType::bf16) return p.m <= 16;
  const bool w8a8 = p.quantize_a && p.b == DType::i8;
  return groups_in_quads(p.b_group, p.k) && p.m <= (w8a8 ? 7 : 16);
}

// Splits N so that there are at least 4 tasks per core (cores drift in
// speed here; more, smaller tasks even out), in panel multiples, at most
// max_n wide. With one task of rows (an LLM's prefill: M up to a task's
// rows), in whole rounds over the cores where panels allow: 11 tasks of
// equal work on 2 cores end with one core idle for a task's time (f32 [128,
// 2048] x [2048, 11264], 2 threads, AMD EPYC Zen 3, 5 alternating runs, ms:
// 11 tasks of 1024 columns 36.1-38.5, 12 of 960 34.2-34.4). With more tasks
// of rows the same rounding split A's rows over more tasks for an even count
// (19 -> 38 at [4096, 320] x [320, 320]) and measured within noise.
std::int64_t n_block_for(const MatmulProblem& p, std::int64_t m_tasks, std::int64_t max_n, const hw::Info& hw) {
  m_tasks = std::max<std::int64_t>(m_tasks, 1);  // M = 0: no rows, no tasks, still a valid tiling
  const std::int64_t want = std::max<std::int64_t>(1, (4 * hw.cores + m_tasks - 1) / m_tasks);
  const std::int64_t n_block = std::clamp(round_up((p.n + want - 1) / want, kPanelCols), kPanelCols, std::max(kPanelCols, max_n));
  const std::int64_t balanced = balanced_block(p.n, n_block, kPanelCols);  // 320 at most 256 wide: 160 + 160, not 256 + 64
  if (m_tasks > 1 || p.n <= 0) return balanced;
  const std::int64_t panels = (p.n + kPanelCols - 1) / kPanelCols;
  std::int64_t n_tasks = (p.n + balanced - 1) / balanced;
  while (n_tasks % std::max(hw.cores, 1) != 0 && n_tasks < panels) ++n_tasks;
  return balanced_block(p.n, (p.n + n_tasks - 1) / n_tasks, kPanelCols);
}

// The register-blocked rows (f32, bf16 dot, int8 VNNI; gemm_blocked.hpp):
// 14-row micro-tiles, a task's rows in up to 16 of them; K in slices of
// `grain` (B's layout), sized in bytes of the `elem`-byte operands. One or
// two micro-tiles of rows (decode-like, B streamed from memory and used
// once or twice): B's panel slice (k_block x 32) and the 14-row A sliver
// streaming past it fill three quarters of L1 (f32, 48 KiB: 192 deep), so
// the second micro-tile finds the slice in L1. More rows (B reused from L3
// by many micro-tiles): the task's A slice (m_block x k_block) fills L2,
// and both streams come from L2. Each K slice costs a round trip of the
// partial sums and a repacking of A; 192-deep slices at M = 512 lost 5-7 %
// to them (Sapphire Rapids, f32, interleaved: 148 -> 155-158 GFLOP/s at 1
// thread with 700-1500 deep slices; whole K, 4096, was slower again: A
// from L3). With a quarter of L2 (AMD EPYC, 1 MiB: f32 288, bf16 576,
// int8 1024 deep at K 4096), the whole of it measured 1-5 % faster
// (M 128 / 512, alternating: f32 107 -> 109 GFLOP/s, bf16 211 -> 215-221,
// int8 395-414 -> 421-427 at 1 thread).
MatmulTiling blocked_tiling(const MatmulProblem& p, const hw::Info& hw, std::int64_t elem, std::int64_t grain) {
  const std::int64_t m_block = balanced_block(p.m, 16 * 14, 14);
  const std::int64_t l1_block = std::max<std::int64_t>(64, hw.l1d_bytes * 3 / 4 / ((kPanelCols + 14) * elem) / grain * grain);
  std::int64_t k_block = l1_block;
  // One micro-tile of rows: B is used once, so each panel streams whole from
  // memory as one sequential run instead of in slices. Two micro-tiles (up
  // to 28 rows) take slices: the second would re-read a whole panel from L2
  // after the first streamed it, while in slices both use it from L1 as the
  // next one arrives (measured at M = 16: 1.17-1.29x oneDNN, from 0.86-1.12x).
  if (p.m <= 14) k_block = std::max<std::int64_t>(p.k, 1);
  else if (p.m > 28) k_block = balanced_block(p.k, std::max(l1_block, hw.l2_bytes / (m_block * elem) / grain * grain), grain);
  const std::int64_t m_tasks = (p.m + m_block - 1) / m_block;
  return {m_block, n_block_for(p, m_tasks, 1024, hw), k_block};
}
MatmulTiling f32_tiling(const MatmulProblem& p, const hw::Info& hw) { return blocked_tiling(p, hw, 4, 16); }
MatmulTiling bf16_dot_tiling(const MatmulProblem& p, const hw::Info& hw) { return blocked_tiling(p, hw, 2, kBf16KStep); }
MatmulTiling int8_vnni_tiling(const MatmulProblem& p, const hw::Info& hw) { return blocked_tiling(p, hw, 1, kI8KStep); }

// AVX2 W8A8 (avx2/matmul_int8.cpp): 2-row micro-tiles read a panel's K
// slice once per row pair, so the slice (k_block x 32 bytes) takes half of
// L1 and the task's rows of A (m_block x k_block) stream from L2 past it.
MatmulTiling int8_avx2_tiling(const MatmulProblem& p, const hw::Info& hw) {
  const std::int64_t k_block = std::max(kI8KStep, hw.l1d_bytes / 2 / kPanelCols / kI8KStep * kI8KStep);
  const std::int64_t m_block = balanced_block(p.m, std::max<std::int64_t>(2, hw.l2_bytes / 2 / k_block / 2 * 2), 2);
  const std::int64_t m_tasks = (p.m + m_block - 1) / m_block;
  return {m_block, n_block_for(p, m_tasks, 1024, hw), k_block};
}

// AMX: 32 x 32 blocks of C (2 x 2 tiles). The K slice is 512 bytes of a
// row (bf16: 256, int8: 512), so a 32-row slice of A (16 KiB) and a panel
// step's B tiles (16 KiB) sit in L1 together. Per K slice a task packs its
// rows of A and streams its columns of B from L3 once, B then serving every
// 32-row block from L2: what comes from L3 per FLOP goes as 1/m_block +
// 1/n_block, so tasks are as tall as M allows (up to 512 rows) and as wide
// as keeps their f32 partial sums in a quarter of L2 (256 to 1024 columns).
// Measured against the former 128 x 1024 tasks, which refetched all of B
// for each 128 rows (bf16, interleaved in one process): M = 512 GEMMs
// 1.16-1.29x faster, 3x3 convs 1.04-1.22x at 1 thread and even at 2,
// M = 128 even.
MatmulTiling amx_tiling(const MatmulProblem& p, const hw::Info& hw, std::int64_t k_block) {
  const std::int64_t partial_floats = hw.l2_bytes / 4 / 4, n_pad = round_up(std::max<std::int64_t>(p.n, 1), kPanelCols);
  // Up to 1024 columns (convolutions' channels, narrow layers) a task takes
  // all of them, so A is packed once; wider B (an LLM's weights) first
  // takes as many rows as M has, up to 512.
  const std::int64_t max_m = n_pad <= 1024 ? std::clamp<std::int64_t>(partial_floats / n_pad / 16 * 16, 16, 512) : 512;
  const std::int64_t m_block = balanced_block(p.m, max_m, 16);
  const std::int64_t m_tasks = (p.m + m_block - 1) / m_block;
  const std::int64_t max_n = std::clamp<std::int64_t>(partial_floats / m_block / kPanelCols * kPanelCols, 256, 1024);
  return {m_block, n_block_for(p, m_tasks, max_n, hw), k_block};
}
MatmulTiling amx_bf16_tiling(const MatmulProblem& p, const hw::Info& hw) { return amx_tiling(p, hw, 256); }
MatmulTiling amx_int8_tiling(const MatmulProblem& p, const hw::Info& hw) { return amx_tiling(p, hw, 512); }

// The decode rows (matmul_decode.cpp, matmul_decode_vnni.cpp,
// matmul_quantized_vnni.cpp: up to 4 panels streamed side by side for one
// row of A) re-read the last panel of a task with fewer: at least 4 panels a
// task (int4 [1, 2048] x [2048, 256] split in 8 one-panel tasks did 4
// panels' arithmetic for each).
MatmulTiling panel_streams_tiling(const MatmulProblem& p, const hw::Info& hw) {
  MatmulTiling t = f32_tiling(p, hw);
  t.n_block = std::max(t.n_block, 4 * kPanelCols);
  return t;
}

}  // namespace

std::span<const KernelRow<MatmulFamily>> rows(MatmulFamily) {
  static const KernelRow<MatmulFamily> kRows[] = {
      {"matmul_decode_vnni", hw::Isa::avx512_bf16, int8_decode_supports, panel_streams_tiling, avx512_bf16::matmul_decode_vnni},
      {"matmul_i4_vnni", hw::Isa::avx512_bf16, i4_vnni_supports, panel_streams_tiling, avx512_bf16::matmul_i4_vnni},
      {"matmul_w8_vnni", hw::Isa::avx512_bf16, w8_vnni_supports, panel_streams_tiling, avx512_bf16::matmul_w8_vnni},
      {"matmul_decode_avx512", hw::Isa::avx512, decode_supports, panel_streams_tiling, avx512::matmul_decode},
      {"matmul_int8_amx", hw::Isa::amx, int8_supports, amx_int8_tiling, amx::matmul_int8},
      {"matmul_bf16_amx", hw::Isa::amx, amx_bf16_supports, amx_bf16_tiling, amx::matmul_bf16},
      {"matmul_i4_vnni", hw::Isa::avx512_bf16, i4_vnni_few_rows, panel_streams_tiling, avx512_bf16::matmul_i4_vnni},
      {"matmul_w8_vnni", hw::Isa::avx512_bf16, w8_vnni_few_rows, panel_streams_tiling, avx512_bf16::matmul_w8_vnni},
      {"matmul_int8_vnni", hw::Isa::avx512_bf16, int8_supports, int8_vnni_tiling, avx512_bf16::matmul_int8_vnni},
      {"matmul_bf16_dot", hw::Isa::avx512_bf16, bf16_dot_supports, bf16_dot_tiling, avx512_bf16::matmul_bf16_dot},
      {"matmul_f32_avx512", hw::Isa::avx512, f32_supports, f32_tiling, avx512::matmul_f32},
      {"matmul_decode_avx2", hw::Isa::avx2, decode_avx2_supports, panel_streams_tiling, avx2::matmul_decode},
      {"matmul_int8_avx2", hw::Isa::avx2, int8_supports, int8_avx2_tiling, avx2::matmul_int8},
      {"matmul_f32_avx2", hw::Isa::avx2, f32_supports, f32_tiling, avx2::matmul_f32},
      {"matmul_ref", hw::Isa::scalar, supports_all, f32_tiling, ref::matmul},
  };
  return kRows;
}

}  // namespace tessera::kernels
