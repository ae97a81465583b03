#include "kernels/matmul.hpp"
#include "kernels/x86/avx512/vec.hpp"

namespace tessera::kernels::avx512 {

namespace {

constexpr std::int64_t kMr = 8;    // rows of C per micro-tile
constexpr std::int64_t kNr = 32;   // cols of C per micro-tile: two zmm
constexpr std::int64_t kKc = 256;  // K slice: a 256 x 32 f32 panel of B (32 KiB) stays in L1

// C[0:MR, 0:32] (+)= A[0:MR, 0:kc] * B[0:kc, 0:32], B a packed, 64-byte
// aligned panel (row stride rsb). 2*MR accumulators live in registers.
template <int MR>
void micro_tile(std::int64_t kc, const float* a, std::int64_t rsa, std::int64_t csa, const float* b, std::int64_t rsb,
                float* c, std::int64_t rsc, __mmask16 m0, __mmask16 m1, bool accumulate) {
  // Row pointers hoisted out of the K loop keep the address arithmetic
  // simple enough for GCC to hold all 2*MR accumulators in registers.
  const float* ar[MR];
  __m512 acc[2 * MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    ar[i] = a + i * rsa;
    acc[2 * i] = accumulate ? _mm512_maskz_loadu_ps(m0, c + i * rsc) : _mm512_setzero_ps();
    acc[2 * i + 1] = accumulate ? _mm512_maskz_loadu_ps(m1, c + i * rsc + 16) : _mm512_setzero_ps();
  }
  for (std::int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b + k * rsb);
    const __m512 b1 = _mm512_load_ps(b + k * rsb + 16);
    const std::int64_t ka = k * csa;
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_set1_ps(ar[i][ka]);
      acc[2 * i] = _mm512_fmadd_ps(av, b0, acc[2 * i]);
      acc[2 * i + 1] = _mm512_fmadd_ps(av, b1, acc[2 * i + 1]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    _mm512_mask_storeu_ps(c + i * rsc, m0, acc[2 * i]);
    _mm512_mask_storeu_ps(c + i * rsc + 16, m1, acc[2 * i + 1]);
  }
}

using MicroTile = void (*)(std::int64_t, const float*, std::int64_t, std::int64_t, const float*, std::int64_t, float*,
                           std::int64_t, __mmask16, __mmask16, bool);
constexpr MicroTile kMicroTiles[kMr + 1] = {nullptr,          micro_tile<1>, micro_tile<2>, micro_tile<3>, micro_tile<4>,
                                            micro_tile<5>, micro_tile<6>, micro_tile<7>, micro_tile<8>};

// Copies B[0:kc, 0:32] (masked at the N edge, zero-filled) into a dense
// panel: the micro-tile then walks 128-byte rows instead of rows a full
// matrix width apart, which would alias in L1 and miss the TLB.
void pack_b_panel(std::int64_t kc, const float* b, std::int64_t rsb, __mmask16 m0, __mmask16 m1, float* panel) {
  for (std::int64_t k = 0; k < kc; ++k) {
    _mm512_store_ps(panel + k * kNr, _mm512_maskz_loadu_ps(m0, b + k * rsb));
    _mm512_store_ps(panel + k * kNr + 16, _mm512_maskz_loadu_ps(m1, b + k * rsb + 16));
  }
}

}  // namespace

// f32 only, unit column strides for B and C (see supports()). K is walked in
// L1-sized slices; within a slice each 32-column panel of B is packed once
// and reused by every 8-row micro-tile of the task.
void matmul_f32(const MatmulArgs& p, std::int64_t m0, std::int64_t m1, std::int64_t n0, std::int64_t n1) {
  const auto* a = static_cast<const float*>(p.a);
  const auto* b = static_cast<const float*>(p.b);
  auto* c = static_cast<float*>(p.c);
  if (p.k == 0) {
    for (std::int64_t m = m0; m < m1; ++m)
      for (std::int64_t n = n0; n < n1; n += 16) _mm512_mask_storeu_ps(c + m * p.c_row_stride + n, tail_mask(n1 - n), _mm512_setzero_ps());
    return;
  }
  alignas(64) static thread_local float panel[kKc * kNr];
  for (std::int64_t k0 = 0; k0 < p.k; k0 += kKc) {
    const std::int64_t kc = std::min(kKc, p.k - k0);
    for (std::int64_t n = n0; n < n1; n += kNr) {
      const __mmask16 mask0 = tail_mask(n1 - n), mask1 = tail_mask(std::max<std::int64_t>(0, n1 - n - 16));
      pack_b_panel(kc, b + k0 * p.b_row_stride + n, p.b_row_stride, mask0, mask1, panel);
      for (std::int64_t m = m0; m < m1; m += kMr) {
        const std::int64_t mr = std::min(kMr, m1 - m);
        kMicroTiles[mr](kc, a + m * p.a_row_stride + k0 * p.a_col_stride, p.a_row_stride, p.a_col_stride, panel, kNr,
                        c + m * p.c_row_stride + n, p.c_row_stride, mask0, mask1, k0 > 0);
      }
    }
  }
}

}  // namespace tessera::kernels::avx512
