#include <algorithm>

#include "kernels/scratch.hpp"
#include "kernels/x86/avx512/epilogue.hpp"
#include "kernels/x86/avx512/matmul_pack.hpp"

namespace tessera::kernels::avx512_bf16 {

namespace {

using namespace avx512;  // this level extends AVX-512: its helpers apply as they are

constexpr std::int64_t kMaxRows = 4;
constexpr std::int64_t kAhead = 8192;  // prefetch distance per panel stream, as the other decode kernels'

// C[m0 : m0 + ROWS, n : n + 32 P] over all of K, P panels streamed side by
// side (one row of A: four streams in flight; more rows: fewer, for the
// registers). 64 bytes of a panel hold four k of its 32 columns, 4 per lane
// (packed_weights.hpp): masking either nibble leaves the unsigned operand of
// vpdpbusd, against A's signed int8 steps. Per row of A that is one
// instruction per 64 weights, plus two per 128 to split the nibbles, where
// converting them to f32 costs ~6 per 32 (measured: the f32 loop is bound by
// those at 55-60 % of the read bandwidth). Per group the exact i32 sums
// become sum(a (q - zero)) with the group's sum of a, then take its scale.
template <int ROWS, int P>
void decode_panels(const MatmulArgs& p, const std::int32_t* const (&a)[ROWS], const std::int32_t* a_sums,
                   std::int64_t m0, std::int64_t n, std::int64_t n_end, std::int64_t stride) {
  const PackedB& b = *p.packed;
  const std::int64_t quads = padded_k(DType::i4, b.k) / 4, panel_bytes = quads * 64;
  // Groups are whole quads, or one group covers K (and its zero padding).
  const std::int64_t group_quads = b.group_size % 4 == 0 ? b.group_size / 4 : quads, groups = (quads + group_quads - 1) / group_quads;
  const int panels = int(std::min<std::int64_t>(P, (n_end - n + stride * kPanelCols - 1) / (stride * kPanelCols)));
  const auto* base = static_cast<const std::uint8_t*>(b.values) + n / kPanelCols * panel_bytes;
  const std::uint8_t* panel[P];
  for (int j = 0; j < P; ++j) panel[j] = base + std::min(j, panels - 1) * stride * panel_bytes;  // a short tail re-reads the last
  auto column = [&](int h) { return n + h / 2 * stride * kPanelCols + h % 2 * 16; };
  const __m512i nibbles = _mm512_set1_epi8(0x0f);
  __m512 acc[ROWS][2 * P];
  for (auto& row : acc)
    for (__m512& v : row) v = _mm512_setzero_ps();
  for (std::int64_t g = 0; g < groups; ++g) {
    __m512i dot[ROWS][2 * P];
    for (auto& row : dot)
      for (__m512i& v : row) v = _mm512_setzero_si512();
    const std::int64_t q1 = std::min(quads, (g + 1) * group_quads);
    for (std::int64_t q = g * group_quads; q < q1; ++q) {
      __m512i w[2 * P];
#pragma GCC unroll 4
      for (int j = 0; j < P; ++j) {
        const std::uint8_t* r = panel[j] + q * 64;
        if (j < panels) _mm_prefetch(reinterpret_cast<const char*>(r + kAhead), _MM_HINT_T0);
        const __m512i d = _mm512_load_si512(r);
        w[2 * j] = _mm512_and_si512(d, nibbles);
        w[2 * j + 1] = _mm512_and_si512(_mm512_srli_epi16(d, 4), nibbles);
      }
#pragma GCC unroll 4
      for (int i = 0; i < ROWS; ++i) {
        const __m512i av = _mm512_set1_epi32(a[i][q]);
#pragma GCC unroll 8
        for (int h = 0; h < 2 * P; ++h) dot[i][h] = _mm512_dpbusd_epi32(dot[i][h], w[h], av);
      }
    }
    for (int h = 0; h < 2 * panels; ++h) {
      const std::int64_t at = g * padded_n(b.n) + column(h);
      const __m512 scale = load16(advance(b.scales, b.scale_dtype, at), b.scale_dtype, 0xffff);
      const __m512 zero = b.zeros ? _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.zeros + at))))
                                  : _mm512_set1_ps(8.0f);
      for (int i = 0; i < ROWS; ++i) {
        const __m512 exact = _mm512_fnmadd_ps(zero, _mm512_set1_ps(float(a_sums[i * groups + g])), _mm512_cvtepi32_ps(dot[i][h]));
        acc[i][h] = _mm512_fmadd_ps(scale, exact, acc[i][h]);
      }
    }
  }
  for (int j = 0; j < panels; ++j)
    epilogue_rows32(p, ROWS, m0, column(2 * j), n_end, [&](std::int64_t i, int h) {
      return _mm512_mul_ps(acc[i][2 * j + h], _mm512_set1_ps(p.a_scales[m0 + i]));
    });
}

template <int ROWS, int P>
void decode_rows(const MatmulArgs& p, const std::int32_t* a_sums, std::int64_t m0, std::int64_t n0, std::int64_t n1) {
  const std::int32_t* a[ROWS];
  for (int i = 0; i < ROWS; ++i) a[i] = reinterpret_cast<const std::int32_t*>(p.a_q + (m0 + i) * p.a_q_stride);
  // Panels t, t + Q, t + 2Q, ... side by side: each stream runs on through Q
  // panels in a row, so the prefetcher is not restarted every P panels.
  const std::int64_t q = panels_of(n1 - n0) / P;
  for (std::int64_t t = 0; t < q; ++t) decode_panels<ROWS, P>(p, a, a_sums, m0, n0 + t * kPanelCols, n1, q);
  for (std::int64_t n = n0 + q * P * kPanelCols; n < n1; n += P * kPanelCols) decode_panels<ROWS, P>(p, a, a_sums, m0, n, n1, 1);
}

using DecodeRows = void (*)(const MatmulArgs&, const std::int32_t*, std::int64_t, std::int64_t, std::int64_t);
constexpr DecodeRows kDecodeRows[kMaxRows + 1] = {nullptr, decode_rows<1, 4>, decode_rows<2, 2>, decode_rows<3, 1>,
                                                  decode_rows<4, 1>};

}  // namespace

// W4A8 decode (M <= 4 per pass): int4 weights streamed once and multiplied
// as bytes with A's int8 steps (the op's pre-pass quantized A per token,
// zero past K). Each row's sum over each group of K comes first, for the
// zero points.
void matmul_decode_w4a8(const MatmulArgs& p, const MatmulTiling&, std::int64_t m0, std::int64_t m1, std::int64_t n0,
                        std::int64_t n1) {
  const PackedB& b = *p.packed;
  const std::int64_t k_pad = padded_k(DType::i4, b.k);
  const std::int64_t group = b.group_size % 4 == 0 ? b.group_size : k_pad, groups = (k_pad + group - 1) / group;
  auto* sums = static_cast<std::int32_t*>(thread_scratch(ScratchSlot::partial, std::size_t((m1 - m0) * groups) * sizeof(std::int32_t)));
  for (std::int64_t m = m0; m < m1; ++m)
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::int8_t* q = p.a_q + m * p.a_q_stride + g * group;
      std::int32_t s = 0;
      for (std::int64_t k = 0; k < std::min(group, k_pad - g * group); ++k) s += q[k];
      sums[(m - m0) * groups + g] = s;
    }
  for (std::int64_t m = m0; m < m1; m += kMaxRows) {
    const std::int64_t r = std::min(kMaxRows, m1 - m);
    kDecodeRows[r](p, sums + (m - m0) * groups, m, n0, n1);
  }
}

}  // namespace tessera::kernels::avx512_bf16
