#include "kernels/matmul.hpp"
#include "kernels/x86/avx512/matmul_pack.hpp"

namespace tessera::kernels::avx512 {

// Two passes over each row: its absolute maximum (and whether it is all
// finite), then q = clamp(rne(a / scale), -127, 127); cvtps_epi32 rounds to
// nearest even, as the reference's nearbyint does.
void w8a8_quantize_rows(const MatmulArgs& p, std::int64_t m0, std::int64_t m1, std::int8_t* q, std::int64_t ldq,
                        float* scales) {
  for (std::int64_t m = m0; m < m1; ++m) {
    __m512 absmax = _mm512_setzero_ps();
    __mmask16 bad = 0;
    for (std::int64_t k = 0; k < p.k; k += 16) {
      const __mmask16 mask = tail_mask(p.k - k);
      const __m512 v = _mm512_abs_ps(load_a16(p, m, k, mask));
      absmax = _mm512_max_ps(absmax, v);
      bad |= _mm512_mask_cmp_ps_mask(mask, v, _mm512_set1_ps(__FLT_MAX__), _CMP_NLE_UQ);  // NaN or Inf
    }
    const float scale = w8a8_row_scale(_mm512_reduce_max_ps(absmax), bad == 0);
    scales[m - m0] = scale;
    const __m512 inv = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_set1_ps(scale));
    std::int8_t* out = q + (m - m0) * ldq;
    for (std::int64_t k = 0; k < ldq; k += 16) {
      const __mmask16 valid = tail_mask(std::max<std::int64_t>(0, p.k - k)), mask = tail_mask(ldq - k);
      const __m512i r = _mm512_cvtps_epi32(_mm512_mul_ps(load_a16(p, m, k, valid), inv));
      const __m512i c = _mm512_max_epi32(_mm512_min_epi32(r, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
      _mm_mask_storeu_epi8(out + k, mask, _mm512_maskz_cvtepi32_epi8(valid, c));  // zero past K
    }
  }
}

}  // namespace tessera::kernels::avx512
