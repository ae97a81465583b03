// Decode on AVX2 (f32 weights M <= 2; bf16 and integer weights up to 16): packed weights streamed
// once per pass of one or two rows of A and used at once, never written back
// to memory. The blocked row (matmul_f32.cpp) converts a whole panel into an
// f32 buffer first (at M = 1 all of K: 512 KiB of f32 written and read
// again for 64 KiB of int4 weights).
//   f32 / bf16: FMAs on the weights as f32 (bf16 widened in registers).
//   i8 / i4: integer dot products over a 4-byte lane of weights (one
//   column's 4 k). A enters as int8 steps (W8A8 / W4A8: the op's per-token
//   pre-pass): vpmaddubsw multiplies the lane's unsigned bytes by 4 signed
//   bytes of A and adds pairs, vpmaddwd adds the pairs; int4 nibbles are
//   unsigned, int8 weights enter as |w| with A's bytes given w's sign
//   (unsigned int8, with zero points, first made signed by - 128). Or,
//   weight-only, A enters as int16 steps quantized per row here: the lane's
//   even bytes (k0, k2) and odd ones (k1, k3) as int16 each take one
//   vpmaddwd with A's steps in the same pairs. Each block's integer sums are
//   scaled once: w = (q - zero) * scale gives scale * (sum(a q) - zero *
//   sum(a)). Widening each weight to f32 for an FMA took ~0.5 instructions a
//   weight, and those loops were compute-bound.
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

constexpr std::int64_t kMaxRows = 2;  // rows per pass: 8 or 12 accumulators, see decode_panel_count
constexpr std::int64_t kMaxIntRows = 16;  // rows per task of the integer loops (matmul.cpp: decode_avx2_supports)
// Bytes of prefetch ahead of each panel stream, into L2, for the integer
// loops only: their arithmetic per byte leaves memory idle at each page the
// hardware prefetcher restarts on, while the f32 and bf16 loops, light on
// arithmetic, ran faster without (AMD EPYC, Zen 2, bench gemm --m 1, 4096 x
// 4096, one binary alternating, 3 rounds, ms: f32 1 thread 5.9-6.1 ->
// 4.0-4.3 without, bf16 2.5-2.6 -> 2.2-2.4, 2 threads 1.8-2.0 -> 1.3; int8,
// then widened to f32, 1.6-1.7 with against 1.8 without). 8 KiB rather
// than 4: bf16 2.3-2.6 -> 2.1-2.2 ms.
constexpr std::int64_t kAhead = 8192;
// The largest int16 step of weight-only activations (within
// kMaxInt16Step, which bounds the blocks' int32 sums).
constexpr float kMaxStep = 32512.0f;

// f(J) for each panel J < P, J a std::integral_constant (accumulator indices at compile time).
template <int P, class F>
__attribute__((always_inline)) static inline void for_panels(F&& f) {
  [&]<int... J>(std::integer_sequence<int, J...>) { (f(std::integral_constant<int, J>()), ...); }(std::make_integer_sequence<int, P>());
}

static inline __m256i load_si256(const std::uint8_t* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }

// The packed panels [n, n + 32 P) of the weights (a short tail re-reads the last).
template <int P>
static inline int panel_streams(const PackedB& b, std::int64_t n, std::int64_t n_end, const std::uint8_t* (&panel)[P]) {
  const int panels = int(std::min<std::int64_t>(P, (n_end - n + kPanelCols - 1) / kPanelCols));
  const std::int64_t panel_bytes = padded_k(b.dtype, b.k) * panel_row_bytes(b.dtype);
  const auto* base = static_cast<const std::uint8_t*>(b.values) + n / kPanelCols * panel_bytes;
  for (int j = 0; j < P; ++j) panel[j] = base + std::min(j, panels - 1) * panel_bytes;
  return panels;
}

// C[m0 + i, n + 8 h] = epilogue(out(i, h)) for the ROWS rows and the 8-column vectors of `panels` panels.
template <int ROWS, class Out>
static inline void store_rows(const MatmulArgs& p, int panels, std::int64_t m0, std::int64_t n, std::int64_t n_end, Out&& out) {
  for (int i = 0; i < ROWS; ++i)
    for (int h = 0; h < 4 * panels; ++h) {
      const std::int64_t col = n + 8 * h;
      if (col < n_end) epilogue8(p, out(i, h), m0 + i, col, std::min<std::int64_t>(8, n_end - col));
    }
}

// Panels streamed side by side: for one row of A three of f32 / bf16
// weights (12 accumulators; against two, AMD EPYC Zen 2, bench gemm --m 1,
// alternating, 4 rounds, medians, ms at 1 / 2 threads: f32 3.87 / 2.35 ->
// 3.33 / 1.85, bf16 1.92 / 1.19 -> 1.76 / 0.97) and two of integer ones
// (three measured even: int8 faster, int4 slower); one for two rows.
constexpr int decode_panel_count(std::int64_t rows, bool integer) { return rows == 1 ? (integer ? 2 : 3) : 1; }

// ------------------------------------------------------------------ f32, bf16
// C[m0 : m0 + ROWS, n : n + 32 P] for P panels over all of K. `a`: ROWS
// rows of A as f32, lda apart, zero past K up to a multiple of 32 (bf16's padding).
template <int ROWS, int P, DType D>
void float_panels(const MatmulArgs& p, const float* a, std::int64_t lda, std::int64_t m0, std::int64_t n, std::int64_t n_end) {
  const PackedB& b = *p.packed;
  const std::uint8_t* panel[P];
  const int panels = panel_streams(b, n, n_end, panel);
  __m256 acc[ROWS][4 * P];
  for (auto& row : acc)
    for (__m256& v : row) v = _mm256_setzero_ps();
  // acc[.][H0 + h] += a[k] * w[h], for vectors of 8 columns.
  auto fma = [&]<int H0, int NH>(std::int64_t k, const __m256 (&w)[NH]) __attribute__((always_inline)) {
    for (int i = 0; i < ROWS; ++i) {
      const __m256 av = _mm256_broadcast_ss(a + i * lda + k);
      for (int h = 0; h < NH; ++h) acc[i][H0 + h] = _mm256_fmadd_ps(av, w[h], acc[i][H0 + h]);
    }
  };
  if constexpr (D == DType::f32) {
    for (std::int64_t k = 0; k < b.k; ++k)
      for_panels<P>([&]<int J>(std::integral_constant<int, J>) __attribute__((always_inline)) {
        const auto* r = reinterpret_cast<const float*>(panel[J] + k * 128);
        fma.template operator()<4 * J, 4>(k, {_mm256_load_ps(r), _mm256_load_ps(r + 8), _mm256_load_ps(r + 16), _mm256_load_ps(r + 24)});
      });
  } else {
    // A 64-byte tile row holds the pairs (k, k + 1) of 16 columns.
    walk_halves<2, kBf16KStep>(0, b.k, [&]<int H>(std::integral_constant<int, H>, std::int64_t k, std::int64_t at)
                                           __attribute__((always_inline)) {
      for_panels<P>([&]<int J>(std::integral_constant<int, J>) __attribute__((always_inline)) {
        const __m256i lo = load_si256(panel[J] + at), hi = load_si256(panel[J] + at + 32);
        fma.template operator()<4 * J + 2 * H, 2>(k, {bf16_pair_half(lo, 0), bf16_pair_half(hi, 0)});
        fma.template operator()<4 * J + 2 * H, 2>(k + 1, {bf16_pair_half(lo, 1), bf16_pair_half(hi, 1)});
      });
    });
  }
  store_rows<ROWS>(p, panels, m0, n, n_end, [&](int i, int h) { return acc[i][h]; });
}

using FloatPanels = void (*)(const MatmulArgs&, const float*, std::int64_t, std::int64_t, std::int64_t, std::int64_t);
template <DType D>
constexpr FloatPanels kFloatPanels[kMaxRows + 1] = {nullptr, float_panels<1, decode_panel_count(1, false), D>,
                                                    float_panels<2, decode_panel_count(2, false), D>};

// ------------------------------------------------------------------ i8, i4
// A's rows as the integer loops read them: per quad of k, 4 signed bytes
// (int8 steps) or two lanes of int16 pairs, steps 0 and 2 then 1 and 3
// (int16 steps); per block (Blocks), the sum of the steps; one scale per row.
struct IntRows {
  const std::int8_t* bytes[kMaxRows];
  const std::int32_t* pairs[kMaxRows];
  const std::int32_t* sums[kMaxRows];
  float scale[kMaxRows];
};

// The 4 bytes of quad q in every lane of a vector.
static inline __m256i quad_lanes(const std::int8_t* steps, std::int64_t q) {
  std::int32_t lane;
  std::memcpy(&lane, steps + 4 * q, sizeof(lane));
  return _mm256_set1_epi32(lane);
}

// A lane's even and odd bytes as int16 (int4: its nibbles, from the low or
// high halves, already unsigned).
struct WordPairs {
  __m256i even, odd;
};
static inline WordPairs signed_words(__m256i w) {
  return {_mm256_srai_epi16(_mm256_slli_epi16(w, 8), 8), _mm256_srai_epi16(w, 8)};
}
template <bool High>
static inline WordPairs nibble_words(__m256i d) {
  const __m256i low4 = _mm256_set1_epi16(0x000f);
  if constexpr (High) return {_mm256_and_si256(_mm256_srli_epi16(d, 4), low4), _mm256_srli_epi16(d, 12)};
  return {_mm256_and_si256(d, low4), _mm256_and_si256(_mm256_srli_epi16(d, 8), low4)};
}

// C[m0 : m0 + ROWS, n : n + 32 P] for P panels of W (i4 or i8) weights.
template <int ROWS, int P, DType W, bool Int16>
void int_panels(const MatmulArgs& p, const IntRows& a, const Blocks& bl, std::int64_t m0, std::int64_t n, std::int64_t n_end) {
  const PackedB& b = *p.packed;
  const std::uint8_t* panel[P];
  const int panels = panel_streams(b, n, n_end, panel);
  const __m256i ones = _mm256_set1_epi16(1);
  // int8 weights stored unsigned (with zero points) are made signed by flipping their top bit: q - 128.
  const __m256i flip = _mm256_set1_epi8(W == DType::i8 && b.zeros ? char(0x80) : 0);
  alignas(32) float total[ROWS][4 * P][8] = {};
  __m256i acc[ROWS][4 * P];
  // acc[.][h] += the 4-k dot products of one vector of weights with quad q
  // of each row. int8 steps: `w` unsigned, or (Signed) signed, multiplied as
  // |w| by A's bytes with w's sign. int16 steps: w's bytes as int16 pairs.
  auto dot = [&]<bool Signed>(int h, __m256i w, std::int64_t q) __attribute__((always_inline)) {
    const __m256i u = Signed ? _mm256_abs_epi8(w) : w;
    for (int i = 0; i < ROWS; ++i) {
      const __m256i s = quad_lanes(a.bytes[i], q);
      acc[i][h] = _mm256_add_epi32(acc[i][h], _mm256_madd_epi16(_mm256_maddubs_epi16(u, Signed ? _mm256_sign_epi8(s, w) : s), ones));
    }
  };
  auto dot16 = [&](int h, WordPairs w, std::int64_t q) __attribute__((always_inline)) {
    for (int i = 0; i < ROWS; ++i) {
      const __m256i even = _mm256_set1_epi32(a.pairs[i][2 * q]), odd = _mm256_set1_epi32(a.pairs[i][2 * q + 1]);
      acc[i][h] = _mm256_add_epi32(acc[i][h], _mm256_add_epi32(_mm256_madd_epi16(w.even, even), _mm256_madd_epi16(w.odd, odd)));
    }
  };
  for (std::int64_t blk = 0; blk < bl.count; ++blk) {
    const std::int64_t q0 = bl.begin(blk), q1 = bl.end(blk);
    for (auto& row : acc)
      for (__m256i& v : row) v = _mm256_setzero_si256();
    if constexpr (W == DType::i4) {
      const __m256i nibble = _mm256_set1_epi8(0x0f);
      for (std::int64_t q = q0; q < q1; ++q)
        for_panels<P>([&]<int J>(std::integral_constant<int, J>) __attribute__((always_inline)) {
          // 64 bytes per 4 k: lane j of the first 32 holds column j in its
          // nibbles' low halves and column j + 16 in their high ones; the
          // second 32, columns 8 + j and 24 + j.
          const std::uint8_t* r = panel[J] + q * 64;
          _mm_prefetch(reinterpret_cast<const char*>(r + kAhead), _MM_HINT_T1);
          const __m256i d0 = load_si256(r), d1 = load_si256(r + 32);
          if constexpr (Int16) {
            dot16(4 * J, nibble_words<false>(d0), q);
            dot16(4 * J + 1, nibble_words<false>(d1), q);
            dot16(4 * J + 2, nibble_words<true>(d0), q);
            dot16(4 * J + 3, nibble_words<true>(d1), q);
          } else {
            dot.template operator()<false>(4 * J, _mm256_and_si256(d0, nibble), q);
            dot.template operator()<false>(4 * J + 1, _mm256_and_si256(d1, nibble), q);
            dot.template operator()<false>(4 * J + 2, _mm256_and_si256(_mm256_srli_epi16(d0, 4), nibble), q);
            dot.template operator()<false>(4 * J + 3, _mm256_and_si256(_mm256_srli_epi16(d1, 4), nibble), q);
          }
        });
    } else {
      // A 64-byte tile row holds rows k .. k + 3 of 16 columns.
      walk_halves<4, kI8KStep>(4 * q0, 4 * q1, [&]<int H>(std::integral_constant<int, H>, std::int64_t k, std::int64_t at)
                                                   __attribute__((always_inline)) {
        for_panels<P>([&]<int J>(std::integral_constant<int, J>) __attribute__((always_inline)) {
          const std::uint8_t* r = panel[J] + at;
          _mm_prefetch(reinterpret_cast<const char*>(r + kAhead), _MM_HINT_T1);
          const __m256i w0 = _mm256_xor_si256(load_si256(r), flip), w1 = _mm256_xor_si256(load_si256(r + 32), flip);
          if constexpr (Int16) {
            dot16(4 * J + 2 * H, signed_words(w0), k / 4);
            dot16(4 * J + 2 * H + 1, signed_words(w1), k / 4);
          } else {
            dot.template operator()<true>(4 * J + 2 * H, w0, k / 4);
            dot.template operator()<true>(4 * J + 2 * H + 1, w1, k / 4);
          }
        });
      });
    }
    // The block's sums in f32: w = (q - zero) * scale, with zero 8 for
    // int4 without zero points, 0 for int8 without, z - 128 for int8's
    // signed-made ones.
    const std::int64_t g = blk / bl.per_group;
    const float no_zero = W == DType::i4 ? 8.0f : 0.0f, shift = W == DType::i8 && b.zeros ? 128.0f : 0.0f;
    for (int j = 0; j < panels; ++j) {
      const std::int64_t at = group_param_index(b, g, n + j * kPanelCols);
      for (int h = 0; h < 4; ++h) {
        __m256 scale, zero;
        group_params8(b, at + 8 * h, no_zero, scale, zero);
        zero = _mm256_sub_ps(zero, _mm256_set1_ps(shift));
        for (int i = 0; i < ROWS; ++i) {
          const __m256 row_scale = _mm256_mul_ps(scale, _mm256_set1_ps(a.scale[i]));
          __m256 t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i][4 * j + h]), row_scale, _mm256_load_ps(total[i][4 * j + h]));
          t = _mm256_fnmadd_ps(_mm256_mul_ps(zero, row_scale), _mm256_set1_ps(float(a.sums[i][blk])), t);
          _mm256_store_ps(total[i][4 * j + h], t);
        }
      }
    }
  }
  store_rows<ROWS>(p, panels, m0, n, n_end, [&](int i, int h) { return _mm256_load_ps(total[i][h]); });
}

using IntPanels = void (*)(const MatmulArgs&, const IntRows&, const Blocks&, std::int64_t, std::int64_t, std::int64_t);
// A task of one row streams decode_panel_count(1) panels side by side; a
// task of more rows passes over one panel at a time, its odd last row too.
template <DType W, bool Int16>
struct IntKernels {
  static constexpr IntPanels alone = int_panels<1, decode_panel_count(1, true), W, Int16>;
  static constexpr IntPanels pass[kMaxRows + 1] = {nullptr, int_panels<1, 1, W, Int16>, int_panels<2, 1, W, Int16>};
};
template <DType W, bool Int16>
void run_int_panels(const MatmulArgs& p, const IntRows* passes, const Blocks& bl, std::int64_t m0, std::int64_t m1,
                    std::int64_t n0, std::int64_t n1) {
  if (m1 - m0 == 1) {
    for (std::int64_t n = n0; n < n1; n += decode_panel_count(1, true) * kPanelCols) IntKernels<W, Int16>::alone(p, passes[0], bl, m0, n, n1);
    return;
  }
  // Panels outside, passes inside: a panel (64-128 KiB) serves every pass from L2.
  for (std::int64_t n = n0; n < n1; n += kPanelCols)
    for (std::int64_t m = m0; m < m1; m += kMaxRows)
      IntKernels<W, Int16>::pass[std::min(kMaxRows, m1 - m)](p, passes[(m - m0) / kMaxRows], bl, m, n, std::min(n1, n + kPanelCols));
}

// Row m of A as int16 steps s of scale max|a| / kMaxStep (NaN when the row
// holds NaN or Inf, so its outputs are NaN), zero past K: `steps` (quads *
// 4, rounded up to 8) gets s, `pairs` per quad the int16 pairs (s0, s2) and
// (s1, s3). Returns the scale.
float int16_row(const MatmulArgs& p, std::int64_t m, std::int64_t quads, std::int32_t* pairs, std::int32_t* steps) {
  __m256 max_abs = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
  for (std::int64_t k = 0; k < p.k; k += 8) {
    const __m256 v = abs8(load_a8(p, m, k, std::min<std::int64_t>(8, p.k - k)));
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, _mm256_set1_ps(3.4028235e38f), _CMP_NLE_UQ));  // Inf or NaN
    max_abs = _mm256_max_ps(max_abs, v);
  }
  const float top = hmax(max_abs);
  const bool finite = _mm256_movemask_ps(bad) == 0;
  const __m256 inv = _mm256_set1_ps(finite && top > 0.0f ? kMaxStep / top : 0.0f);
  for (std::int64_t k = 0; k < quads * 4; k += 8) {
    const __m256 v = k < p.k ? load_a8(p, m, k, std::min<std::int64_t>(8, p.k - k)) : _mm256_setzero_ps();
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(steps + k), _mm256_cvtps_epi32(_mm256_mul_ps(v, inv)));  // nearest even
  }
  const auto pair = [](std::int32_t a, std::int32_t b) { return std::int32_t(std::uint32_t(std::uint16_t(a)) | std::uint32_t(b) << 16); };
  for (std::int64_t q = 0; q < quads; ++q) {
    const std::int32_t* s = steps + 4 * q;
    pairs[2 * q] = pair(s[0], s[2]);
    pairs[2 * q + 1] = pair(s[1], s[3]);
  }
  return !finite ? NAN : top > 0.0f ? top / kMaxStep : 1.0f;
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

// The integer rows of a task: A staged once (int16 steps, or the pre-pass's
// int8 ones read in place, zero from K to a multiple of 64), then passes of
// up to two rows.
void int_decode(const MatmulArgs& p, std::int64_t m0, std::int64_t m1, std::int64_t n0, std::int64_t n1) {
  const Blocks bl(*p.packed);
  const std::int64_t rows = m1 - m0, steps_len = round_up(bl.quads * 4, 8);
  const std::int64_t per_row = p.a_q ? bl.count : 2 * bl.quads + steps_len + bl.count;  // int32s: pairs, steps, sums
  auto* staged = static_cast<std::int32_t*>(thread_scratch(ScratchSlot::a_panel, std::size_t(rows * per_row) * sizeof(std::int32_t)));
  IntRows all[kMaxIntRows / kMaxRows] = {};  // row r in pass r / kMaxRows, slot r % kMaxRows
  for (std::int64_t r = 0; r < rows; ++r) {
    IntRows& pass = all[r / kMaxRows];
    const int i = int(r % kMaxRows);
    std::int32_t* at = staged + r * per_row;
    const std::int64_t m = m0 + r;
    if (p.a_q) {
      const std::int8_t* row = p.a_q + m * p.a_q_stride;
      pass.bytes[i] = row, pass.sums[i] = at, pass.scale[i] = p.a_scales[m];
      block_sums(row, bl, at);
    } else {
      std::int32_t* steps = at + 2 * bl.quads;
      pass.pairs[i] = at, pass.sums[i] = steps + steps_len;
      pass.scale[i] = int16_row(p, m, bl.quads, at, steps);
      block_sums(steps, bl, steps + steps_len);
    }
  }
  const bool i4 = p.packed->dtype == DType::i4;
  if (i4) (p.a_q ? run_int_panels<DType::i4, false> : run_int_panels<DType::i4, true>)(p, all, bl, m0, m1, n0, n1);
  else (p.a_q ? run_int_panels<DType::i8, false> : run_int_panels<DType::i8, true>)(p, all, bl, m0, m1, n0, n1);
}

}  // namespace

// Decode (f32 M <= 2, others <= 16, in passes of up to two rows over the task's
// panels; panel by panel with every pass instead measured no faster at M 8
// and 16 and slower at 3, whose single-row pass streams 3 panels). Float
// weights: A's rows converted to f32 once per task (W8A8 takes the integer
// rows), zero past K up to bf16's 32.
void matmul_decode(const MatmulArgs& p, const MatmulTiling&, std::int64_t m0, std::int64_t m1, std::int64_t n0,
                   std::int64_t n1) {
  const DType dtype = p.packed->dtype;
  if (dtype == DType::i8 || dtype == DType::i4) return int_decode(p, m0, m1, n0, n1);
  const std::int64_t rows = m1 - m0, lda = round_up(std::max<std::int64_t>(p.k, 1), kBf16KStep);
  auto* a = static_cast<float*>(thread_scratch(ScratchSlot::a_panel, std::size_t(rows * lda) * sizeof(float)));
  for (std::int64_t m = m0; m < m1; ++m)
    for (std::int64_t k = 0; k < lda; k += 8) {
      const std::int64_t valid = std::clamp<std::int64_t>(p.k - k, 0, 8);
      _mm256_store_ps(a + (m - m0) * lda + k, valid > 0 ? load_a8(p, m, k, valid) : _mm256_setzero_ps());
    }
  const FloatPanels* kernels = dtype == DType::f32 ? kFloatPanels<DType::f32> : kFloatPanels<DType::bf16>;
  for (std::int64_t m = m0; m < m1; m += kMaxRows) {
    const std::int64_t r = std::min(kMaxRows, m1 - m);
    for (std::int64_t n = n0; n < n1; n += decode_panel_count(r, false) * kPanelCols)
      kernels[r](p, a + (m - m0) * lda, lda, m, n, n1);
  }
}

}  // namespace tessera::kernels::avx2
