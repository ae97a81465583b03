#include "kernels/x86/avx512/gemm_blocked.hpp"

namespace tessera::kernels::avx512_bf16 {

namespace {

using namespace avx512;  // this level extends AVX-512: its helpers apply as they are

// vpdpbusd (u8 x s8) on int8 weights in their tile layout: each 64-byte
// tile row holds four k of 16 columns, one 32-bit broadcast of A's four
// steps multiplies all of them; 16 quads per tile, the column halves 1 KiB
// apart. A's int8 steps are offset by +128 to be unsigned, and the offset
// is taken back with the weights' column offsets (128 x each column's sum,
// computed when they were quantized; summed at run time, in a pass over
// each cold panel slice, they took a fifth of the time at M = 16).
struct Int8Traits : TileLayoutB {
  static constexpr std::int64_t kUnitK = 4, kKGrain = kI8KStep;

  __m512i offset[2];

  static __m512 dot(__m512 acc, float a, __m512 b) {
    return _mm512_castsi512_ps(_mm512_dpbusd_epi32(_mm512_castps_si512(acc), _mm512_castps_si512(_mm512_set1_ps(a)), _mm512_castps_si512(b)));
  }
  // A comes quantized (the op's pre-pass, zero past K): 64 steps per load,
  // made unsigned. Past K they are 128 and meet zero weights.
  static void pack_a(const MatmulArgs& p, std::int64_t m0, std::int64_t m1, std::int64_t k0, std::int64_t kc, float* dst,
                     std::int64_t mr) {
    pack_a_units<4>(m0, m1, kc, dst, mr, [&](std::int64_t m, std::int64_t k) {
      const __m512i q = _mm512_loadu_si512(p.a_q + m * p.a_q_stride + k0 + k);
      return _mm512_castsi512_ps(_mm512_xor_si512(q, _mm512_set1_epi8(char(0x80))));
    });
  }
  static const char* a_in_place(const MatmulArgs&) { return nullptr; }
  static const char* b_panel(const MatmulArgs& p, std::int64_t n, std::int64_t, std::int64_t k0, std::int64_t, char*) {
    const PackedB& b = *p.packed;
    return static_cast<const char*>(b.values) + (n / kPanelCols) * padded_k(DType::i8, b.k) * kPanelCols + k0 * kPanelCols;
  }
  // The offset comes off once, with the first K slice.
  void panel_ready(const MatmulArgs& p, std::int64_t n, std::int64_t k0) {
    for (int h = 0; h < 2; ++h)
      offset[h] = k0 == 0 ? _mm512_load_si512(p.packed->column_offsets + n + 16 * h) : _mm512_setzero_si512();
  }
  __m512 finish(__m512 acc, int half) const { return _mm512_castsi512_ps(_mm512_sub_epi32(_mm512_castps_si512(acc), offset[half])); }
  static void epilogue(const MatmulArgs& p, const float* tile, std::int64_t ld, std::int64_t rows, std::int64_t m,
                       std::int64_t n, std::int64_t n_end) {
    epilogue_i32_tile32(p, reinterpret_cast<const std::int32_t*>(tile), ld, rows, m, n, n_end);
  }
};

}  // namespace

// W8A8 with AVX512-VNNI where AMX is absent: exact i32 sums of the
// quantized rows of A and the int8 weights, then acc * a_scale * w_scale
// and the epilogue. The loop nest: gemm_blocked.hpp.
void matmul_int8_vnni(const MatmulArgs& p, const MatmulTiling& t, std::int64_t m0, std::int64_t m1, std::int64_t n0,
                      std::int64_t n1) {
  Int8Traits traits;
  blocked_gemm(traits, p, t, m0, m1, n0, n1);
}

}  // namespace tessera::kernels::avx512_bf16
