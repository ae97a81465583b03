#pragma once
// Pieces shared by the AVX-512 attention kernels (flash and decode): reading
// key / value rows of a KvSource as f32, the additive mask, and writing a
// unit's final rows or its split-KV piece. Static, like vec.hpp.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/attention.hpp"
#include "kernels/x86/load1.hpp"
#include "kernels/x86/avx512/vec.hpp"

namespace tessera::kernels::avx512 {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// 16 features of one key or value row as f32 (int8: times the token's
// scale); features outside `mask` (past the head dim) read as 0.
static inline __m512 load_kv16(const void* row, DType t, std::int64_t d, float scale, __mmask16 mask = 0xffff) {
  if (t == DType::i8) {
    const __m128i q = _mm_maskz_loadu_epi8(mask, static_cast<const std::int8_t*>(row) + d);
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), _mm512_set1_ps(scale));
  }
  return load16(advance(row, t, d), t, mask);
}

// Addresses (and int8 scales) of keys [tb, tb + n): one division for the
// first key, then slots are stepped, since paged runs are block_size long.
template <int N>
struct KvRows {
  const void* k[N];
  const void* v[N];
  float k_scale[N], v_scale[N];
};

template <int N>
static inline void gather_rows(const KvSource& kv, std::int64_t tb, std::int64_t n, KvRows<N>& rows) {
  const std::int64_t elt = bytes_of(kv.dtype);
  const auto* k = static_cast<const char*>(kv.k);
  const auto* v = static_cast<const char*>(kv.v);
  if (!kv.block_table) {
    for (std::int64_t i = 0; i < n; ++i) {
      rows.k[i] = k + (tb + i) * kv.k_token_stride * elt;
      rows.v[i] = v + (tb + i) * kv.v_token_stride * elt;
    }
    return;
  }
  std::int64_t block = tb / kv.block_size, slot = tb % kv.block_size;
  for (std::int64_t i = 0; i < n; ++i, ++slot) {
    if (slot == kv.block_size) ++block, slot = 0;
    const std::int64_t physical = kv.block_table[block];
    rows.k[i] = k + (physical * kv.block_stride + slot * kv.k_token_stride) * elt;
    rows.v[i] = v + (physical * kv.block_stride + slot * kv.v_token_stride) * elt;
    if (kv.k_scale) {
      rows.k_scale[i] = kv.k_scale[physical * kv.scale_block_stride + slot];
      rows.v_scale[i] = kv.v_scale[physical * kv.scale_block_stride + slot];
    }
  }
}

// Software prefetch for the keys of a later block [tb, tb + n). Rows that
// follow each other in memory (paged blocks, [B, H, S, D]) are streamed by
// the hardware prefetcher once it sees the start of a run, so touching the
// first lines of each run is enough and keeps the fill buffers free for the
// demand loads; rows a page apart ([B, S, H, D]) are fetched whole.
static inline void prefetch_rows(const KvSource& kv, const void* base, std::int64_t token_stride, std::int64_t tb,
                                 std::int64_t n, std::int64_t row_bytes) {
  const std::int64_t elt = bytes_of(kv.dtype);
  const bool runs = token_stride * elt == row_bytes;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t t = tb + i;
    if (runs && i > 0 && (!kv.block_table || t % kv.block_size != 0)) continue;  // not the start of a run
    const char* row = static_cast<const char*>(base) + kv_token_offset(kv, t, token_stride) * elt;
    for (std::int64_t b = 0; b < (runs ? 192 : row_bytes); b += 64) _mm_prefetch(row + b, _MM_HINT_T0);
  }
}

// The additive mask of one row for `count` <= 16 keys from `row` (zeros past count).
static inline __m512 load_mask16(const AttentionArgs& a, const void* row, std::int64_t count) {
  if (a.mask_key_stride == 1) return load16(row, a.mask_dtype, tail_mask(count));
  alignas(64) float v[16] = {};
  for (std::int64_t i = 0; i < count; ++i) v[i] = load1(row, a.mask_dtype, i * a.mask_key_stride);
  return _mm512_load_ps(v);
}

// The unit's result from its row state: o sums [rows][dim] (row stride
// o_stride >= dim), running max m and sum l.
static inline void finish_rows(const AttentionArgs& a, const AttentionOutput& out, const float* o, std::int64_t o_stride,
                               const float* m, const float* l) {
  const std::int64_t rows = a.rows, dim = a.head_dim;
  if (out.partial_o) {
    for (std::int64_t r = 0; r < rows; ++r) std::copy(o + r * o_stride, o + r * o_stride + dim, out.partial_o + r * dim);
    std::copy(m, m + rows, out.partial_m);
    std::copy(l, l + rows, out.partial_l);
    return;
  }
  // Output rows are a position apart (2 KiB and more), so the hardware
  // prefetcher does not see them: each row's stores waited on their lines'
  // reads. Asked for 4 rows ahead: cross-attention f32 (S_q 4096, S_kv 77)
  // 10-13 % faster.
  const std::int64_t row_bytes = dim * bytes_of(out.o_dtype);
  const auto out_row = [&](std::int64_t r) {
    return static_cast<char*>(advance(out.o, out.o_dtype, (r / a.group) * out.o_pos_stride + (r % a.group) * out.o_head_stride));
  };
  for (std::int64_t r = 0; r < rows; ++r) {
    if (r + 4 < rows)
      for (std::int64_t b = 0; b < row_bytes; b += 64) _mm_prefetch(out_row(r + 4) + b, _MM_HINT_T0);
    const std::int64_t pos = r / a.group, head = r % a.group;
    const bool empty = l[r] == 0.0f;  // a NaN sum stays NaN, as in the reference
    const __m512 inv = _mm512_set1_ps(empty ? 0.0f : 1.0f / l[r]);
    char* orow = out_row(r);
    for (std::int64_t d = 0; d < dim; d += 16) {
      const __mmask16 mask = tail_mask(dim - d);
      store16(advance(orow, out.o_dtype, d), out.o_dtype, _mm512_mul_ps(inv, _mm512_maskz_loadu_ps(mask, o + r * o_stride + d)), mask);
    }
    if (out.lse) out.lse[pos * out.lse_pos_stride + head * out.lse_head_stride] = empty ? kNegInf : m[r] + std::log(l[r]);
  }
}

}  // namespace tessera::kernels::avx512
