#include <algorithm>
#include <cstring>

#include "kernels/matmul.hpp"
#include "kernels/x86/avx2/matmul_pack.hpp"

namespace tessera::kernels::avx2 {

// One row, n <= 8 of its elements at a time from load(k, n) (zeros past n),
// as avx512/w8a8_quantize.cpp, 8 lanes: the largest magnitude as integer
// bits (NaN and Inf above every finite value, flagging the row), then q =
// clamp(rne(a / scale), -127, 127), zero from K to ldq. NaN converts to
// INT_MIN and clamps to -127, as the reference does.
template <class Load>
static inline void quantize_row(std::int64_t k_len, std::int64_t ldq, std::int8_t* out, float* scale_out, Load&& load) {
  const __m256i magnitude = _mm256_set1_epi32(0x7fffffff);
  __m256i mx = _mm256_setzero_si256();
  for (std::int64_t k = 0; k < k_len; k += 8)
    mx = _mm256_max_epi32(mx, _mm256_and_si256(_mm256_castps_si256(load(k, std::min<std::int64_t>(8, k_len - k))), magnitude));
  alignas(32) std::int32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), mx);
  const std::int32_t bits = *std::max_element(lanes, lanes + 8);
  float absmax;
  std::memcpy(&absmax, &bits, sizeof(absmax));
  const float scale = w8a8_row_scale(absmax, bits < kNonFiniteBits);
  *scale_out = scale;
  const __m256 inv = _mm256_set1_ps(1.0f / scale);
  for (std::int64_t k = 0; k < ldq; k += 8) {
    const std::int64_t n = std::clamp<std::int64_t>(k_len - k, 0, 8);
    __m256i r = _mm256_max_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(load(k, n), inv)), _mm256_set1_epi32(-127));
    r = _mm256_and_si256(r, _mm256_castps_si256(lanes_below(n)));  // zero past K, also where inv is NaN
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));  // saturates at 127
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + k), _mm_packs_epi16(w, w));  // ldq: whole 64-byte steps
  }
}

// Rows with unit column stride read by their compile-time storage type; the
// generic strided load per vector (a dtype switch and a stride each) ran
// [5120, 4096] f32 at 4-7 GB/s, 1 thread (AMD EPYC Zen 3). Below AVX-512
// the reference's scalar loop ran instead.
void w8a8_quantize_rows(const MatmulArgs& p, std::int64_t m0, std::int64_t m1, std::int8_t* q, std::int64_t ldq,
                        float* scales) {
  for (std::int64_t m = m0; m < m1; ++m) {
    std::int8_t* out = q + (m - m0) * ldq;
    if (p.a_col_stride == 1 || p.k <= 1) {
      dispatch_float(p.a_dtype, [&](auto t) {
        const char* row = static_cast<const char*>(p.a) + m * p.a_row_stride * bytes_of(t);
        quantize_row(p.k, ldq, out, scales + (m - m0), [&](std::int64_t k, std::int64_t n) { return load8_n(row + k * bytes_of(t), t, n); });
      });
    } else {
      quantize_row(p.k, ldq, out, scales + (m - m0), [&](std::int64_t k, std::int64_t n) { return load_a8(p, m, k, n); });
    }
  }
}

}  // namespace tessera::kernels::avx2
