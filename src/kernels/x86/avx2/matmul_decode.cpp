// Decode on AVX2 (M <= 4): packed f32 / bf16 / i8 / i4 weights streamed
// once per pass of one or two rows of A, dequantized in registers and used
// at once, never written back to memory. The blocked row (matmul_f32.cpp)
// converts a whole panel into an f32 buffer first (at M = 1 all of K:
// 512 KiB of f32 written and read again for 64 KiB of int4 weights).
// Quantized weights enter the FMAs as their stored integers: each group's
// sums are scaled once at its end, w = (q - zero) * scale giving
// scale * sum(a q) - zero * scale * sum(a), with the group's sums of A
// computed once per task.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/scratch.hpp"
#include "kernels/x86/avx2/epilogue.hpp"
#include "kernels/x86/avx2/matmul_pack.hpp"

namespace tessera::kernels::avx2 {

namespace {

constexpr std::int64_t kMaxRows = 2;  // rows per pass: 8 accumulators of 32 columns each, see decode_panel_count
// Bytes of prefetch ahead of each panel stream, into L2, for the quantized
// loops only: their arithmetic per byte leaves memory idle at each page the
// hardware prefetcher restarts on, while the f32 and bf16 loops, light on
// arithmetic, ran faster without (AMD EPYC, Zen 2, bench gemm --m 1, 4096 x
// 4096, one binary alternating, 3 rounds, ms: f32 1 thread 5.9-6.1 ->
// 4.0-4.3 without, bf16 2.5-2.6 -> 2.2-2.4, 2 threads 1.8-2.0 -> 1.3; int8
// 1.6-1.7 with against 1.8 without). 8 KiB rather than 4: bf16 2.3-2.6 ->
// 2.1-2.2 ms.
constexpr std::int64_t kAhead = 8192;

// Byte E of each 4-byte lane, sign- or zero-extended, as f32.
template <int E>
static inline __m256 lane_byte(__m256i d, bool is_unsigned) {
  const __m256i up = E == 3 ? d : _mm256_slli_epi32(d, 24 - 8 * E);
  return _mm256_cvtepi32_ps(is_unsigned ? _mm256_srli_epi32(up, 24) : _mm256_srai_epi32(up, 24));
}

// Two rows of a bf16 pair row: k (the low half of each lane) and k + 1 (the high).
static inline __m256 bf16_even(__m256i pairs) { return _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16)); }
static inline __m256 bf16_odd(__m256i pairs) {
  return _mm256_castsi256_ps(_mm256_and_si256(pairs, _mm256_set1_epi32(int(0xffff0000u))));
}

// f(J) for each panel J < P, J a std::integral_constant (accumulator indices at compile time).
template <int P, class F>
__attribute__((always_inline)) static inline void for_panels(F&& f) {
  [&]<int... J>(std::integer_sequence<int, J...>) { (f(std::integral_constant<int, J>()), ...); }(std::make_integer_sequence<int, P>());
}

static inline __m256i load_si256(const std::uint8_t* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }

// C[m0 : m0 + ROWS, n : n + 32 P] for P panels streamed side by side over
// all of K. `a`: ROWS rows of A as f32, lda apart, zero past K;
// `a_sums[i * groups + g]`: the sum of row i of A over group g.
template <int ROWS, int P, DType D>
void decode_panels(const MatmulArgs& p, const float* a, std::int64_t lda, const float* a_sums, std::int64_t m0,
                   std::int64_t n, std::int64_t n_end) {
  const PackedB& b = *p.packed;
  const int panels = int(std::min<std::int64_t>(P, (n_end - n + kPanelCols - 1) / kPanelCols));
  const std::int64_t panel_bytes = padded_k(D, b.k) * panel_row_bytes(D);
  const auto* base = static_cast<const std::uint8_t*>(b.values) + n / kPanelCols * panel_bytes;
  const std::uint8_t* panel[P];
  for (int j = 0; j < P; ++j) panel[j] = base + std::min(j, panels - 1) * panel_bytes;  // a short tail re-reads the last
  constexpr bool kQuantized = D == DType::i8;
  const std::int64_t group = kQuantized ? b.group_size : std::max<std::int64_t>(b.k, 1);
  const std::int64_t groups = (b.k + group - 1) / group;
  const bool is_unsigned = b.zeros != nullptr;  // else symmetric: zero point 0

  __m256 acc[ROWS][4 * P];
  for (auto& row : acc)
    for (__m256& v : row) v = _mm256_setzero_ps();
  alignas(32) float total[ROWS][4 * P][8] = {};  // quantized: the scaled sums of the groups so far
  // acc[.][H0 + h] += a[k] * w[h], for vectors of 8 columns.
  auto fma = [&]<int H0, int NH>(std::int64_t k, const __m256 (&w)[NH]) __attribute__((always_inline)) {
    for (int i = 0; i < ROWS; ++i) {
      const __m256 av = _mm256_broadcast_ss(a + i * lda + k);
      for (int h = 0; h < NH; ++h) acc[i][H0 + h] = _mm256_fmadd_ps(av, w[h], acc[i][H0 + h]);
    }
  };
  auto pair_fma = [&]<int H0>(std::integral_constant<int, H0>, std::int64_t k, __m256i lo, __m256i hi) __attribute__((always_inline)) {
    fma.template operator()<H0, 2>(k, {bf16_even(lo), bf16_even(hi)});
    fma.template operator()<H0, 2>(k + 1, {bf16_odd(lo), bf16_odd(hi)});
  };

  for (std::int64_t g = 0; g < groups; ++g) {
    const std::int64_t g0 = g * group, g1 = std::min(b.k, g0 + group);
    if (kQuantized && g > 0)
      for (auto& row : acc)
        for (__m256& v : row) v = _mm256_setzero_ps();
    if constexpr (D == DType::f32) {
      for (std::int64_t k = g0; k < g1; ++k) {
        for (int j = 0; j < P; ++j) {
          const auto* r = reinterpret_cast<const float*>(panel[j] + k * 128);
          for (int i = 0; i < ROWS; ++i) {
            const __m256 av = _mm256_broadcast_ss(a + i * lda + k);
            for (int h = 0; h < 4; ++h) acc[i][4 * j + h] = _mm256_fmadd_ps(av, _mm256_load_ps(r + 8 * h), acc[i][4 * j + h]);
          }
        }
      }
    } else if constexpr (D == DType::bf16) {
      // A 64-byte tile row holds the pairs (k, k + 1) of 16 columns (A is zero past K, to a multiple of 64).
      walk_halves<2, kBf16KStep>(g0, g1, [&]<int H>(std::integral_constant<int, H>, std::int64_t k, std::int64_t at)
                                             __attribute__((always_inline)) {
        for_panels<P>([&]<int J>(std::integral_constant<int, J>) __attribute__((always_inline)) {
          const std::uint8_t* r = panel[J] + at;
          pair_fma(std::integral_constant<int, 4 * J + 2 * H>(), k, load_si256(r), load_si256(r + 32));
        });
      });
    } else {
      // A 64-byte tile row holds rows k .. k + 3 of 16 columns.
      walk_halves<4, kI8KStep>(g0, g1, [&]<int H>(std::integral_constant<int, H>, std::int64_t k, std::int64_t at)
                                           __attribute__((always_inline)) {
        for_panels<P>([&]<int J>(std::integral_constant<int, J>) __attribute__((always_inline)) {
          const std::uint8_t* r = panel[J] + at;
          _mm_prefetch(reinterpret_cast<const char*>(r + kAhead), _MM_HINT_T1);
          const __m256i lo = load_si256(r), hi = load_si256(r + 32);
          auto row = [&]<int E>(std::integral_constant<int, E>) __attribute__((always_inline)) {
            fma.template operator()<4 * J + 2 * H, 2>(k + E, {lane_byte<E>(lo, is_unsigned), lane_byte<E>(hi, is_unsigned)});
          };
          row(std::integral_constant<int, 0>()), row(std::integral_constant<int, 1>());
          row(std::integral_constant<int, 2>()), row(std::integral_constant<int, 3>());
        });
      });
    }
    if constexpr (kQuantized) {
      for (int j = 0; j < panels; ++j) {
        const std::int64_t at = group_param_index(b, g, n + j * kPanelCols);
        for (int h = 0; h < 4; ++h) {
          __m256 scale, zero;
          group_params8(b, at + 8 * h, 0.0f, scale, zero);
          for (int i = 0; i < ROWS; ++i) {
            __m256 t = _mm256_fmadd_ps(scale, acc[i][4 * j + h], _mm256_load_ps(total[i][4 * j + h]));
            if (b.zeros) t = _mm256_fnmadd_ps(_mm256_mul_ps(zero, scale), _mm256_set1_ps(a_sums[i * groups + g]), t);
            _mm256_store_ps(total[i][4 * j + h], t);
          }
        }
      }
    }
  }
  for (int i = 0; i < ROWS; ++i)
    for (int h = 0; h < 4 * panels; ++h) {
      const std::int64_t col = n + 8 * h;
      if (col < n_end)
        epilogue8(p, kQuantized ? _mm256_load_ps(total[i][h]) : acc[i][h], m0 + i, col, std::min<std::int64_t>(8, n_end - col));
    }
}

// Panels streamed side by side: two for one row of A (eight accumulators),
// one for two rows.
constexpr int decode_panel_count(std::int64_t rows) { return rows == 1 ? 2 : 1; }
using DecodePanels = void (*)(const MatmulArgs&, const float*, std::int64_t, const float*, std::int64_t, std::int64_t,
                              std::int64_t);
template <DType D>
constexpr DecodePanels kDecodePanels[kMaxRows + 1] = {nullptr, decode_panels<1, decode_panel_count(1), D>,
                                                      decode_panels<2, decode_panel_count(2), D>};


// ------------------------------------------------------------------ int4
// int4 weights in integer dot products: vpmaddubsw multiplies a 4-byte lane
// of nibbles (one column's 4 k, the unsigned bytes) by 4 steps of A (the
// signed bytes) and adds pairs, vpmaddwd adds the pairs into the lane's
// four products. A enters as int8 steps (W4A8: the op's per-token pre-pass)
// or, weight-only, as int16 steps quantized per row here, s = 256 hi + lo,
// one product per byte with the high one weighted by 256 in vpmaddwd.
// Per weight that is ~0.25 instructions (weight-only) where widening each
// weight to f32 for an FMA took ~0.5, and the loop was compute-bound.

// The 4 bytes of quad q as a lane in every lane of a vector.
static inline __m256i quad_lanes(const std::int8_t* steps, std::int64_t q) {
  std::int32_t lane;
  std::memcpy(&lane, steps + 4 * q, sizeof(lane));
  return _mm256_set1_epi32(lane);
}

// A's rows as the int4 loop reads them: per quad of k, a 4-byte lane of
// steps (lo; and hi for int16 steps, else null); per block (Blocks), the
// sum of the steps; one scale per row.
struct I4Rows {
  const std::int8_t* hi[kMaxRows];  // 4 bytes per quad
  const std::int8_t* lo[kMaxRows];
  const std::int32_t* sums[kMaxRows];
  float scale[kMaxRows];
};

template <int ROWS, int P, bool Int16>
void decode_i4(const MatmulArgs& p, const I4Rows& a, const Blocks& bl, std::int64_t m0, std::int64_t n, std::int64_t n_end) {
  const PackedB& b = *p.packed;
  const int panels = int(std::min<std::int64_t>(P, (n_end - n + kPanelCols - 1) / kPanelCols));
  const std::int64_t panel_bytes = padded_k(DType::i4, b.k) * panel_row_bytes(DType::i4);
  const auto* base = static_cast<const std::uint8_t*>(b.values) + n / kPanelCols * panel_bytes;
  const std::uint8_t* panel[P];
  for (int j = 0; j < P; ++j) panel[j] = base + std::min(j, panels - 1) * panel_bytes;  // a short tail re-reads the last
  const __m256i nibble = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1), high = _mm256_set1_epi16(256);
  alignas(32) float total[ROWS][4 * P][8] = {};
  for (std::int64_t blk = 0; blk < bl.count; ++blk) {
    const std::int64_t q0 = bl.begin(blk), q1 = bl.end(blk);
    __m256i acc[ROWS][4 * P];
    for (auto& row : acc)
      for (__m256i& v : row) v = _mm256_setzero_si256();
    for (std::int64_t q = q0; q < q1; ++q)
      for_panels<P>([&]<int J>(std::integral_constant<int, J>) __attribute__((always_inline)) {
        // 64 bytes per 4 k: lane j of the first 32 holds column j in its
        // nibbles' low halves and column j + 16 in their high ones; the
        // second 32, columns 8 + j and 24 + j.
        const std::uint8_t* r = panel[J] + q * 64;
        _mm_prefetch(reinterpret_cast<const char*>(r + kAhead), _MM_HINT_T1);
        const __m256i d0 = load_si256(r), d1 = load_si256(r + 32);
        const __m256i w[4] = {_mm256_and_si256(d0, nibble), _mm256_and_si256(d1, nibble),
                              _mm256_and_si256(_mm256_srli_epi16(d0, 4), nibble),
                              _mm256_and_si256(_mm256_srli_epi16(d1, 4), nibble)};
        for (int i = 0; i < ROWS; ++i) {
          const __m256i lo = quad_lanes(a.lo[i], q);
          for (int h = 0; h < 4; ++h) {
            __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(w[h], lo), ones);
            if constexpr (Int16)
              dot = _mm256_add_epi32(dot, _mm256_madd_epi16(_mm256_maddubs_epi16(w[h], quad_lanes(a.hi[i], q)), high));
            acc[i][4 * J + h] = _mm256_add_epi32(acc[i][4 * J + h], dot);
          }
        }
      });
    // The block's sums in f32: w = (q - zero) * scale, zero 8 when none is stored.
    const std::int64_t g = q0 * 4 / std::min(b.group_size, padded_k(DType::i4, b.k));
    for (int j = 0; j < panels; ++j) {
      const std::int64_t at = group_param_index(b, g, n + j * kPanelCols);
      for (int h = 0; h < 4; ++h) {
        __m256 scale, zero;
        group_params8(b, at + 8 * h, 8.0f, scale, zero);
        for (int i = 0; i < ROWS; ++i) {
          const __m256 row_scale = _mm256_mul_ps(scale, _mm256_set1_ps(a.scale[i]));
          __m256 t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i][4 * j + h]), row_scale, _mm256_load_ps(total[i][4 * j + h]));
          t = _mm256_fnmadd_ps(_mm256_mul_ps(zero, row_scale), _mm256_set1_ps(float(a.sums[i][blk])), t);
          _mm256_store_ps(total[i][4 * j + h], t);
        }
      }
    }
  }
  for (int i = 0; i < ROWS; ++i)
    for (int h = 0; h < 4 * panels; ++h) {
      const std::int64_t col = n + 8 * h;
      if (col < n_end) epilogue8(p, _mm256_load_ps(total[i][h]), m0 + i, col, std::min<std::int64_t>(8, n_end - col));
    }
}

using DecodeI4 = void (*)(const MatmulArgs&, const I4Rows&, const Blocks&, std::int64_t, std::int64_t, std::int64_t);
template <bool Int16>
constexpr DecodeI4 kDecodeI4[kMaxRows + 1] = {nullptr, decode_i4<1, decode_panel_count(1), Int16>,
                                              decode_i4<2, decode_panel_count(2), Int16>};

// Row m of A as int16 steps s of scale max|a| / kMaxInt16Step (NaN when
// the row holds NaN or Inf, so its outputs are NaN), zero past K: per quad
// the 4-byte lanes of the steps' signed bytes, hi = (s + 128) >> 8 and lo =
// s - 256 hi; `steps` (quads * 4, rounded up to 8) gets s. Returns the scale.
float int16_row(const MatmulArgs& p, std::int64_t m, std::int64_t quads, std::int8_t* hi, std::int8_t* lo,
                std::int32_t* steps) {
  __m256 max_abs = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
  for (std::int64_t k = 0; k < p.k; k += 8) {
    const __m256 v = abs8(load_a8(p, m, k, std::min<std::int64_t>(8, p.k - k)));
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, _mm256_set1_ps(3.4028235e38f), _CMP_NLE_UQ));  // Inf or NaN
    max_abs = _mm256_max_ps(max_abs, v);
  }
  const float top = hmax(max_abs);
  const bool finite = _mm256_movemask_ps(bad) == 0;
  const __m256 inv = _mm256_set1_ps(finite && top > 0.0f ? kMaxInt16Step / top : 0.0f);
  for (std::int64_t k = 0; k < quads * 4; k += 8) {
    const __m256 v = k < p.k ? load_a8(p, m, k, std::min<std::int64_t>(8, p.k - k)) : _mm256_setzero_ps();
    const __m256i s = _mm256_cvtps_epi32(_mm256_mul_ps(v, inv));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(steps + k), s);
    const __m256i h = _mm256_srai_epi32(_mm256_add_epi32(s, _mm256_set1_epi32(128)), 8);
    const __m256i l = _mm256_sub_epi32(s, _mm256_slli_epi32(h, 8));
    // Each half's 4 values as the low 4 bytes of that half (in range: saturation exact).
    const auto bytes = [](__m256i x) {
      const __m256i words = _mm256_packs_epi32(x, x);
      return _mm256_packs_epi16(words, words);
    };
    const __m256i hb = bytes(h), lb = bytes(l);
    const std::int32_t lanes[4] = {_mm256_cvtsi256_si32(hb), _mm256_cvtsi256_si32(lb),
                                   _mm_cvtsi128_si32(_mm256_extracti128_si256(hb, 1)),
                                   _mm_cvtsi128_si32(_mm256_extracti128_si256(lb, 1))};
    std::memcpy(hi + k, &lanes[0], 4);
    std::memcpy(lo + k, &lanes[1], 4);
    if (k + 4 < quads * 4) {
      std::memcpy(hi + k + 4, &lanes[2], 4);
      std::memcpy(lo + k + 4, &lanes[3], 4);
    }
  }
  return !finite ? NAN : top > 0.0f ? top / kMaxInt16Step : 1.0f;
}

// The sums of steps [4 begin, 4 end) of each block.
template <class T>
void block_sums(const T* steps, const Blocks& bl, std::int32_t* sums) {
  for (std::int64_t blk = 0; blk < bl.count; ++blk) {
    std::int32_t sum = 0;
    for (std::int64_t k = 4 * bl.begin(blk); k < 4 * bl.end(blk); ++k) sum += steps[k];
    sums[blk] = sum;
  }
}

// The int4 rows of a task: A staged once (int16 steps, or the pre-pass's
// int8 ones read in place), then passes of up to two rows.
void matmul_decode_i4(const MatmulArgs& p, std::int64_t m0, std::int64_t m1, std::int64_t n0, std::int64_t n1) {
  const Blocks bl(*p.packed);
  const std::int64_t rows = m1 - m0, steps_len = round_up(bl.quads * 4, 8);
  const std::int64_t per_row = p.a_q ? bl.count : 2 * bl.quads + steps_len + bl.count;  // int32s
  auto* staged = static_cast<std::int32_t*>(thread_scratch(ScratchSlot::a_panel, std::size_t(rows * per_row) * sizeof(std::int32_t)));
  I4Rows all{};
  std::int32_t* sums[kMaxRows * 2];
  const std::int8_t* hi[kMaxRows * 2];
  const std::int8_t* lo[kMaxRows * 2];
  float scales[kMaxRows * 2];
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int32_t* at = staged + r * per_row;
    const std::int64_t m = m0 + r;
    if (p.a_q) {  // int8 steps, zero from K to a multiple of 64
      const std::int8_t* row = p.a_q + m * p.a_q_stride;
      hi[r] = nullptr, lo[r] = row, sums[r] = at, scales[r] = p.a_scales[m];
      block_sums(row, bl, sums[r]);
    } else {
      auto* h = reinterpret_cast<std::int8_t*>(at);
      std::int8_t* l = h + 4 * bl.quads;
      std::int32_t* steps = at + 2 * bl.quads;
      hi[r] = h, lo[r] = l, sums[r] = steps + steps_len;
      scales[r] = int16_row(p, m, bl.quads, h, l, steps);
      block_sums(steps, bl, sums[r]);
    }
  }
  const DecodeI4* kernels = p.a_q ? kDecodeI4<false> : kDecodeI4<true>;
  for (std::int64_t m = m0; m < m1; m += kMaxRows) {
    const std::int64_t r = std::min(kMaxRows, m1 - m);
    for (std::int64_t i = 0; i < r; ++i) {
      all.hi[i] = hi[m - m0 + i], all.lo[i] = lo[m - m0 + i], all.sums[i] = sums[m - m0 + i], all.scale[i] = scales[m - m0 + i];
    }
    for (std::int64_t n = n0; n < n1; n += decode_panel_count(r) * kPanelCols) kernels[r](p, all, bl, m, n, n1);
  }
}
}  // namespace

// Decode (M <= 4, in passes of up to two rows: a second pass finds the
// task's panels in L2). A's rows are converted to f32 once per task (W8A8:
// the int8 steps of each row's scale), zero past K up to a multiple of 64
// (the bf16 and i8 tiles' padding), with their sums per group of weights.
void matmul_decode(const MatmulArgs& p, const MatmulTiling&, std::int64_t m0, std::int64_t m1, std::int64_t n0,
                   std::int64_t n1) {
  const PackedB& b = *p.packed;
  if (b.dtype == DType::i4) return matmul_decode_i4(p, m0, m1, n0, n1);
  const std::int64_t rows = m1 - m0, lda = round_up(std::max<std::int64_t>(p.k, 1), 64);
  const bool quantized = b.dtype == DType::i8;
  const std::int64_t group = quantized ? b.group_size : 1, groups = quantized ? (p.k + group - 1) / group : 0;
  auto* a = static_cast<float*>(thread_scratch(ScratchSlot::a_panel, std::size_t(rows * (lda + groups)) * sizeof(float)));
  float* a_sums = a + rows * lda;
  for (std::int64_t m = m0; m < m1; ++m) {
    float* row = a + (m - m0) * lda;
    for (std::int64_t k = 0; k < lda; k += 8) {
      const std::int64_t valid = std::clamp<std::int64_t>(p.k - k, 0, 8);
      __m256 v = _mm256_setzero_ps();
      if (valid > 0 && p.a_q) {
        std::int64_t bytes = 0;
        std::memcpy(&bytes, p.a_q + m * p.a_q_stride + k, std::size_t(valid));
        v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(bytes))), _mm256_set1_ps(p.a_scales[m]));
      } else if (valid > 0) {
        v = load_a8(p, m, k, valid);
      }
      _mm256_store_ps(row + k, v);
    }
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::int64_t end = std::min(p.k, (g + 1) * group);
      std::int64_t k = g * group;
      __m256 sum = _mm256_setzero_ps();
      for (; k + 8 <= end; k += 8) sum = _mm256_add_ps(sum, _mm256_loadu_ps(row + k));
      float s = hsum(sum);
      for (; k < end; ++k) s += row[k];
      a_sums[(m - m0) * groups + g] = s;
    }
  }
  const DecodePanels* kernels = b.dtype == DType::f32    ? kDecodePanels<DType::f32>
                                : b.dtype == DType::bf16 ? kDecodePanels<DType::bf16>
                                                         : kDecodePanels<DType::i8>;
  for (std::int64_t m = m0; m < m1; m += kMaxRows) {
    const std::int64_t r = std::min(kMaxRows, m1 - m);
    for (std::int64_t n = n0; n < n1; n += decode_panel_count(r) * kPanelCols)
      kernels[r](p, a + (m - m0) * lda, lda, a_sums + (m - m0) * groups, m, n, n1);
  }
}

}  // namespace tessera::kernels::avx2
