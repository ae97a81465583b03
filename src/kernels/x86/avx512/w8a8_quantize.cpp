#include <cstring>

#include "kernels/dispatch.hpp"
#include "kernels/matmul.hpp"
#include "kernels/x86/avx512/matmul_pack.hpp"

namespace tessera::kernels::avx512 {

namespace {

// One row of A: q = clamp(rne(a / scale), -127, 127), zero from K to ldq;
// load(k, mask) gives its 16 elements from k as f32. The absolute maximum
// is taken on the bits (sign cleared, an integer max: the order of
// non-negative floats, with Inf and NaN above every finite value), so one
// max per vector both finds it and flags a row that is not all finite; 64
// elements per step in four chains. The second pass reads the row back
// from L1; vpmovsdb saturates at 127, a max clamps at -127 (NaN converts
// to INT_MIN and clamps there, as the reference does). Through load_a16
// per vector, the dtype switched and the arguments reloaded each time, and
// a compare per vector for NaN and Inf, this pass took 0.75 ns an element
// (AMD EPYC Turin, [128, 4096] f32 from L2: 6 % of a W8A8 linear's time at
// M = 128, K = N = 4096).
template <class Load>
__attribute__((always_inline)) inline void quantize_row(Load&& load, std::int64_t k, std::int8_t* out, std::int64_t ldq,
                                                        float& scale_out) {
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff);
  const auto bits_of = [&](std::int64_t at, __mmask16 valid) { return _mm512_and_si512(_mm512_castps_si512(load(at, valid)), magnitude); };
  __m512i mx[4] = {};
  std::int64_t i = 0;
  for (; i + 64 <= k; i += 64)
    for (int j = 0; j < 4; ++j) mx[j] = _mm512_max_epi32(mx[j], bits_of(i + 16 * j, 0xffff));
  for (; i < k; i += 16) mx[0] = _mm512_max_epi32(mx[0], bits_of(i, tail_mask(k - i)));
  const std::int32_t bits = _mm512_reduce_max_epi32(_mm512_max_epi32(_mm512_max_epi32(mx[0], mx[1]), _mm512_max_epi32(mx[2], mx[3])));
  float absmax;
  std::memcpy(&absmax, &bits, sizeof(absmax));
  const float scale = w8a8_row_scale(absmax, bits < 0x7f800000);  // |x| bits from there on: Inf or NaN
  scale_out = scale;
  const __m512 inv = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_set1_ps(scale));
  const auto quantize16 = [&](std::int64_t at, __mmask16 valid) {
    return _mm512_cvtsepi32_epi8(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(load(at, valid), inv)), _mm512_set1_epi32(-127)));
  };
  for (i = 0; i + 64 <= k; i += 64) {
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
  if (p.a_col_stride != 1) {  // strided rows, gathered
    for (std::int64_t m = m0; m < m1; ++m)
      quantize_row([&](std::int64_t k, __mmask16 valid) { return load_a16(p, m, k, valid); }, p.k, q + (m - m0) * ldq, ldq,
                   scales[m - m0]);
    return;
  }
  dispatch_float(p.a_dtype, [&](auto t) {
    constexpr std::int64_t es = bytes_of(t());
    for (std::int64_t m = m0; m < m1; ++m) {
      const char* row = static_cast<const char*>(p.a) + m * p.a_row_stride * es;
      quantize_row([&](std::int64_t k, __mmask16 valid) { return load16(row + k * es, t(), valid); }, p.k, q + (m - m0) * ldq,
                   ldq, scales[m - m0]);
    }
  });
}

}  // namespace tessera::kernels::avx512
