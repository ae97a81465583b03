#include "kernels/x86/avx512/gemm_blocked.hpp"

namespace tessera::kernels::avx512 {

// Any float A (converted to f32, W8A8-rounded when asked) against f32
// panels: packed f32 weights in place, anything else dequantized into an
// L1-resident panel per K slice. The loop nest: gemm_blocked.hpp.
void matmul_f32(const MatmulArgs& p, const MatmulTiling& t, std::int64_t m0, std::int64_t m1, std::int64_t n0,
                std::int64_t n1) {
  F32Traits traits;
  blocked_gemm(traits, p, t, m0, m1, n0, n1);
}

void copy_a_rows(const MatmulArgs& p, std::int64_t m0, std::int64_t m1, void* dst, std::int64_t, std::int64_t slice) {
  for (std::int64_t m = m0; m < m1; ++m) {
    float* out = static_cast<float*>(dst) + m * slice;
    with_a_row(p, m, [&](auto load) { for_each16(p.k, [&](std::int64_t k, __mmask16 mask) { _mm512_mask_storeu_ps(out + k, mask, load(k, mask)); }); });
  }
}

}  // namespace tessera::kernels::avx512
