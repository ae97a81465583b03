#include <cstring>

#include "kernels/matmul.hpp"
#include "kernels/x86/avx512/matmul_pack.hpp"

namespace tessera::kernels::avx512 {

namespace {

// One row of A: q = clamp(rne(a / scale), -127, 127), zero from K to ldq;
// load(k, mask) gives its 16 elements from k as f32. The second pass reads
// the row back from L1; vpmovsdb saturates at 127, a max clamps at -127
// (NaN converts to INT_MIN and clamps there, as the reference does).
template <class Load>
__attribute__((always_inline)) inline void quantize_row(Load&& load, std::int64_t k, std::int8_t* out, std::int64_t ldq,
                                                        float& scale_out) {
  const std::int32_t bits = max_magnitude_bits(load, k);
  float absmax;
  std::memcpy(&absmax, &bits, sizeof(absmax));
  const float scale = w8a8_row_scale(absmax, bits < kNonFiniteBits);
  scale_out = scale;
  const __m512 inv = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_set1_ps(scale));
  const auto quantize16 = [&](std::int64_t at, __mmask16 valid) {
    return _mm512_cvtsepi32_epi8(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(load(at, valid), inv)), _mm512_set1_epi32(-127)));
  };
  std::int64_t i = 0;
  for (; i + 64 <= k; i += 64) {
    __m512i q = _mm512_castsi128_si512(quantize16(i, 0xffff));
    q = _mm512_inserti32x4(q, quantize16(i + 16, 0xffff), 1);
    q = _mm512_inserti32x4(q, quantize16(i + 32, 0xffff), 2);
    q = _mm512_inserti32x4(q, quantize16(i + 48, 0xffff), 3);
    _mm512_storeu_si512(out + i, q);
  }
  for (; i < ldq; i += 16) {
    const __mmask16 valid = tail_mask(std::max<std::int64_t>(0, k - i));
    _mm_mask_storeu_epi8(out + i, tail_mask(ldq - i), _mm_maskz_mov_epi8(valid, quantize16(i, valid)));  // zero past K
  }
}

}  // namespace

void w8a8_quantize_rows(const MatmulArgs& p, std::int64_t m0, std::int64_t m1, std::int8_t* q, std::int64_t ldq,
                        float* scales) {
  for (std::int64_t m = m0; m < m1; ++m)
    with_a_row(p, m, [&](auto load) { quantize_row(load, p.k, q + (m - m0) * ldq, ldq, scales[m - m0]); });
}

}  // namespace tessera::kernels::avx512
