#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/scratch.hpp"
#include "kernels/x86/avx512/epilogue.hpp"
#include "kernels/x86/avx512/matmul_pack.hpp"

namespace tessera::kernels::avx512_bf16 {

namespace {

using namespace avx512;  // this level extends AVX-512: its helpers apply as they are

constexpr std::int64_t kMaxRows = 4;
// How A's rows enter the dot products (vpdpbusd, 4 k per lane, the weights
// the unsigned bytes): int8 steps quantized by the op's pre-pass (W4A8),
// or int16 steps quantized here (weight-only), each split into a high and a
// low signed byte, one dot product per byte.
enum class AInt { i8, i16 };

// A's rows as the kernels read them: per quad of k, one 4-byte lane (int8:
// the 4 steps; int16: two lanes, the 4 steps' high bytes and their low
// bytes); per block, the sum of the steps; one scale per row.
struct StagedA {
  const std::int32_t* rows[kMaxRows];
  const std::int32_t* sums;  // [row][block]
  const float* scales;       // [row]
};

// C[m0 : m0 + ROWS, n : n + 32 P] over all of K, P panels streamed side by
// side (one row of A: four streams in flight; more rows: fewer, for the
// registers): panels n, n + stride, ... (each stream runs on through
// `stride` panels in a row). int8 weights (W): 64 bytes of a tile row hold
// four k of 16 columns, read in the order of memory (walk_halves), the
// signed ones made unsigned by a flip of the top bit (w + 128, taken back
// as the zero point 128); int4: 64 bytes of a panel hold four k of its 32
// columns, 4 per lane (packed_weights.hpp): the nibbles masked in place are
// the unsigned bytes of the dot products against A's steps, q for the low
// nibbles (columns 0-15 of the panel) and 16 q for the high ones (16-31, the
// factor taken out exactly at the block's end, so no shift is spent per
// weight); per block the i32 sums give sum(a (q - zero)) with the block's
// sum of a, then take the group's scale. Per 128 int4 weights and row of A
// that is 2 (int8 A) or 4 (int16 A) dot products and 2 masks, per 64 int8
// weights 2 dot products and a flip, where converting them to f32 costs
// ~20-24 (measured: the f32 loops are bound by those at 55-70 % of the read
// bandwidth). Against int16 steps as words (vpdpwssd,
// 3 shifts and 4 masks per 128 weights) the split bytes run 1.3x faster
// from L3 (AMD EPYC, Zen 4, 4096 x 4096, 1 thread: 24.6 -> 32.5 GB/s).
template <DType W, AInt A, int ROWS, int P>
void dot_panels(const MatmulArgs& p, const StagedA& a, const Blocks& bl, std::int64_t m0, std::int64_t n,
                   std::int64_t n_end, std::int64_t stride) {
  const PackedB& b = *p.packed;
  const std::int64_t panel_bytes = bl.quads * 4 * panel_row_bytes(W);
  const int panels = int(std::min<std::int64_t>(P, (n_end - n + stride * kPanelCols - 1) / (stride * kPanelCols)));
  const auto* base = static_cast<const std::uint8_t*>(b.values) + n / kPanelCols * panel_bytes;
  const std::uint8_t* panel[P];
  for (int j = 0; j < P; ++j) panel[j] = base + std::min(j, panels - 1) * stride * panel_bytes;  // a short tail re-reads the last
  auto column = [&](int h) { return n + h / 2 * stride * kPanelCols + h % 2 * 16; };
  const __m512i low = _mm512_set1_epi8(0x0f), high = _mm512_set1_epi8(int8_t(0xf0));
  constexpr int kBytes = A == AInt::i8 ? 1 : 2;  // dot products per weight byte: A's bytes per step
  __m512 acc[ROWS][2 * P];
  for (auto& row : acc)
    for (__m512& v : row) v = _mm512_setzero_ps();
  const std::int64_t ahead = groups_ahead(b, kPanelStreamAhead);
  for (std::int64_t g = 0; g < ahead; ++g)
    for (int j = 0; j < panels; ++j) prefetch_group_params(b, g, column(2 * j));
  for (std::int64_t blk = 0; blk < bl.count; ++blk) {
    if (blk % bl.per_group == 0)
      for (int j = 0; j < panels; ++j) prefetch_group_params(b, blk / bl.per_group + ahead, column(2 * j));
    __m512i dot[ROWS][2 * P][kBytes];  // int16: [0] against the high bytes, [1] the low
    for (auto& row : dot)
      for (auto& col : row)
        for (__m512i& v : col) v = _mm512_setzero_si512();
    auto steps_of = [&](std::int64_t q, __m512i (&av)[ROWS][kBytes]) __attribute__((always_inline)) {
      for (int i = 0; i < ROWS; ++i)
        for (int e = 0; e < kBytes; ++e) av[i][e] = _mm512_set1_epi32(a.rows[i][kBytes * q + e]);
    };
    if constexpr (W == DType::i4) {
      for (std::int64_t q = bl.begin(blk), q1 = bl.end(blk); q < q1; ++q) {
        __m512i av[ROWS][kBytes];
        steps_of(q, av);
#pragma GCC unroll 4
        for (int j = 0; j < P; ++j) {
          const std::uint8_t* r = panel[j] + q * 64;
          // Past `panels`: the last panel again, harmless.
          _mm_prefetch(reinterpret_cast<const char*>(r + kPanelStreamAhead), _MM_HINT_T1);
          const __m512i d = _mm512_load_si512(r);
          const __m512i w[2] = {_mm512_and_si512(d, low), _mm512_and_si512(d, high)};
#pragma GCC unroll 4
          for (int i = 0; i < ROWS; ++i)
            for (int h = 0; h < 2; ++h)
              for (int e = 0; e < kBytes; ++e) dot[i][2 * j + h][e] = _mm512_dpbusd_epi32(dot[i][2 * j + h][e], w[h], av[i][e]);
        }
      }
    } else {
      const __m512i flip = _mm512_set1_epi8(b.zeros ? 0 : char(0x80));  // zero points: stored unsigned
      walk_halves<4, kI8KStep>(4 * bl.begin(blk), 4 * bl.end(blk), [&]<int H>(std::integral_constant<int, H>, std::int64_t k,
                                                                           std::int64_t at) __attribute__((always_inline)) {
        __m512i av[ROWS][kBytes];
        steps_of(k / 4, av);
#pragma GCC unroll 4
        for (int j = 0; j < P; ++j) {
          const std::uint8_t* r = panel[j] + at;
          _mm_prefetch(reinterpret_cast<const char*>(r + kPanelStreamAhead), _MM_HINT_T1);
          const __m512i w = _mm512_xor_si512(_mm512_load_si512(r), flip);
#pragma GCC unroll 4
          for (int i = 0; i < ROWS; ++i)
            for (int e = 0; e < kBytes; ++e) dot[i][2 * j + H][e] = _mm512_dpbusd_epi32(dot[i][2 * j + H][e], w, av[i][e]);
        }
      });
    }
    // The block's sums of q a: int4's high nibbles' dot products are 16x
    // theirs (exact multiples of 16); an int16 step is 256 hi + lo.
    auto sum_qa = [&](int i, int h) {
      const bool x16 = W == DType::i4 && h % 2;
      if constexpr (A == AInt::i8) return x16 ? _mm512_srai_epi32(dot[i][h][0], 4) : dot[i][h][0];
      else
        return x16 ? _mm512_add_epi32(_mm512_slli_epi32(dot[i][h][0], 4), _mm512_srai_epi32(dot[i][h][1], 4))
                   : _mm512_add_epi32(_mm512_slli_epi32(dot[i][h][0], 8), dot[i][h][1]);
    };
    // h runs to the constant 2 P so that dot is indexed by constants and
    // stays in registers (a run-time bound put it in memory too: a copy of
    // each accumulator per quad, 1.5x the loop's instructions).
#pragma GCC unroll 8
    for (int h = 0; h < 2 * P; ++h) {
      if (h >= 2 * panels) break;
      const std::int64_t at = group_param_index(b, blk / bl.per_group, column(h));
      const __m512 scale = load16(advance(b.scales, b.scale_dtype, at), b.scale_dtype, 0xffff);
      const __m512 zero = b.zeros ? _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.zeros + at))))
                                  : _mm512_set1_ps(W == DType::i4 ? 8.0f : 128.0f);
      for (int i = 0; i < ROWS; ++i) {
        const __m512 exact = _mm512_fnmadd_ps(zero, _mm512_set1_ps(float(a.sums[i * bl.count + blk])), _mm512_cvtepi32_ps(sum_qa(i, h)));
        acc[i][h] = _mm512_fmadd_ps(scale, exact, acc[i][h]);
      }
    }
  }
  for (int j = 0; j < panels; ++j)
    epilogue_rows32(p, ROWS, m0, column(2 * j), n_end, [&](std::int64_t i, int h) {
      return _mm512_mul_ps(acc[i][2 * j + h], _mm512_set1_ps(a.scales[i]));
    });
}

template <DType W, AInt A, int ROWS, int P>
void dot_rows(const MatmulArgs& p, const StagedA& a, const Blocks& bl, std::int64_t m0, std::int64_t n0,
                 std::int64_t n1) {
  // Panels t, t + Q, t + 2Q, ... side by side: each stream runs on through Q
  // panels in a row, so the prefetcher is not restarted every P panels.
  const std::int64_t q = panels_of(n1 - n0) / P;
  for (std::int64_t t = 0; t < q; ++t) dot_panels<W, A, ROWS, P>(p, a, bl, m0, n0 + t * kPanelCols, n1, q);
  for (std::int64_t n = n0 + q * P * kPanelCols; n < n1; n += P * kPanelCols) dot_panels<W, A, ROWS, P>(p, a, bl, m0, n, n1, 1);
}

using DotRows = void (*)(const MatmulArgs&, const StagedA&, const Blocks&, std::int64_t, std::int64_t, std::int64_t);
template <DType W, AInt A>
constexpr DotRows kDotRows[kMaxRows + 1] = {nullptr, dot_rows<W, A, 1, 4>, dot_rows<W, A, 2, 2>, dot_rows<W, A, 3, 1>,
                                            dot_rows<W, A, 4, 1>};

// Row m of A as int16 steps s of scale max|a| / kMaxInt16Step (NaN when the row
// holds NaN or Inf, so its outputs are NaN), zero past K: into `steps`, and
// into `lanes` as two 4-byte lanes per quad, the signed bytes hi and lo of
// s = 256 hi + lo (lo the low byte of s as int8, hi = (s + 128) >> 8).
// load(k, mask) gives the row's 16 elements from k as f32 (through
// load_a16 per vector, the dtype switched each time, and a float max and a
// compare per vector, staging took 1.6 us a task at K = 4096).
template <class Load>
__attribute__((always_inline)) inline float int16_row(Load&& load, std::int64_t k_len, std::int64_t quads, std::int16_t* steps,
                                                      std::int32_t* lanes) {
  const std::int32_t bits = max_magnitude_bits(load, k_len);
  float max_abs;
  std::memcpy(&max_abs, &bits, sizeof(max_abs));
  const float scale = bits >= kNonFiniteBits ? NAN : max_abs > 0.0f ? max_abs / kMaxInt16Step : 1.0f;
  const __m512 inv = _mm512_set1_ps(bits < kNonFiniteBits && max_abs > 0.0f ? kMaxInt16Step / max_abs : 0.0f);
  for (std::int64_t k = 0; k < quads * 4; k += 32) {
    __m512i s[2];
    for (int h = 0; h < 2; ++h) {
      const std::int64_t at = k + 16 * h;
      const __m512 v = at < k_len ? load(at, tail_mask(k_len - at)) : _mm512_setzero_ps();
      s[h] = _mm512_cvtps_epi32(_mm512_mul_ps(v, inv));
    }
    const __m512i words = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(s[0])), _mm512_cvtepi32_epi16(s[1]), 1);
    const std::int64_t left = quads * 4 - k;  // a multiple of 4, at least 4
    _mm512_mask_storeu_epi16(steps + k, tail_mask32(left), words);
    const __m256i lo = _mm512_cvtepi16_epi8(words);
    const __m256i hi = _mm512_cvtepi16_epi8(_mm512_srai_epi16(_mm512_add_epi16(words, _mm512_set1_epi16(128)), 8));
    // Per 128-bit lane, quads 0 1 | 2 3 of it: hi lo interleaved by quad.
    const __m256i q01 = _mm256_unpacklo_epi32(hi, lo), q23 = _mm256_unpackhi_epi32(hi, lo);
    const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_permute2x128_si256(q01, q23, 0x20)),
                                            _mm256_permute2x128_si256(q01, q23, 0x31), 1);
    _mm512_mask_storeu_epi32(lanes + k / 2, tail_mask(left / 2), both);
  }
  return scale;
}
float int16_row(const MatmulArgs& p, std::int64_t m, std::int64_t quads, std::int16_t* steps, std::int32_t* lanes) {
  float scale = 0.0f;
  with_a_row(p, m, [&](auto load) { scale = int16_row(load, p.k, quads, steps, lanes); });
  return scale;
}

// The sum of steps [k0, k1) (int8 or int16), 32 at a time.
template <class T>
std::int32_t sum_steps(const T* s, std::int64_t k0, std::int64_t k1) {
  __m512i sum = _mm512_setzero_si512();
  for (std::int64_t k = k0; k < k1; k += 32) {
    const __mmask32 mask = tail_mask32(k1 - k);
    const __m512i words = sizeof(T) == 1 ? _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(mask, s + k)) : _mm512_maskz_loadu_epi16(mask, s + k);
    sum = _mm512_add_epi32(sum, _mm512_madd_epi16(words, _mm512_set1_epi16(1)));
  }
  return _mm512_reduce_add_epi32(sum);
}

// Quantized weights streamed once per 4 rows of A and multiplied as
// integers: with A quantized per token by the op's pre-pass (W4A8), or else
// (weight-only) with each row of A quantized here to int16 steps of its
// max|a| / 32639 (per element at most half a step off, finer than bf16's
// rounding unless the row's largest value exceeds its RMS 256-fold).
template <DType W>
void matmul_quantized(const MatmulArgs& p, std::int64_t m0, std::int64_t m1, std::int64_t n0, std::int64_t n1) {
  const Blocks bl(*p.packed);
  // Per row of A staged here: 2 lanes, then 4 int16 steps (as many bytes), per quad.
  const std::int64_t rows = m1 - m0, lanes = p.a_q ? 0 : 2 * bl.quads;
  auto* scratch = static_cast<std::int32_t*>(thread_scratch(
      ScratchSlot::a_panel, std::size_t(rows * (2 * lanes + bl.count + 1)) * sizeof(std::int32_t)));
  std::int32_t* staged = scratch;
  auto* steps16 = reinterpret_cast<std::int16_t*>(staged + rows * lanes);
  std::int32_t* sums = staged + rows * 2 * lanes;
  auto* scales = reinterpret_cast<float*>(sums + rows * bl.count);
  for (std::int64_t m = m0; m < m1; ++m) {
    const std::int64_t r = m - m0;
    auto sum_blocks = [&](const auto* steps) {  // the sum of each block's steps
      for (std::int64_t blk = 0; blk < bl.count; ++blk) sums[r * bl.count + blk] = sum_steps(steps, 4 * bl.begin(blk), 4 * bl.end(blk));
    };
    if (p.a_q) {
      scales[r] = p.a_scales[m];
      sum_blocks(p.a_q + m * p.a_q_stride);
    } else {
      std::int16_t* steps = steps16 + r * 4 * bl.quads;
      scales[r] = int16_row(p, m, bl.quads, steps, staged + r * lanes);
      sum_blocks(steps);
    }
  }
  for (std::int64_t m = m0; m < m1; m += kMaxRows) {
    const std::int64_t r = std::min(kMaxRows, m1 - m);
    StagedA a{{}, sums + (m - m0) * bl.count, scales + (m - m0)};
    for (std::int64_t i = 0; i < r; ++i)
      a.rows[i] = p.a_q ? reinterpret_cast<const std::int32_t*>(p.a_q + (m + i) * p.a_q_stride) : staged + (m - m0 + i) * lanes;
    if constexpr (W == DType::i4)
      (p.a_q ? kDotRows<W, AInt::i8> : kDotRows<W, AInt::i16>)[r](p, a, bl, m, n0, n1);
    else
      kDotRows<W, AInt::i16>[r](p, a, bl, m, n0, n1);  // W8A8 has its own rows
  }
  if (p.stream_c) _mm_sfence();
}

}  // namespace

void matmul_i4_vnni(const MatmulArgs& p, const MatmulTiling&, std::int64_t m0, std::int64_t m1, std::int64_t n0,
                    std::int64_t n1) {
  matmul_quantized<DType::i4>(p, m0, m1, n0, n1);
}

void matmul_w8_vnni(const MatmulArgs& p, const MatmulTiling&, std::int64_t m0, std::int64_t m1, std::int64_t n0,
                    std::int64_t n1) {
  matmul_quantized<DType::i8>(p, m0, m1, n0, n1);
}

}  // namespace tessera::kernels::avx512_bf16
