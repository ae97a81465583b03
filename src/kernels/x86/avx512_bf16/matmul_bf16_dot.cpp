#include "kernels/x86/avx512/gemm_blocked.hpp"
#include "kernels/x86/avx512_bf16/bf16_b_tiles.hpp"
#include "kernels/x86/avx512_bf16/round_a_rows.hpp"

namespace tessera::kernels::avx512_bf16 {

namespace {

using namespace avx512;  // this level extends AVX-512: its helpers apply as they are

// vdpbf16ps on B's bf16 tile layout (packed_weights.hpp): each 64-byte row
// of a tile holds the pairs (k, k+1) of 16 columns, one 32-bit broadcast of
// A's pair multiplies all of them; 16 pairs per tile, the two column halves
// 1 KiB apart.
struct Bf16Traits : TileLayoutB, F32SumsTraits {
  static constexpr std::int64_t kUnitK = 2, kKGrain = kBf16KStep;

  static __m512 dot(__m512 acc, float a, __m512 b) {
    return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_set1_ps(a), (__m512bh)b);
  }
  // A's rows as bf16, 32 columns (16 pairs) per load: bf16 rows as they
  // are (converting them to f32 and back took 11 % of a bf16 3x3 conv),
  // others rounded.
  static void pack_a(const MatmulArgs& p, std::int64_t m0, std::int64_t m1, std::int64_t k0, std::int64_t kc, float* dst,
                     std::int64_t mr) {
    if (p.a_dtype == DType::bf16 && p.a_col_stride == 1) {
      return pack_a_units<2>(m0, m1, kc, dst, mr, [&](std::int64_t m, std::int64_t k) {
        prefetch_a_row(p, m, k0 + k);
        return _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(tail_mask32(kc - k), static_cast<const std::uint16_t*>(p.a) + m * p.a_row_stride + k0 + k));
      });
    }
    pack_a_units<2>(m0, m1, kc, dst, mr, [&](std::int64_t m, std::int64_t k) {
      prefetch_a_row(p, m, k0 + k);
      const __m512 lo = load_a16(p, m, k0 + k, tail_mask(kc - k));
      const __m512 hi = load_a16(p, m, k0 + k + 16, tail_mask(std::max<std::int64_t>(0, kc - k - 16)));
      return _mm512_castsi512_ps(to_bf16x2(lo, hi));
    });
  }
  static const char* b_panel(const MatmulArgs& p, std::int64_t n, std::int64_t n_end, std::int64_t k0, std::int64_t kc,
                             char* buf) {
    return reinterpret_cast<const char*>(bf16_tiles_of(p, n, n_end, k0, kc, reinterpret_cast<std::uint16_t*>(buf)));
  }
  static const char* a_in_place(const MatmulArgs& p) { return rows_of_units(p, DType::bf16, kUnitK); }
};

}  // namespace

// bf16 x bf16 -> f32 with AVX512-BF16 where AMX is absent: A's rows rounded
// to bf16 as they are packed, B panels in the tile layout (packed bf16
// weights in place, quantized ones dequantized per K slice). The loop nest:
// gemm_blocked.hpp.
void matmul_bf16_dot(const MatmulArgs& p, const MatmulTiling& t, std::int64_t m0, std::int64_t m1, std::int64_t n0,
                     std::int64_t n1) {
  Bf16Traits traits;
  blocked_gemm(traits, p, t, m0, m1, n0, n1);
}

void round_a_rows(const MatmulArgs& p, std::int64_t m0, std::int64_t m1, void* dst, std::int64_t rows, std::int64_t slice) {
  round_a_rows_in_slices(p, m0, m1, static_cast<std::uint16_t*>(dst), rows, slice);
}

}  // namespace tessera::kernels::avx512_bf16
