// Flash attention on AVX2 + FMA (f32 compute), one unit of query rows
// against a range of keys: the AVX-512 kernel's blocks on 8 lanes and 16
// registers. Per block of up to 128 keys (whole 16-key chunks):
//   1. K is converted to f32 and transposed 8 x 8 in registers into
//      kt[D][keys], so the score tile S = Q · Kᵀ is a small GEMM: q
//      broadcast from slivers of 6 rows, FMAs on rows of kt.
//   2. Online softmax, 8 rows at a time: new max, rescale factor alpha,
//      p = 2^(s - max), the scores in log2 units (q scaled by log2 e).
//   3. O = alpha · O + P · V, 16 features of 6 rows in registers across the
//      block's keys, V copied (converted from bf16 / int8) first.
// Decode shapes (a few positions, keys split across cores) go to
// attention_decode.cpp, which reads K and V in place; those of more than 16
// rows or of head dims not a multiple of 16 take this kernel, split the
// same way.
// Any head dim up to 512: q, kt, V and O are held padded with zeros to a
// multiple of 8 features (SD 1.x's 40-wide heads).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/scratch.hpp"
#include "kernels/x86/avx2/attention_common.hpp"

namespace tessera::kernels::avx2 {

namespace {

constexpr std::int64_t kKeys = 16;  // keys per chunk of scores: two vectors
// Keys per block, as the AVX-512 kernel (see there): fewer online updates
// and K transposes per key. Units of few rows (decode) take 16, whose
// converted K and V (8 KiB each at D = 128) stay in a 32 KiB L1 beside the
// rows still arriving (with reading each K row whole and copying V, see
// convert_block; AMD EPYC, Zen 2, bench attention, alternating, 3 rounds, ms
// at 1 thread, 128 keys -> 32: decode_b1_kv4096 f32 6.25-6.36 -> 5.75-5.93,
// bf16 5.44-5.59 -> 5.09-5.20, kv16384 f32 25.2-34.2 -> 22.4-23.2;
// prefill_s512 f32 48-50 -> 45-47, cross even; 32 -> 16, 2 rounds, 1 / 2
// threads: decode_b1_kv4096 f32 4.12-4.48 / 2.33-2.54 -> 3.55-4.04 /
// 2.05-2.36, bf16 3.17-3.22 -> 2.78-2.81 at 1 thread, even at 2;
// decode_b8_kv1024 f32 8.6-9.0 -> 7.3-8.6, bf16 6.5 -> 5.8). int8 caches
// keep 32: their 128-byte rows measured 1-3 % slower at 16.
constexpr std::int64_t kBlockKeys = 128;
constexpr std::int64_t kFewRows = 16, kFewRowsBlockKeys = 16, kFewRowsInt8BlockKeys = 32;
// Rows of q per sliver: 6 rows x 2 vectors of accumulators, 2 of kt and a
// broadcast take 15 of the 16 registers. Slivers are stored d-major, a whole
// vector per feature ([D][8], the last two zeros) as the 8 x 8 transpose that
// fills them leaves it.
constexpr std::int64_t kScoreRows = 6, kSliverStride = 8;
// Prefetch ticks a chunk of scores counts for (see the block loop).
constexpr int kChunkTicks = 32;
// q's rows past a unit's last, for whole 8 x 8 transposes: zeros of any head dim and type.
alignas(32) constexpr float kZeroRow[512] = {};

// n <= 8 features from d of one key or value row of storage type T as f32
// (int8: times the token's scale), zeros past n. The type is fixed at
// compile time: switched per load, the 8 rows of a transpose went through
// the stack and the loads ran at a fraction of the rate (perf: half of the
// kernel's time on two loads, with K and V in L2).
template <DType T>
static inline __m256 load_kv8(const void* row, std::int64_t d, float scale, std::int64_t n) {
  if constexpr (T == DType::i8) {
    const auto* p = static_cast<const std::int8_t*>(row) + d;
    __m128i bytes;
    if (n >= 8) {
      bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    } else {
      std::int64_t tail = 0;
      std::memcpy(&tail, p, std::size_t(n));
      bytes = _mm_cvtsi64_si128(tail);
    }
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)), _mm256_set1_ps(scale));
  } else {
    const void* at = advance(row, T, d);
    if (n < 8) return load8_tail(at, T, n);
    if constexpr (T == DType::bf16)
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(static_cast<const __m128i*>(at))), 16));
    else
      return _mm256_loadu_ps(static_cast<const float*>(at));
  }
}

// The block's n keys as the kernel computes with them: K transposed into
// kt[d][key] (keys past n, to the next 8, zero), 8 keys at a time, each
// key's row read whole (rather than 8 passes over all the block's rows, 8
// features each: in [B, S, H, D] layouts those rows lie a token apart, in
// the same cache sets); V converted or copied into vb rows `dim` apart (f32
// too: P V reads 16 features of every key per chunk, from one buffer; f32 V
// rows read in place measured slower, bench attention, alternating, 3
// rounds, 1 thread, decode_b1_kv4096 4.38 -> 4.81 ms, prefill_s512 34.0 ->
// 37.3, AMD EPYC Zen 2).
// tick() after each transpose.
template <DType T, class Tick>
static void convert_block(const KvRows<kBlockKeys>& block, std::int64_t n, std::int64_t head_dim, std::int64_t dim,
                          std::int64_t width, float* kt, float* vb, Tick&& tick) {
  for (std::int64_t h = 0; 8 * h < n; ++h) {
    const std::int64_t keys = std::min<std::int64_t>(8, n - 8 * h);
    for (std::int64_t d = 0; d < head_dim; d += 8) {
      __m256 r[8];
      for (std::int64_t i = 0; i < 8; ++i) {
        const std::int64_t key = 8 * h + i;
        r[i] = keys == 8 || i < keys ? load_kv8<T>(block.k[key], d, block.k_scale[key], head_dim - d) : _mm256_setzero_ps();
      }
      transpose8x8(r);
      for (std::int64_t j = 0; j < 8; ++j) _mm256_store_ps(kt + (d + j) * width + 8 * h, r[j]);
      tick();
    }
  }
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t d = 0; d < head_dim; d += 8)
      _mm256_store_ps(vb + i * dim + d, load_kv8<T>(block.v[i], d, block.v_scale[i], head_dim - d));
}

// S[RR rows][8 H] = Q[RR][D] · kt[D][8 H]; kt and S rows are `width` floats apart.
template <int RR, int H>
static void score_tile(const float* q, std::int64_t features, const float* kt, float* s, std::int64_t width) {
  __m256 acc[RR][H];
  for (int i = 0; i < RR; ++i)
    for (int h = 0; h < H; ++h) acc[i][h] = _mm256_setzero_ps();
  for (std::int64_t d = 0; d < features; ++d) {
    __m256 k[H];
    for (int h = 0; h < H; ++h) k[h] = _mm256_load_ps(kt + d * width + 8 * h);
    for (int i = 0; i < RR; ++i) {
      const __m256 b = _mm256_broadcast_ss(q + d * kSliverStride + i);
      for (int h = 0; h < H; ++h) acc[i][h] = _mm256_fmadd_ps(b, k[h], acc[i][h]);
    }
  }
  for (int i = 0; i < RR; ++i)
    for (int h = 0; h < H; ++h) _mm256_store_ps(s + i * width + 8 * h, acc[i][h]);
}

// The scores of chunk c (16 keys, or the block's last n - c) for every
// sliver of rows that sees any of them, by as many of its two 8-key halves
// as the sliver's last row sees; over the head's features only (q's padding
// features are zeros).
static void score_rows(const float* q, std::int64_t rows, std::int64_t dim, std::int64_t head_dim, const float* kt, float* s,
                       std::int64_t width, std::int64_t c, std::int64_t n, const std::int64_t* visible) {
  for_visible_slivers<kScoreRows>(rows, c, n, visible, [&](std::int64_t r, std::int64_t rr, std::int64_t keys) {
    dispatch_count<kScoreRows>(rr, [&](auto tile) {
      const float* sliver = q + r / kScoreRows * kSliverStride * dim;
      if (keys <= 8) score_tile<tile(), 1>(sliver, head_dim, kt + c, s + r * width + c, width);
      else score_tile<tile(), 2>(sliver, head_dim, kt + c, s + r * width + c, width);
    });
  });
}

// O[RR][c : c + 8 NV] = alpha · O + P[RR][0 : n] · V[0 : n][c : c + 8 NV],
// V's rows `dim` apart: per key, NV vectors of V, then a broadcast of each
// row's p (RR NV accumulators + NV + 1 <= 16 registers).
template <int RR, int NV>
static void pv_tile(const float* p, std::int64_t width, const float* alpha, float* o, std::int64_t dim,
                    const float* v, std::int64_t n, std::int64_t c) {
  __m256 acc[RR][NV];
  for (int i = 0; i < RR; ++i) {
    const __m256 a = _mm256_broadcast_ss(alpha + i);
    for (int j = 0; j < NV; ++j) acc[i][j] = _mm256_mul_ps(a, _mm256_loadu_ps(o + i * dim + c + 8 * j));
  }
  for (std::int64_t t = 0; t < n; ++t) {
    __m256 x[NV];
    for (int j = 0; j < NV; ++j) x[j] = _mm256_load_ps(v + t * dim + c + 8 * j);
    for (int i = 0; i < RR; ++i) {
      const __m256 b = _mm256_broadcast_ss(p + i * width + t);
      for (int j = 0; j < NV; ++j) acc[i][j] = _mm256_fmadd_ps(b, x[j], acc[i][j]);
    }
  }
  for (int i = 0; i < RR; ++i)
    for (int j = 0; j < NV; ++j) _mm256_storeu_ps(o + i * dim + c + 8 * j, acc[i][j]);
}

// O = alpha O + P V for every row, in tiles of up to 6 rows (each over the
// keys its last row sees: P is 0 past a row's own) and 16 features; a head
// dim of 16 j + 8 ends in tiles of 4 rows and 24 features: 12 FMAs for 7
// loads, where 6 x 8 tiles for its last 8 features did 6 (SD's heads of 40,
// Sq 1024 x Skv 4096 x 8 heads, f32, 1 thread, best of 11 processes each,
// alternating: 89.1 -> 82.4 ms).
static void pv_rows_all(const float* p, std::int64_t width, const float* alpha, float* o, std::int64_t rows,
                        std::int64_t dim, const float* v, const std::int64_t* visible) {
  for (std::int64_t c = 0; c < dim;) {
    const auto chunk = [&]<int RR, int NV>() {
      for_row_tiles<RR>(rows, visible, [&](auto tile, std::int64_t r, std::int64_t keys) {
        pv_tile<tile(), NV>(p + r * width, width, alpha + r, o + r * dim, dim, v, keys, c);
      });
      c += 8 * NV;
    };
    if (dim - c == 24) chunk.template operator()<4, 3>();
    else if (dim - c >= 16) chunk.template operator()<6, 2>();
    else chunk.template operator()<6, 1>();
  }
}

}  // namespace

void flash_attention(const AttentionArgs& a, std::int64_t t0, std::int64_t t1, const AttentionOutput& out) {
  const std::int64_t head_dim = a.head_dim, dim = (head_dim + 7) / 8 * 8, rows = a.rows;
  const std::int64_t t_end = visible_keys_end(a, t1);
  const std::int64_t max_width =
      rows > kFewRows ? kBlockKeys : a.kv.dtype == DType::i8 ? kFewRowsInt8BlockKeys : kFewRowsBlockKeys;
  const std::int64_t width = std::clamp<std::int64_t>((t_end - t0 + kKeys - 1) / kKeys * kKeys, kKeys, max_width);

  // Row state: q (pre-scaled, in slivers; padding rows zero), o sums, scores
  // / probabilities, and per row (padded to whole vectors for the softmax's
  // 8 rows) m, l, alpha; each row's key limit (keys t < limit are visible)
  // and its visible keys of the block.
  const std::int64_t q_rows = (rows + kScoreRows - 1) / kScoreRows * kSliverStride, padded = (rows + 7) / 8 * 8;
  const std::size_t floats = std::size_t(q_rows * dim + rows * dim + rows * width + 3 * padded);
  auto* q = static_cast<float*>(thread_scratch(ScratchSlot::a_panel, sizeof(float) * floats + sizeof(std::int64_t) * 2 * rows));
  float* o = q + q_rows * dim;
  float* s = o + rows * dim;
  float* m = s + rows * width;
  float* l = m + padded;
  float* alpha = l + padded;
  auto* limit = reinterpret_cast<std::int64_t*>(q + floats);  // floats: a multiple of 8
  std::int64_t* visible = limit + rows;
  UnitRow u(a, 0);
  for (std::int64_t r = 0; r < rows; ++r, u.next(a)) limit[r] = a.causal ? std::min(t_end, u.pos + a.causal_offset + 1) : t_end;
  float* kt = static_cast<float*>(thread_scratch(ScratchSlot::b_panel, sizeof(float) * dim * width * 2));
  float* vb = kt + dim * width;

  // q, scaled, into slivers by 8 x 8 transposes of 6 rows (and 2 of zeros),
  // each row addressed once (stored a float at a time, with the row's
  // address and its two divisions per 8 features, q took a tenth of the time
  // of cross-attention's 77 keys). Its lines are requested first
  // (prefetch_q_rows). The 8 loads unrolled, q's type fixed and the zero
  // rows read from kZeroRow, the 8 vectors stay in registers (with per-load
  // type switches and a zero-or-load branch GCC kept them on the stack:
  // cross-attention, f32, 1 thread, best of 8-10 runs, 10.4 -> 10.0 ms).
  prefetch_q_rows(a);
  u = UnitRow(a, 0);
  const __m256 scale = q_scale(a);
  dispatch_float(a.q_dtype, [&](auto qt) {
    for (std::int64_t r0 = 0; r0 < rows; r0 += kScoreRows) {
      const std::int64_t rr = std::min(kScoreRows, rows - r0);
      const void* src[8];
      for (std::int64_t i = 0; i < 8; ++i) {
        src[i] = i < rr ? q_row(a, u, a.q) : kZeroRow;
        if (i < rr) u.next(a);
      }
      float* sliver = q + r0 / kScoreRows * kSliverStride * dim;
      for (std::int64_t d = 0; d < dim; d += 8) {
        __m256 x[8];
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) x[i] = _mm256_mul_ps(scale, load8_n(advance(src[i], qt, d), qt, head_dim - d));
        transpose8x8(x);
        for (std::int64_t j = 0; j < 8; ++j) _mm256_store_ps(sliver + (d + j) * kSliverStride, x[j]);
      }
    }
  });
  std::fill(o, o + rows * dim, 0.0f);
  std::fill(m, m + padded, kNegInf);
  std::fill(l, l + 2 * padded, 0.0f);  // l, alpha

  const KvSource& kv = a.kv;
  KvRows<kBlockKeys> block;
  Prefetcher<0, kBlockKeys> pf(a.prefetch_l1);
  pf.row_bytes = head_dim * bytes_of(kv.dtype);

  for (std::int64_t tb = t0; tb < t_end; tb += width) {
    const std::int64_t n = std::min(width, t_end - tb);
    gather_rows(kv, tb, n, block);
    // The next block's K and V rows, spread over this block's K transposes
    // and score chunks (a chunk counting as 32 transposes). Issued per row
    // of the softmax, as the AVX-512 kernel does, a decode unit's few rows
    // asked for the block in bursts of hundreds of lines (AMD EPYC, Zen 2,
    // bench attention decode, alternating, 2 rounds, ms: b1_kv4096 f32 1
    // thread 9.1-10.2 -> 6.4-6.8, 2 threads 5.6 -> 4.0-4.3, bf16 5.8-6.2 ->
    // 5.2-5.3; b8_kv1024 f32 17-22 -> 14-16; no software prefetch at all:
    // 8.5-8.8, 5.8-5.9, 6.5-8.0).
    pf.add_rows(kv, tb + width, std::clamp<std::int64_t>(t_end - tb - width, 0, width));
    pf.pace(int(((head_dim + 7) / 8) * ((n + 7) / 8) + kChunkTicks * ((n + kKeys - 1) / kKeys)));

    // 1. K and V of the block in f32 (kt, vb).
    const auto tick = [&] { pf.tick(); };
    switch (kv.dtype) {
      case DType::bf16: convert_block<DType::bf16>(block, n, head_dim, dim, width, kt, vb, tick); break;
      case DType::i8: convert_block<DType::i8>(block, n, head_dim, dim, width, kt, vb, tick); break;
      default: convert_block<DType::f32>(block, n, head_dim, dim, width, kt, vb, tick); break;
    }

    // 2. Scores, 16 keys at a time, then the online softmax row by row;
    //    alpha holds the old max until every row has its new one.
    for (std::int64_t r = 0; r < rows; ++r) visible[r] = std::clamp<std::int64_t>(limit[r] - tb, 0, n);
    for (std::int64_t c = 0; c < n; c += kKeys) {
      score_rows(q, rows, dim, head_dim, kt, s, width, c, n, visible);
      for (int t = 0; t < kChunkTicks; ++t) pf.tick();
    }
    // In the last block, each row's output lines and the next task's row of
    // q are requested (prefetch_task_ends; AMD EPYC, Zen 2, bench
    // attention cross, f32, alternating, 3 rounds, ms at 1 / 2 threads:
    // 18.4 / 9.9 -> 15.9 / 9.1).
    const bool last = tb + width >= t_end;
    u = UnitRow(a, 0);
    for (std::int64_t r0 = 0; r0 < rows; r0 += 8) {
      const void* masks[8];
      for (std::int64_t r = r0; r < std::min(rows, r0 + 8); ++r, u.next(a)) {
        if (last) prefetch_task_ends(a, out, r, u);
        masks[r - r0] = mask_row(a, u, tb);
      }
      softmax_rows8(a, s + r0 * width, width, (n + 7) / 8, std::min<std::int64_t>(8, rows - r0), visible + r0, masks, m + r0, l + r0,
                    alpha + r0);
    }

    // 3. O = alpha O + P V.
    pv_rows_all(s, width, alpha, o, rows, dim, vb, visible);
  }

  finish_rows(a, out, o, dim, m, l);
}

}  // namespace tessera::kernels::avx2
