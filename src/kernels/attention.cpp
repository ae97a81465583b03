#include "kernels/attention.hpp"

#include <algorithm>

#include "kernels/tiling.hpp"

namespace tessera::kernels {

namespace {

// Head dims up to 512 (SD's VAE attends in one head of 512: the scalar row
// took 0.9 s at 1024 tokens where these take 6-13 ms, AMD EPYC, 2 threads).
bool simd_supported(const AttentionProblem& p) {
  const auto is_float = [](DType t) { return t == DType::f32 || t == DType::bf16; };
  return is_float(p.q) && is_float(p.o) && (is_float(p.kv) || p.kv == DType::i8) && p.head_dim <= 512;
}
// Decode shape: few query positions, keys that may be split across cores.
bool decode_shape(const AttentionProblem& p) { return p.positions <= 8 && p.split_allowed; }
// The decode kernels keep the state of up to 16 rows (positions × group)
// and are compiled for the common head dims (AVX-512 keeps q in registers;
// both unroll their loops and prefetches by the row's size). Other decode
// shapes take the flash kernels, split like decode.
bool decode_head_dims(const AttentionProblem& p) {
  const std::int64_t d = p.head_dim;
  return simd_supported(p) && decode_shape(p) && p.positions * p.group <= 16 &&
         (d == 64 || d == 80 || d == 96 || d == 128 || d == 256);
}

// int8 KV in integer dot products (avx512_bf16 level: VNNI): q quantized
// per row, P per block; the decode row's head dims of whole 64-byte rows.
bool decode_vnni(const AttentionProblem& p) {
  return decode_head_dims(p) && p.kv == DType::i8 && p.head_dim % 64 == 0;
}

// bf16 q and KV in bf16 dot products (avx512_bf16 level), head dims of
// whole 64-byte rows. f32 q stays on the f32 row even under FpMath::bf16:
// against a cache past the L3 (a model's layers evict each other's) that
// row, widening bf16 in place, measured faster (AMD EPYC, Zen 4, paged
// bf16 kv4096, 8 kv heads, 1 thread, alternating: 0.90 against 0.97 ms; 2
// threads even), though from L3 it takes 1.8x as long.
bool decode_bf16_dot(const AttentionProblem& p) {
  return decode_head_dims(p) && p.q == DType::bf16 && p.kv == DType::bf16 && p.head_dim % 32 == 0;
}

// q rounded to bf16 by the flash kernels: bf16 q, or f32 q under
// FpMath::bf16 (prefill is compute-bound: f32 q, Sq 256 against a paged
// bf16 cache of 4096 tokens, 1 thread, 167 -> 92 ms).
bool bf16_q(const AttentionProblem& p) { return p.q == DType::bf16 || (p.q == DType::f32 && p.bf16_math); }

// Blocks of query rows per task: as many as keep their state (`row_bytes`
// each: q, the f32 sums, a row of scores) within `budget` bytes, a power of
// two from 16 up to `max_rows`; smaller when that leaves fewer than 4 tasks
// per thread.
AttentionTiling row_blocks(const AttentionProblem& p, std::int64_t budget, std::int64_t row_bytes, std::int64_t max_rows) {
  std::int64_t rows = 16;
  while (rows < max_rows && 2 * rows * row_bytes <= budget) rows *= 2;
  std::int64_t positions = std::max<std::int64_t>(1, rows / std::max<std::int64_t>(1, p.group));
  while (positions > 1 && p.units * ((p.positions + positions - 1) / positions) < 4 * p.threads) positions /= 2;
  return {positions, 0};
}

// Up to 256 rows (as many as the rows' state allows in a quarter of L2, but
// see below): each block of K and V, transposed (f32) or packed into tiles
// (AMX) per task, then serves more rows. Measured interleaved, 1 thread, against 64 rows
// (f32) / 128 (AMX): f32 prefill S = 1024 (d 128, 128 rows) 148 -> 132 ms,
// S = 4096 (d 64) 244 -> 219 ms; AMX d 64 3-4 % faster.
// The f32 rows may fill all of L2 when the K and V of the kv heads the
// threads work on at once are past the L3: each task streams them from
// memory then, and too few rows per task left it waiting on memory (SD
// VAE's attention in one head of 512 over 4096 tokens, 1 thread,
// alternating, 4 rounds: 32 rows 274-302 ms, 128 rows 227-237; with the
// transposed K block on top, 1.1 MiB of a 1 MiB L2). The bf16 kernel
// measured slower so (114-118 -> 137-139 ms).
AttentionTiling flash_tiling(const AttentionProblem& p, const hw::Info& hw) {
  const std::int64_t kv_head_bytes = 2 * p.kv_len * p.head_dim * std::int64_t(bytes_of(p.kv));
  const bool kv_in_memory = std::min(p.units, std::max<std::int64_t>(1, p.threads)) * kv_head_bytes > hw.l3_bytes;
  return row_blocks(p, kv_in_memory ? hw.l2_bytes : hw.l2_bytes / 4, 8 * p.head_dim + 4 * 128, 256);
}
AttentionTiling bf16_flash_tiling(const AttentionProblem& p, const hw::Info& hw) {
  return row_blocks(p, hw.l2_bytes / 4, 6 * p.head_dim + 6 * 64, 256);
}

AttentionTiling decode_tiling(const AttentionProblem& p, const hw::Info& hw) {
  // Enough pieces for 4 tasks per thread (dynamic scheduling evens them
  // out), each at least 256 keys so the merge and per-task set-up stay small.
  constexpr std::int64_t kMinKeys = 256;
  const std::int64_t splits = std::max<std::int64_t>(1, (4 * p.threads + p.units - 1) / std::max<std::int64_t>(1, p.units));
  std::int64_t keys = (p.kv_len + splits - 1) / splits;
  keys = std::max(kMinKeys, (keys + 31) / 32 * 32);
  // The Prefetcher's next block (x86/attention_rows.hpp).
  return {std::max<std::int64_t>(1, p.positions), keys >= p.kv_len ? 0 : keys, prefetch_next_into_l1(hw)};
}

// The bf16 flash kernels (AMX tiles, AVX512-BF16 dot products on the same
// tile layouts): bf16 q (bf16_q), k and v. The dot-product kernel's layouts
// pad D to a multiple of 32 with zeros, whose pair steps and columns it
// skips (SD 1.x's heads of 40 and 80); the AMX row takes whole multiples
// only, up to 256.
bool bf16_qkv(const AttentionProblem& p) {
  return bf16_q(p) && p.kv == DType::bf16 && (p.o == DType::f32 || p.o == DType::bf16) && p.head_dim <= 512;
}
bool bf16_qkv_tiles(const AttentionProblem& p) { return bf16_qkv(p) && p.head_dim % 32 == 0 && p.head_dim <= 256; }

// Many rows with decode's few positions (e.g. MQA): the flash kernel, split like decode.
AttentionTiling flash_or_split_tiling(const AttentionProblem& p, const hw::Info& hw) {
  return decode_shape(p) ? decode_tiling(p, hw) : flash_tiling(p, hw);
}
AttentionTiling bf16_or_split_tiling(const AttentionProblem& p, const hw::Info& hw) {
  return decode_shape(p) ? decode_tiling(p, hw) : bf16_flash_tiling(p, hw);
}

// The AVX2 kernel's rows take the whole of L2 whatever the keys: its 16
// registers hold only 6 rows' scores, so each K and V block, transposed and
// converted per task, serves more rows so (AMD EPYC, Zen 2, 512 KiB L2: 64
// rows at D 128 -> 256; bench attention, alternating, 2 rounds, ms at 1 / 2
// threads: prefill_s1024_hkv8 f32 150 / 78 -> 136 / 70, bf16 138 / 73 ->
// 127 / 68; prefill_s512_hkv8 f32 40 / 21 -> 37 / 19; cross even; half of
// L2, 128 rows, in between).
AttentionTiling avx2_flash_tiling(const AttentionProblem& p, const hw::Info& hw) {
  return decode_shape(p) ? decode_tiling(p, hw) : row_blocks(p, hw.l2_bytes, 8 * p.head_dim + 4 * 128, 256);
}

// Soft-capped logits (AttentionProblem::softcap) take the AVX2 rows and the
// reference: the AVX-512, AVX512-BF16 and AMX rows have no capping step yet
// (on the machines that have them, it would be written and tested there).
template <bool (*Supports)(const AttentionProblem&)>
bool uncapped(const AttentionProblem& p) {
  return !p.softcap && Supports(p);
}

}  // namespace

std::span<const KernelRow<AttentionFamily>> rows(AttentionFamily) {
  static const KernelRow<AttentionFamily> kRows[] = {
      {"attention_decode_vnni", hw::Isa::avx512_bf16, uncapped<decode_vnni>, decode_tiling, avx512_bf16::attention_decode_vnni},
      {"attention_decode_bf16_dot", hw::Isa::avx512_bf16, uncapped<decode_bf16_dot>, decode_tiling, avx512_bf16::attention_decode_bf16_dot},
      {"attention_decode_avx512", hw::Isa::avx512, uncapped<decode_head_dims>, decode_tiling, avx512::attention_decode},
      {"flash_attention_bf16_amx", hw::Isa::amx, uncapped<bf16_qkv_tiles>, bf16_or_split_tiling, amx::flash_attention_bf16},
      {"flash_attention_bf16_dot", hw::Isa::avx512_bf16, uncapped<bf16_qkv>, bf16_or_split_tiling, avx512_bf16::flash_attention_bf16_dot},
      {"flash_attention_avx512", hw::Isa::avx512, uncapped<simd_supported>, flash_or_split_tiling, avx512::flash_attention},
      {"attention_decode_avx2", hw::Isa::avx2, decode_head_dims, decode_tiling, avx2::attention_decode},
      {"flash_attention_avx2", hw::Isa::avx2, simd_supported, avx2_flash_tiling, avx2::flash_attention},
      {"attention_decode_ref", hw::Isa::scalar, decode_shape, decode_tiling, ref::attention},
      {"flash_attention_ref", hw::Isa::scalar, supports_all, flash_tiling, ref::attention},
  };
  return kRows;
}

}  // namespace tessera::kernels
