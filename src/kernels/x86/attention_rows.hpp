#pragma once
// Addressing and prefetching the key / value rows of a KvSource, shared by
// the attention kernels of every x86 level (AVX2, AVX-512, AMX): nothing
// here needs more than SSE's prefetch. Static or in an unnamed namespace:
// each ISA translation unit keeps its own copy (see registry.hpp).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/attention.hpp"
#include "kernels/dispatch.hpp"
#include "kernels/x86/load1.hpp"
#include "kernels/x86/prefetch.hpp"

namespace tessera::kernels {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

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
  // Per run of the keys within one physical block: its table entry and
  // bases once, then a step per key.
  const std::int64_t k_step = kv.k_token_stride * elt, v_step = kv.v_token_stride * elt;
  for (std::int64_t i = 0, block = tb / kv.block_size, slot = tb % kv.block_size; i < n; ++block, slot = 0) {
    const std::int64_t physical = kv.block_table[block], run = std::min(n - i, kv.block_size - slot);
    const char* kr = k + (physical * kv.block_stride + slot * kv.k_token_stride) * elt;
    const char* vr = v + (physical * kv.block_stride + slot * kv.v_token_stride) * elt;
    for (std::int64_t j = 0; j < run; ++j) rows.k[i + j] = kr + j * k_step, rows.v[i + j] = vr + j * v_step;
    if (kv.k_scale) {
      const std::int64_t at = physical * kv.scale_block_stride + slot;
      std::copy(kv.k_scale + at, kv.k_scale + at + run, rows.k_scale + i);
      std::copy(kv.v_scale + at, kv.v_scale + at + run, rows.v_scale + i);
    }
    i += run;
  }
}

// The K and V rows of a block ahead, prefetched a few at a time while
// this block is converted and computed: a burst of prefetches would stall on
// the fill buffers, and without them the hardware prefetcher, which starts
// afresh on every page, leaves memory idle while the block is computed. The
// decode kernels tick() between keys, a row or two each time (pace spreads
// the block over the ticks): shares of ~60 lines, one per pass over a few
// rows, still filled the miss buffers and the core waited on them, so
// arithmetic and memory took turns instead of overlapping (AMD EPYC, Zen 4,
// bench attention decode_b1 kv4096, alternating: f32 13 -> 17-18 GB/s at 1
// thread, 17-23 -> 29-30 at 2; bf16 12.4-12.8 -> 15-16.5 at 1 thread). A
// row's lines go out together, at offsets known at compile time: a list of
// every line's address, loaded back one by one, cost ~80 instructions a key.
// Into L2 where L1 holds 32 KiB: two blocks ahead is 32 KiB of rows at f32
// D = 128 (int8 too: 64-key blocks), as much as that L1 holds, which then
// evicted them before use (AMD EPYC, Zen 4, bench attention decode_b1,
// alternating: f32 7-8 -> 10-12 GB/s at 1 thread, 13-15 -> 17-20 at 2;
// bf16 and int8 +10-30 %). Into L1 where it holds 48 KiB (the decode
// tiling's prefetch_l1): AMD EPYC Turin (Zen 5), decode_b1_kv4096,
// alternating, 5 rounds: f32 1.75 -> 1.61 ms at 1 thread, 1.06 -> 0.91 at
// 2; bf16 0.86 -> 0.81, 0.50 -> 0.42; int8 even (on Sapphire Rapids, also
// 48 KiB, the hint measured within noise). And into L1, the next block
// rather than the one after (add_block_ahead): the lines wait there for a
// block's time instead of two, crowding the rows in use less (Turin,
// alternating, 4 rounds, 1 / 2 threads: decode_b8_kv1024 f32 3.68 -> 3.15,
// 1.82 -> 1.64 ms, bf16 1.96 -> 1.54, 0.98 -> 0.86; decode_b1_kv16384 f32
// 8.3 -> 7.1, 4.1 -> 3.8, int8 2.1 -> 1.76; decode_b1_kv4096 within 5 %).
// The flash kernels take the same prefetcher with RowBytes 0, any head dim
// (`row_bytes` set at run time): their burst of every line of the next
// block at its start (rows a page apart: 512 lines at 32 keys of D = 128)
// stalled the loads that followed it, and measured no faster than no
// prefetch at all (f32 prefill S 512, 1 thread, alternating: 25.4-25.9 ms
// both ways, 24.9-25.1 with the shares).
// In an unnamed namespace: each ISA's translation unit keeps its own copy
// (member functions are implicitly inline, and `static` cannot be applied
// to a class).
namespace {
template <std::int64_t RowBytes, std::int64_t Keys>
struct Prefetcher {
  const char* row[2 * Keys];  // K and V rows, interleaved
  int count = 0, next = 0;
  std::int64_t row_bytes = RowBytes;
  const bool to_l1;
  explicit Prefetcher(bool prefetch_l1) : to_l1(prefetch_l1) {}
  // The decode kernels' rows to fetch while the block from tb is computed:
  // the next block's into L1, the one after next's into L2 (see above), up
  // to t_end.
  void add_block_ahead(const KvSource& kv, std::int64_t tb, std::int64_t t_end) {
    const std::int64_t ahead = tb + (to_l1 ? 1 : 2) * Keys;
    add_rows(kv, ahead, std::clamp<std::int64_t>(t_end - ahead, 0, Keys));
  }
  void add_rows(const KvSource& kv, std::int64_t tb, std::int64_t n) {
    count = next = 0;
    KvRows<Keys> rows;  // the addresses as the kernel gathers them: no division per key
    gather_rows(kv, tb, n, rows);
    for (std::int64_t i = 0; i < n; ++i) {
      row[count++] = static_cast<const char*>(rows.k[i]);
      row[count++] = static_cast<const char*>(rows.v[i]);
    }
  }
  // Issues the next share: `of` shares make up the block.
  void issue(int share, int of) { issue_to(int((std::int64_t(count) * (share + 1) + of - 1) / of)); }
  // Spreads the block's rows over the next `ticks` calls of tick() (16.16
  // fixed point: no division per tick).
  void pace(int ticks) {
    step = (std::int64_t(count) << 16) / std::max(ticks, 1) + 1;
    due = std::int64_t(next) << 16;
  }
  void tick() {
    due += step;
    issue_to(int(due >> 16));
  }

 private:
  std::int64_t step = 0, due = 0;
  void issue_to(int end) {
    int i = next;
    for (end = std::min(end, count); i < end; ++i)
      for (std::int64_t b = 0; b < (RowBytes > 0 ? RowBytes : row_bytes); b += 64)
        to_l1 ? _mm_prefetch(row[i] + b, _MM_HINT_T0) : _mm_prefetch(row[i] + b, _MM_HINT_T1);
    next = i;
  }
};
}  // namespace

// The end of the keys up to t1 that any of the unit's rows sees: causal,
// keys past the last row's limit are never visible.
static inline std::int64_t visible_keys_end(const AttentionArgs& a, std::int64_t t1) {
  const std::int64_t positions = (a.rows + a.group - 1) / a.group;
  return a.causal ? std::min(t1, positions - 1 + a.causal_offset + 1) : t1;
}

// ------------------------------------------------------------------ decode

// The visible key range and mask row of each query row, fixed for the unit.
struct RowView {
  std::int64_t limit;  // keys t < limit are visible (causal)
  const void* mask;    // at key 0, or nullptr
};

constexpr std::int64_t kMaxRows = 16;

// The keys [tb, tb + n) of a decode block of N: their rows (those past n
// read `zero`), the rows of a block ahead for the prefetcher, and
// how many of the block's keys each row sees. Returns n.
template <int N, class Prefetch>
static inline std::int64_t start_block(const AttentionArgs& a, const RowView* view, std::int64_t tb, std::int64_t t_end,
                                       const void* zero, KvRows<N>& block, Prefetch& pf, std::int64_t* valid) {
  const std::int64_t n = std::min<std::int64_t>(N, t_end - tb);
  gather_rows(a.kv, tb, n, block);
  pf.add_block_ahead(a.kv, tb, t_end);
  for (std::int64_t i = n; i < N; ++i) block.k[i] = block.v[i] = zero;
  for (std::int64_t r = 0; r < a.rows; ++r) valid[r] = std::clamp<std::int64_t>(view[r].limit - tb, 0, n);
  return n;
}

// A decode block's rows in passes of 4, 2 or 1 rows (the kernels' sums for
// up to 4 rows fill the registers): pass(r, pr) for each, pr a
// std::integral_constant.
template <class Pass>
static inline void for_row_passes(std::int64_t rows, Pass&& pass) {
  for (std::int64_t r = 0; r < rows;) {
    const std::int64_t left = rows - r;
    if (left >= 4) pass(r, std::integral_constant<int, 4>()), r += 4;
    else if (left >= 2) pass(r, std::integral_constant<int, 2>()), r += 2;
    else pass(r, std::integral_constant<int, 1>()), r += 1;
  }
}

// Row r of a unit as its query position and head within the kv head's
// group, stepped row by row (next()): the group is a run-time value, and a
// division per row and address (q, the output, a limit: ~8 a row and task)
// is ~15 cycles where cross-attention's 77 keys give a row ~300 of work.
struct UnitRow {
  std::int64_t pos, head;
  UnitRow(const AttentionArgs& a, std::int64_t r) : pos(r / a.group), head(r % a.group) {}
  void next(const AttentionArgs& a) {
    if (++head == a.group) head = 0, ++pos;
  }
};

// A row's additive mask from key t, or nullptr.
static inline const void* mask_row(const AttentionArgs& a, UnitRow u, std::int64_t t) {
  if (!a.mask) return nullptr;
  return advance(a.mask, a.mask_dtype, u.pos * a.mask_pos_stride + u.head * a.mask_head_stride + t * a.mask_key_stride);
}

// The rows' views for keys up to t1 (q rows and the output go by the same
// position and head); returns the end of the keys any row sees.
static inline std::int64_t decode_views(const AttentionArgs& a, std::int64_t t1, RowView* view) {
  const std::int64_t t_end = visible_keys_end(a, t1);
  UnitRow u(a, 0);
  for (std::int64_t r = 0; r < a.rows; ++r, u.next(a)) {
    view[r].limit = a.causal ? std::min(t_end, u.pos + a.causal_offset + 1) : t_end;
    view[r].mask = mask_row(a, u, 0);
  }
  return t_end;
}

// A row's query. `q`: a.q, or a.next_q for the next task's rows.
static inline const void* q_row(const AttentionArgs& a, UnitRow u, const void* q) {
  return advance(q, a.q_dtype, u.pos * a.q_pos_stride + u.head * a.q_head_stride);
}
static inline const void* q_row(const AttentionArgs& a, std::int64_t r) { return q_row(a, UnitRow(a, r), a.q); }

// The lines of every row of the unit's q, requested into L2 at a flash
// task's start: the rows are usually a page apart ([B, S, H, D]) and read
// once, so all of them are asked for before the first is needed (the
// previous task asked for them too, prefetch_task_ends).
static inline void prefetch_q_rows(const AttentionArgs& a) {
  UnitRow u(a, 0);
  for (std::int64_t r = 0; r < a.rows; ++r, u.next(a))
    prefetch_lines<_MM_HINT_T1>(static_cast<const char*>(q_row(a, u, a.q)), a.head_dim * bytes_of(a.q_dtype));
}

// A row of the final output (as q_row).
static inline char* out_row(const AttentionArgs& a, const AttentionOutput& out, UnitRow u) {
  return static_cast<char*>(advance(out.o, out.o_dtype, u.pos * out.o_pos_stride + u.head * out.o_head_stride));
}

// Requests a row of the final output (none for a split piece) ahead of
// finish_rows, from the flash kernels' last key block: the rows are a
// position apart, out of the hardware prefetcher's sight, and requested a
// few rows ahead within finish_rows their misses stalled it.
__attribute__((always_inline)) static inline void prefetch_out_row(const AttentionArgs& a, const AttentionOutput& out, UnitRow u) {
  if (!out.partial_o) prefetch_lines<_MM_HINT_T1>(out_row(a, out, u), a.head_dim * bytes_of(out.o_dtype));
}

// What the flash kernels request per row r (at u) in their last key block:
// the row's output lines and the next task's row r of q
// (AttentionArgs::next_q). Few keys per row (cross-attention's 77) left the
// misses of both exposed at the task's ends.
__attribute__((always_inline)) static inline void prefetch_task_ends(const AttentionArgs& a, const AttentionOutput& out, std::int64_t r,
                                                                     UnitRow u) {
  prefetch_out_row(a, out, u);
  if (r < a.next_rows) prefetch_lines<_MM_HINT_T1>(static_cast<const char*>(q_row(a, u, a.next_q)), a.head_dim * bytes_of(a.q_dtype));
}

// f(units, type) for a decode row's head dim and KV type, as the decode
// kernels are compiled: units a std::integral_constant<int, head dim / 16>
// (the head dims of kernels/attention.cpp's decode_head_dims), type a
// std::integral_constant<DType, ...> (f32, bf16 or i8).
template <class F>
static inline void dispatch_decode(std::int64_t head_dim, DType kv, F&& f) {
  const auto by_type = [&](auto units) {
    switch (kv) {
      case DType::bf16: return f(units, std::integral_constant<DType, DType::bf16>());
      case DType::i8: return f(units, std::integral_constant<DType, DType::i8>());
      default: return f(units, std::integral_constant<DType, DType::f32>());
    }
  };
  switch (head_dim) {
    case 64: return by_type(std::integral_constant<int, 4>());
    case 80: return by_type(std::integral_constant<int, 5>());
    case 96: return by_type(std::integral_constant<int, 6>());
    case 128: return by_type(std::integral_constant<int, 8>());
    default: return by_type(std::integral_constant<int, 16>());
  }
}

// A split-KV piece's state into `out` (set when out.partial_o is): the
// unnormalized sums o [rows][head dim] (rows `o_stride` apart), each row's
// running max m and sum l.
static inline void store_partial(const AttentionArgs& a, const AttentionOutput& out, const float* o, std::int64_t o_stride,
                                 const float* m, const float* l) {
  for (std::int64_t r = 0; r < a.rows; ++r) std::copy(o + r * o_stride, o + r * o_stride + a.head_dim, out.partial_o + r * a.head_dim);
  std::copy(m, m + a.rows, out.partial_m);
  std::copy(l, l + a.rows, out.partial_l);
}

// The flash kernels' walks over a unit's rows, which go by position: a
// later row sees at least the keys an earlier one does, so a tile of rows
// needs what its last row sees. `visible[r]`: the keys of the block row r sees.
//
// Scores of chunk c (keys from c, of a block of n) in slivers of Per rows:
// f(r, rows, keys) for each sliver [r, r + rows) whose last row sees any key
// of the chunk, `keys` of them from c (under a causal mask the chunks past
// the diagonal are skipped, not computed and then masked).
template <std::int64_t Per, class F>
static inline void for_visible_slivers(std::int64_t rows, std::int64_t c, std::int64_t n, const std::int64_t* visible, F&& f) {
  for (std::int64_t r = 0; r < rows; r += Per) {
    const std::int64_t rr = std::min(Per, rows - r), keys = std::min(n, visible[r + rr - 1]) - c;
    if (keys > 0) f(r, rr, keys);
  }
}

// Rows [0, rows) in tiles of RR, the last one of fewer: f(R, r, keys) with R
// a std::integral_constant<int, rows of the tile> and `keys` what its last
// row sees.
template <int RR, class F>
static inline void for_row_tiles(std::int64_t rows, const std::int64_t* visible, F&& f) {
  std::int64_t r = 0;
  for (; r + RR <= rows; r += RR) f(std::integral_constant<int, RR>{}, r, visible[r + RR - 1]);
  if constexpr (RR > 1)
    if (r < rows) dispatch_count<RR - 1>(rows - r, [&](auto tile) { f(tile, r, visible[rows - 1]); });
}

}  // namespace tessera::kernels
