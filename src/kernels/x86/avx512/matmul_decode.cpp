#include <algorithm>
#include <type_traits>

#include "kernels/scratch.hpp"
#include "kernels/x86/avx512/epilogue.hpp"
#include "kernels/x86/avx512/matmul_pack.hpp"

namespace tessera::kernels::avx512 {

namespace {

constexpr std::int64_t kMaxRows = 4;   // 4 rows x 2 panels x 2 halves = 16 accumulators

// Row k of one f32 panel as 32 lanes (two registers).
inline void weight_row(const std::uint8_t* panel, std::int64_t k, __m512& w0, __m512& w1) {
  const auto* r = reinterpret_cast<const float*>(panel) + k * kPanelCols;
  w0 = _mm512_load_ps(r), w1 = _mm512_load_ps(r + 16);
}

// Byte e of each 4-byte lane, sign- or zero-extended.
template <int E>
inline __m512i lane_byte(__m512i d, bool is_unsigned) {
  const __m512i up = E == 3 ? d : _mm512_slli_epi32(d, 24 - 8 * E);
  return is_unsigned ? _mm512_srli_epi32(up, 24) : _mm512_srai_epi32(up, 24);
}

// The accumulators of ROWS rows x `halves` 16-column halves from column n
// through the epilogue into C, the halves past n_end left out.
template <int ROWS, int H>
inline void store_rows(const MatmulArgs& p, const __m512 (&acc)[ROWS][H], int halves, std::int64_t m0, std::int64_t n,
                       std::int64_t n_end) {
  for (int i = 0; i < ROWS; ++i)
    for (int h = 0; h < halves; ++h) {
      const std::int64_t col = n + 16 * h;
      if (col < n_end) epilogue16(p, acc[i][h], m0 + i, col, tail_mask(n_end - col));
    }
}

// C[m0 : m0 + ROWS, n : n + 32 P] for P panels streamed side by side over
// all of K: each weight row is dequantized in registers and used at once by
// every row of A, never written back to memory. f32 (more than two rows),
// bf16 and i8; i4 has its own loop (decode_i4).
template <int ROWS, int P, DType D>
void decode_panels(const MatmulArgs& p, const float* a, std::int64_t lda, std::int64_t m0, std::int64_t n,
                   std::int64_t n_end) {
  const PackedB& b = *p.packed;
  const int panels = int(std::min<std::int64_t>(P, (n_end - n + kPanelCols - 1) / kPanelCols));
  const std::int64_t row_bytes = panel_row_bytes(D), panel_bytes = padded_k(D, b.k) * row_bytes;
  const auto* base = static_cast<const std::uint8_t*>(b.values) + n / kPanelCols * panel_bytes;
  const std::uint8_t* panel[P];
  for (int j = 0; j < P; ++j) panel[j] = base + std::min(j, panels - 1) * panel_bytes;  // a short tail re-reads the last
  constexpr bool kQuantized = D == DType::i8;
  const std::int64_t group = kQuantized ? b.group_size : b.k;
  __m512 acc[ROWS][2 * P];
  for (auto& row : acc)
    for (__m512& v : row) v = _mm512_setzero_ps();
  auto fma_row = [&](std::int64_t k, const __m512 (&w)[2 * P]) {
#pragma GCC unroll 4
    for (int i = 0; i < ROWS; ++i) {
      const __m512 av = _mm512_set1_ps(a[i * lda + k]);
#pragma GCC unroll 8
      for (int h = 0; h < 2 * P; ++h) acc[i][h] = _mm512_fmadd_ps(av, w[h], acc[i][h]);
    }
  };
  // Row k times one column half (H) of every panel.
  auto fma_half = [&]<int H>(std::integral_constant<int, H>, std::int64_t k, const __m512 (&w)[P]) __attribute__((always_inline)) {
#pragma GCC unroll 4
    for (int i = 0; i < ROWS; ++i) {
      const __m512 av = _mm512_set1_ps(a[i * lda + k]);
#pragma GCC unroll 4
      for (int j = 0; j < P; ++j) acc[i][2 * j + H] = _mm512_fmadd_ps(av, w[j], acc[i][2 * j + H]);
    }
  };
  GroupScales gs[P] = {};  // past `panels`: the last panel's again
  const std::int64_t ahead = groups_ahead(b, kPanelStreamAhead);
  for (std::int64_t g0 = 0; g0 < b.k; g0 += group) {
    if constexpr (kQuantized)
      for (int j = 0; j < P; ++j) {
        const std::int64_t col = n + std::min(j, panels - 1) * kPanelCols;
        gs[j].load(b, g0 / group, col);
        prefetch_group_params(b, g0 / group + ahead, col);
      }
    const std::int64_t g1 = std::min(b.k, g0 + group);
    // Tile rows in the order of memory (walk_halves): one stream per panel.
    if constexpr (D == DType::bf16) {
      // A 64-byte tile row holds the pairs (k, k+1) of 16 columns: the even
      // one is the low half of each lane, the odd the high.
      walk_halves<2, kBf16KStep>(g0, g1, [&]<int H>(std::integral_constant<int, H> h, std::int64_t k, std::int64_t at)
                                             __attribute__((always_inline)) {
        __m512 even[P], odd[P];
#pragma GCC unroll 4
        for (int j = 0; j < P; ++j) {
          const std::uint8_t* r = panel[j] + at;
          _mm_prefetch(reinterpret_cast<const char*>(r + kPanelStreamAhead), _MM_HINT_T1);
          const __m512i d = _mm512_load_si512(r);
          even[j] = bf16_even(d);
          odd[j] = bf16_odd(d);
        }
        fma_half(h, k, even);
        fma_half(h, k + 1, odd);
      });
    } else if constexpr (D == DType::i8) {
      // A 64-byte tile row holds rows k .. k+3 (A is zero-padded to a multiple of 4).
      walk_halves<4, kI8KStep>(g0, g1, [&]<int H>(std::integral_constant<int, H> h, std::int64_t k, std::int64_t at)
                                           __attribute__((always_inline)) {
        __m512i d[P];
#pragma GCC unroll 4
        for (int j = 0; j < P; ++j) {
          const std::uint8_t* r = panel[j] + at;
          _mm_prefetch(reinterpret_cast<const char*>(r + kPanelStreamAhead), _MM_HINT_T1);
          d[j] = _mm512_load_si512(r);
        }
        const bool u = b.zeros != nullptr;
        auto row = [&]<int E>(std::integral_constant<int, E>) __attribute__((always_inline)) {
          __m512 w[P];
          for (int j = 0; j < P; ++j) w[j] = gs[j].apply(lane_byte<E>(d[j], u), H);
          fma_half(h, k + E, w);
        };
        row(std::integral_constant<int, 0>()), row(std::integral_constant<int, 1>());
        row(std::integral_constant<int, 2>()), row(std::integral_constant<int, 3>());
      });
    } else {
      for (std::int64_t k = g0; k < g1; ++k) {
        // The hardware prefetcher stops at page boundaries: each panel's
        // stream runs kPanelStreamAhead bytes ahead of itself (a row: two lines).
        for (int j = 0; j < P; ++j) {
          _mm_prefetch(reinterpret_cast<const char*>(panel[j] + k * row_bytes + kPanelStreamAhead), _MM_HINT_T1);
          _mm_prefetch(reinterpret_cast<const char*>(panel[j] + k * row_bytes + kPanelStreamAhead + 64), _MM_HINT_T1);
        }
        __m512 w[2 * P];
        for (int j = 0; j < P; ++j) weight_row(panel[j], k, w[2 * j], w[2 * j + 1]);
        fma_row(k, w);
      }
    }
  }
  store_rows(p, acc, 2 * panels, m0, n, n_end);
}

// i4 weights, P panels streamed side by side (decode_panel_count). Per group
// of K, the nibbles enter the FMAs unscaled: (q - 8) comes from a 16-entry
// table by vpermps, which reads only an index's low 4 bits, so a nibble
// needs no mask once shifted to the bottom of its lane; the group's sums are
// scaled once at its end, and an explicit zero point z adds -(z - 8) *
// scale * (the group's sum of a). Per 32 weights that is 6
// instructions, against 9 for widening, converting and scaling each weight
// (measured: the loop was compute-bound at half the read bandwidth).
template <int ROWS, int P>
void decode_i4(const MatmulArgs& p, const float* a, std::int64_t lda, std::int64_t m0, std::int64_t n, std::int64_t n_end) {
  const PackedB& b = *p.packed;
  const std::int64_t panel_bytes = padded_k(DType::i4, b.k) * 16;
  const int panels = int(std::min<std::int64_t>(P, (n_end - n + kPanelCols - 1) / kPanelCols));
  const auto* base = static_cast<const std::uint8_t*>(b.values) + n / kPanelCols * panel_bytes;
  const std::uint8_t* panel[P];
  for (int j = 0; j < P; ++j) panel[j] = base + std::min(j, panels - 1) * panel_bytes;  // a short tail re-reads the last
  const __m512 centered = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
  __m512 acc[ROWS][2 * P];
  for (auto& row : acc)
    for (__m512& v : row) v = _mm512_setzero_ps();
  const std::int64_t ahead = groups_ahead(b, kPanelStreamAhead);
  for (std::int64_t g0 = 0; g0 < b.k; g0 += b.group_size) {
    for (int j = 0; j < panels; ++j) prefetch_group_params(b, g0 / b.group_size + ahead, n + j * kPanelCols);
    const std::int64_t g1 = std::min(b.k, g0 + b.group_size);
    __m512 group[ROWS][2 * P];
    for (auto& row : group)
      for (__m512& v : row) v = _mm512_setzero_ps();
    auto fma_row = [&](std::int64_t k, const __m512 (&w)[2 * P]) __attribute__((always_inline)) {
#pragma GCC unroll 4
      for (int i = 0; i < ROWS; ++i) {
        const __m512 av = _mm512_set1_ps(a[i * lda + k]);
#pragma GCC unroll 8
        for (int h = 0; h < 2 * P; ++h) group[i][h] = _mm512_fmadd_ps(av, w[h], group[i][h]);
      }
    };
    // Row k from the 64 bytes holding it: byte k % 4 of each lane, shifted
    // to the bottom (by a count in a register: two instructions, so the
    // quads below shift by constants).
    auto step = [&](std::int64_t k) __attribute__((always_inline)) {
      const __m128i shift = _mm_cvtsi32_si128(int(8 * (k % 4)));
      __m512 w[2 * P];
      for (int j = 0; j < P; ++j) {
        const __m512i bytes = _mm512_srl_epi32(_mm512_load_si512(panel[j] + k / 4 * 64), shift);
        w[2 * j] = _mm512_permutexvar_ps(bytes, centered);
        w[2 * j + 1] = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), centered);
      }
      fma_row(k, w);
    };
    // Rows k .. k + 3 (k a multiple of 4) from one load per panel.
    auto quad = [&](std::int64_t k) __attribute__((always_inline)) {
      __m512i d[P];
      for (int j = 0; j < P; ++j) d[j] = _mm512_load_si512(panel[j] + k * 16);
      auto row = [&]<int E>(std::integral_constant<int, E>) __attribute__((always_inline)) {
        __m512 w[2 * P];
#pragma GCC unroll 4
        for (int j = 0; j < P; ++j) {
          w[2 * j] = _mm512_permutexvar_ps(_mm512_srli_epi32(d[j], 8 * E), centered);
          w[2 * j + 1] = _mm512_permutexvar_ps(_mm512_srli_epi32(d[j], 8 * E + 4), centered);
        }
        fma_row(k + E, w);
      };
      row(std::integral_constant<int, 0>()), row(std::integral_constant<int, 1>());
      row(std::integral_constant<int, 2>()), row(std::integral_constant<int, 3>());
    };
    std::int64_t k = g0;
    for (; k < g1 && k % 4 != 0; ++k) step(k);  // a group that starts inside a quad
    for (; k + 4 <= g1; k += 4) {  // a 64-byte line of each panel per 4 k
      for (int j = 0; j < panels; ++j)
        _mm_prefetch(reinterpret_cast<const char*>(panel[j] + k * 16 + kPanelStreamAhead), _MM_HINT_T1);
      quad(k);
    }
    for (; k < g1; ++k) step(k);
    float a_sum[ROWS] = {};
    if (b.zeros)
      for (int i = 0; i < ROWS; ++i)
        for (std::int64_t k = g0; k < g1; ++k) a_sum[i] += a[i * lda + k];
    for (int h = 0; h < 2 * panels; ++h) {
      const std::int64_t at = group_param_index(b, g0 / b.group_size, n + 16 * h);
      const __m512 scale = load16(advance(b.scales, b.scale_dtype, at), b.scale_dtype, 0xffff);
      for (int i = 0; i < ROWS; ++i) acc[i][h] = _mm512_fmadd_ps(scale, group[i][h], acc[i][h]);
      if (!b.zeros) continue;
      const __m512 z = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.zeros + at))));
      const __m512 shift = _mm512_mul_ps(_mm512_sub_ps(z, _mm512_set1_ps(8.0f)), scale);
      for (int i = 0; i < ROWS; ++i) acc[i][h] = _mm512_fnmadd_ps(shift, _mm512_set1_ps(a_sum[i]), acc[i][h]);
    }
  }
  store_rows(p, acc, 2 * panels, m0, n, n_end);
}

// Panels streamed side by side: four streams in flight for one row of A
// (and two of f32, which takes no registers to convert); more rows, two,
// for the registers.
constexpr int decode_panel_count(DType d, std::int64_t rows) { return rows == 1 || (rows == 2 && d == DType::f32) ? 4 : 2; }
using DecodePanels = void (*)(const MatmulArgs&, const float*, std::int64_t, std::int64_t, std::int64_t, std::int64_t);
template <DType D>
constexpr DecodePanels kDecodePanels[kMaxRows + 1] = {
    nullptr, decode_panels<1, decode_panel_count(D, 1), D>, decode_panels<2, decode_panel_count(D, 2), D>,
    decode_panels<3, decode_panel_count(D, 3), D>, decode_panels<4, decode_panel_count(D, 4), D>};
template <>
constexpr DecodePanels kDecodePanels<DType::i4>[kMaxRows + 1] = {
    nullptr, decode_i4<1, decode_panel_count(DType::i4, 1)>, decode_i4<2, decode_panel_count(DType::i4, 2)>,
    decode_i4<3, decode_panel_count(DType::i4, 3)>, decode_i4<4, decode_panel_count(DType::i4, 4)>};

}  // namespace

// Decode (M <= 4 per pass): packed f32 / bf16 / i8 / i4 weights streamed once,
// two or four panels at a time, dequantized in registers. A's rows are converted to
// f32 once per task (W8A8: the int8 steps of each row's scale).
void matmul_decode(const MatmulArgs& p, const MatmulTiling&, std::int64_t m0, std::int64_t m1, std::int64_t n0,
                   std::int64_t n1) {
  const std::int64_t rows = m1 - m0, lda = round_up(std::max<std::int64_t>(p.k, 1), 4);
  auto* a = static_cast<float*>(thread_scratch(ScratchSlot::a_panel, std::size_t(rows * lda) * sizeof(float)));
  for (std::int64_t m = m0; m < m1; ++m) {
    for (std::int64_t k = 0; k < lda; k += 16) {
      const __mmask16 mask = tail_mask(lda - k), valid = tail_mask(std::max<std::int64_t>(0, p.k - k));
      const __m512 v = p.a_q ? _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(
                                                   valid, p.a_q + m * p.a_q_stride + k))),
                                               _mm512_set1_ps(p.a_scales[m]))
                             : load_a16(p, m, k, valid);
      _mm512_mask_storeu_ps(a + (m - m0) * lda + k, mask, v);  // zero past K
    }
  }
  const DType dtype = p.packed->dtype;
  const DecodePanels* kernels = dtype == DType::i4     ? kDecodePanels<DType::i4>
                                : dtype == DType::f32  ? kDecodePanels<DType::f32>
                                : dtype == DType::bf16 ? kDecodePanels<DType::bf16>
                                                       : kDecodePanels<DType::i8>;
  for (std::int64_t m = m0; m < m1; m += kMaxRows) {
    const std::int64_t r = std::min(kMaxRows, m1 - m);
    const std::int64_t step = decode_panel_count(dtype, r) * kPanelCols;
    for (std::int64_t n = n0; n < n1; n += step) kernels[r](p, a + (m - m0) * lda, lda, m, n, n1);
  }
}

}  // namespace tessera::kernels::avx512
