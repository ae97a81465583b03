#include "kernels/x86/avx512/gemm_blocked.hpp"

namespace tessera::kernels::avx512 {

namespace {

// f32 FMAs on a dense panel: row k of B is 32 floats.
struct F32Traits : F32SumsTraits {
  static constexpr std::int64_t kUnitK = 1, kKGrain = 1, kHalfBytes = 64;

  static const char* b_row(const char* panel, std::int64_t k) { return panel + k * kPanelCols * 4; }
  static __m512 dot(__m512 acc, float a, __m512 b) { return _mm512_fmadd_ps(_mm512_set1_ps(a), b, acc); }
  static void pack_a(const MatmulArgs& p, std::int64_t m0, std::int64_t m1, std::int64_t k0, std::int64_t kc, float* dst,
                     std::int64_t mr) {
    pack_a_f32(p, m0, m1, k0, kc, dst, mr);
  }
  static const char* b_panel(const MatmulArgs& p, std::int64_t n, std::int64_t n_end, std::int64_t k0, std::int64_t kc,
                             char* buf) {
    return reinterpret_cast<const char*>(b_panel_f32(p, n, n_end, k0, kc, reinterpret_cast<float*>(buf)));
  }
  static const char* a_in_place(const MatmulArgs& p) { return rows_of_units(p, DType::f32, kUnitK); }
};

}  // namespace

// Any float A (converted to f32, W8A8-rounded when asked) against f32
// panels: packed f32 weights in place, anything else dequantized into an
// L1-resident panel per K slice. The loop nest: gemm_blocked.hpp.
void matmul_f32(const MatmulArgs& p, const MatmulTiling& t, std::int64_t m0, std::int64_t m1, std::int64_t n0,
                std::int64_t n1) {
  F32Traits traits;
  blocked_gemm(traits, p, t, m0, m1, n0, n1);
}

}  // namespace tessera::kernels::avx512
