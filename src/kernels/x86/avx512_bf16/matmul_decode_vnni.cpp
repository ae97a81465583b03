#include <algorithm>
#include <type_traits>

#include "kernels/x86/avx512/epilogue.hpp"
#include "kernels/x86/avx512/matmul_pack.hpp"

namespace tessera::kernels::avx512_bf16 {

namespace {

using namespace avx512;  // this level extends AVX-512: its helpers apply as they are

constexpr std::int64_t kMaxRows = 4;

// C[m0 : m0 + ROWS, n : n + 32 P] over all of K, P panels streamed side by
// side: one row of A keeps four streams in flight (measured: 83 % of the
// read bandwidth with two, 98 % with four), more rows take two (their
// accumulators would not fit the registers). Each 64-byte tile row holds
// four k of 16 columns, exactly the operand of one vpdpbusd: per row of A,
// one instruction per 64 weights, against the ~20 that dequantizing them to
// f32 costs. A's int8 steps come offset by +128 (unsigned); the offset is
// taken back with the weights' column offsets (128 x each column's sum,
// computed when they were quantized).
template <int ROWS, int P>
void decode_panels(const MatmulArgs& p, const std::uint32_t* a, std::int64_t lda, std::int64_t m0, std::int64_t n,
                   std::int64_t n_end) {
  const PackedB& b = *p.packed;
  const std::int64_t k_pad = padded_k(DType::i8, std::max<std::int64_t>(b.k, 1)), quads = b.k > 0 ? k_pad / 4 : 0;
  const std::int64_t panel_bytes = k_pad * kPanelCols;
  const int panels = int(std::min<std::int64_t>(P, (n_end - n + kPanelCols - 1) / kPanelCols));
  const auto* base = static_cast<const std::int8_t*>(b.values) + n / kPanelCols * panel_bytes;
  const std::int8_t* panel[P];
  for (int j = 0; j < P; ++j) panel[j] = base + std::min(j, panels - 1) * panel_bytes;  // a short tail re-reads the last
  __m512i acc[ROWS][2 * P];
  for (auto& row : acc)
    for (__m512i& v : row) v = _mm512_setzero_si512();
  // Tile rows in the order of memory (walk_halves): one stream per panel.
  walk_halves<4, kI8KStep>(0, quads * 4, [&]<int H>(std::integral_constant<int, H>, std::int64_t k, std::int64_t at)
                                             __attribute__((always_inline)) {
    __m512i w[P];
#pragma GCC unroll 4
    for (int j = 0; j < P; ++j) {
      if (j < panels) _mm_prefetch(reinterpret_cast<const char*>(panel[j] + at + kPanelStreamAhead), _MM_HINT_T1);
      w[j] = _mm512_load_si512(panel[j] + at);
    }
#pragma GCC unroll 4
    for (int i = 0; i < ROWS; ++i) {
      const __m512i av = _mm512_set1_epi32(int(a[i * lda + k / 4]));
#pragma GCC unroll 4
      for (int j = 0; j < P; ++j) acc[i][2 * j + H] = _mm512_dpbusd_epi32(acc[i][2 * j + H], av, w[j]);
    }
  });
  for (int h = 0; h < 2 * panels; ++h) {
    const std::int64_t col = n + 16 * h;
    if (col >= n_end) break;
    const __mmask16 mask = tail_mask(n_end - col);
    const __m512 w_scale = load16(advance(b.scales, b.scale_dtype, col), b.scale_dtype, 0xffff);
    const __m512i offset = _mm512_load_si512(b.column_offsets + col);
    for (int i = 0; i < ROWS; ++i) {
      const __m512 exact = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[i][h], offset));
      epilogue16(p, _mm512_mul_ps(exact, _mm512_mul_ps(_mm512_set1_ps(p.a_scales[m0 + i]), w_scale)), m0 + i, col, mask);
    }
  }
}

using DecodePanels = void (*)(const MatmulArgs&, const std::uint32_t*, std::int64_t, std::int64_t, std::int64_t, std::int64_t);
constexpr DecodePanels kDecodePanels[kMaxRows + 1] = {nullptr, decode_panels<1, 4>, decode_panels<2, 2>, decode_panels<3, 2>, decode_panels<4, 2>};

}  // namespace

// W8A8 decode (M <= 4 per pass): int8 weights streamed once in their tile
// layout, with exact i32 sums (see decode_panels); A
// comes quantized (the op's pre-pass) and its rows are made unsigned once
// per task.
void matmul_decode_vnni(const MatmulArgs& p, const MatmulTiling&, std::int64_t m0, std::int64_t m1, std::int64_t n0,
                        std::int64_t n1) {
  const std::int64_t k_pad = padded_k(DType::i8, std::max<std::int64_t>(p.k, 1));
  const std::uint8_t* a = unsigned_a_rows(p, m0, m1, k_pad);
  const std::int64_t lda = k_pad / 4;  // in quads
  for (std::int64_t m = m0; m < m1; m += kMaxRows) {
    const std::int64_t r = std::min(kMaxRows, m1 - m);
    const auto* rows_a = reinterpret_cast<const std::uint32_t*>(a + (m - m0) * k_pad);
    for (std::int64_t n = n0; n < n1; n += (r == 1 ? 4 : 2) * kPanelCols) kDecodePanels[r](p, rows_a, lda, m, n, n1);
  }
}

}  // namespace tessera::kernels::avx512_bf16
