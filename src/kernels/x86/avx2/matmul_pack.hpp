#pragma once
// Operand preparation for the AVX2 matmul kernel, as avx512/matmul_pack.hpp:
// rows of A converted (and W8A8-rounded), rows of B read from a strided float
// matrix or packed bf16 / i8 / i4 weights, dequantized to f32. Static
// functions only (see vec.hpp).
#include <algorithm>

#include "kernels/matmul.hpp"
#include "kernels/scratch.hpp"
#include "kernels/x86/load1.hpp"
#include "kernels/x86/avx2/vec.hpp"

namespace tessera::kernels::avx2 {

// n elements (0 < n <= 8, zeros after) of a float storage type from `at` on, `stride` apart, as f32.
static inline __m256 load_strided8(const void* base, DType t, std::int64_t at, std::int64_t stride, std::int64_t n) {
  if (stride == 1) return load8_n(advance(base, t, at), t, n);
  alignas(32) float v[8] = {};
  for (std::int64_t i = 0; i < n; ++i) v[i] = load1(base, t, at + i * stride);
  return _mm256_load_ps(v);
}

// n <= 8 elements of row m of A from column k, as f32.
static inline __m256 load_a8(const MatmulArgs& p, std::int64_t m, std::int64_t k, std::int64_t n) {
  return load_strided8(p.a, p.a_dtype, m * p.a_row_stride + k * p.a_col_stride, p.a_col_stride, n);
}

// Rows [m0, m1) x columns [k0, k0 + kc) of A as f32 (W8A8: the int8 steps
// of each row's scale) in slivers of `mr` rows, each k-major ([k][mr]): the
// micro-kernel then broadcasts from one sequential stream. Rows past m1 in
// the last sliver are left unset (their results are never stored).
static inline void pack_a_f32(const MatmulArgs& p, std::int64_t m0, std::int64_t m1, std::int64_t k0, std::int64_t kc,
                              float* dst, std::int64_t mr) {
  alignas(32) float v[8];
  for (std::int64_t m = m0; m < m1; ++m) {
    float* out = dst + (m - m0) / mr * mr * kc + (m - m0) % mr;
    for (std::int64_t k = 0; k < kc; k += 8) {
      const std::int64_t n = std::min<std::int64_t>(8, kc - k);
      if (p.a_q) {
        for (std::int64_t j = 0; j < n; ++j) out[(k + j) * mr] = float(p.a_q[m * p.a_q_stride + k0 + k + j]) * p.a_scales[m];
        continue;
      }
      _mm256_store_ps(v, load_a8(p, m, k0 + k, n));
      for (std::int64_t j = 0; j < n; ++j) out[(k + j) * mr] = v[j];
    }
  }
}

// Row k (odd = 0, the low half of each lane) or k + 1 (odd = 1, the high)
// of a bf16 pair row, as f32.
static inline __m256 bf16_pair_half(__m256i pairs, std::int64_t odd) {
  return _mm256_castsi256_ps(odd ? _mm256_and_si256(pairs, _mm256_set1_epi32(int(0xffff0000u))) : _mm256_slli_epi32(pairs, 16));
}

// Packed bf16 B: the 64-byte tile row of columns [n, n + 16) of the panel at
// n that holds rows k and k + 1 (k even) as pairs; columns n + 16 .. n + 31
// are 512 values on.
static inline const std::uint16_t* bf16_pair_row(const PackedB& b, std::int64_t n, std::int64_t k) {
  const std::int64_t tile = n / kPanelCols * (padded_k(b.dtype, b.k) / kBf16KStep) + k / kBf16KStep;
  return static_cast<const std::uint16_t*>(b.values) + tile * 2 * 512 + (k % kBf16KStep) / 2 * 32;
}

// The scales and zero points of 8 columns of a group, from parameter index
// `at` (no_zero where the weights store none: int4's 8, int8's 0).
static inline void group_params8(const PackedB& b, std::int64_t at, float no_zero, __m256& scale, __m256& zero) {
  scale = load8(advance(b.scales, b.scale_dtype, at), b.scale_dtype);
  zero = b.zeros ? _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.zeros + at))))
                 : _mm256_set1_ps(no_zero);
}

// The unnamed namespace is the class's `static`: its member functions would
// otherwise be weak symbols that other translation units could bind to.
namespace {

// Reads rows of B[k, n : n + 32] as f32 (zero past N), in order of k, from
// raw B or packed bf16 / i8 / i4 weights (packed f32 is read in place, see
// b_panel_f32).
class BRows32 {
 public:
  // Columns [n, min(n + 32, n_end)) of B; n is a panel boundary.
  BRows32(const MatmulArgs& p, std::int64_t n, std::int64_t n_end)
      : p_(p), n_(n), cols_(std::min(kPanelCols, n_end - n)) {}

  void row(std::int64_t k, __m256 (&out)[4]) {
    if (!p_.packed) return raw(k, out);
    const PackedB& b = *p_.packed;
    const std::int64_t panel = n_ / kPanelCols;
    if (b.dtype == DType::bf16) {
      // Row k is the even or odd bf16 of each (k, k+1) pair.
      const std::uint16_t* r = bf16_pair_row(b, n_, k);
      for (int j = 0; j < 4; ++j) {
        const __m256i pairs = _mm256_load_si256(reinterpret_cast<const __m256i*>(r + j / 2 * 512 + j % 2 * 16));
        out[j] = bf16_pair_half(pairs, k % 2);
      }
      return;
    }
    quantized(b, panel, k, out);
  }

 private:
  void raw(std::int64_t k, __m256 (&out)[4]) {
    const std::int64_t at = k * p_.b_row_stride + n_ * p_.b_col_stride;
    for (int j = 0; j < 4; ++j) {
      const std::int64_t n = std::min<std::int64_t>(8, cols_ - 8 * j), s = p_.b_col_stride;
      out[j] = n > 0 ? load_strided8(p_.b, p_.b_dtype, at + 8 * j * s, s, n) : _mm256_setzero_ps();
    }
  }

  void quantized(const PackedB& b, std::int64_t panel, std::int64_t k, __m256 (&out)[4]) {
    const std::int64_t g = k / b.group_size;
    if (g != group_) load_group(b, g);
    const auto* v = static_cast<const std::uint8_t*>(b.values);
    __m256i q[4];
    if (b.dtype == DType::i4) {
      // Byte k % 4 of each 4-byte lane (column j) of the 64 bytes holding k:
      // column j in its low nibble, column j + 16 in its high one.
      const std::uint8_t* quad = v + i4_byte_index(padded_k(b.dtype, b.k), k - k % 4, panel * kPanelCols);
      const __m128i shift = _mm_cvtsi32_si128(int(8 * (k % 4)));
      const __m256i d0 = _mm256_srl_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(quad)), shift);
      const __m256i d1 = _mm256_srl_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(quad + 32)), shift);
      const __m256i nibble = _mm256_set1_epi32(0xf);
      q[0] = _mm256_and_si256(d0, nibble);
      q[1] = _mm256_and_si256(d1, nibble);
      q[2] = _mm256_and_si256(_mm256_srli_epi32(d0, 4), nibble);
      q[3] = _mm256_and_si256(_mm256_srli_epi32(d1, 4), nibble);
    } else {
      // Byte k % 4 of each 4-byte lane of the tile row holding k: shift it to
      // the top, then back down with or without its sign.
      const std::int64_t tile = panel * (padded_k(b.dtype, b.k) / kI8KStep) + k / kI8KStep;
      const std::uint8_t* row = v + tile * 2 * 1024 + (k % kI8KStep) / 4 * 64;
      const __m128i up = _mm_cvtsi32_si128(int(8 * (3 - k % 4)));
      for (int j = 0; j < 4; ++j) {
        const __m256i lanes = _mm256_load_si256(reinterpret_cast<const __m256i*>(row + j / 2 * 1024 + j % 2 * 32));
        const __m256i d = _mm256_sll_epi32(lanes, up);
        q[j] = b.zeros ? _mm256_srli_epi32(d, 24) : _mm256_srai_epi32(d, 24);
      }
    }
    // (q - zero) * scale as one fused step: q * scale - zero * scale.
    for (int j = 0; j < 4; ++j) out[j] = _mm256_fmsub_ps(_mm256_cvtepi32_ps(q[j]), scale_[j], zero_scale_[j]);
  }

  void load_group(const PackedB& b, std::int64_t g) {
    group_ = g;
    const std::int64_t at = group_param_index(b, g, n_);
    for (int j = 0; j < 4; ++j) {
      __m256 zero;
      group_params8(b, at + 8 * j, b.dtype == DType::i4 ? 8.0f : 0.0f, scale_[j], zero);
      zero_scale_[j] = _mm256_mul_ps(zero, scale_[j]);
    }
  }

  const MatmulArgs& p_;
  std::int64_t n_, cols_;
  std::int64_t group_ = -1;
  __m256 scale_[4] = {}, zero_scale_[4] = {};  // set by load_group() before first use
};

}  // namespace

// B[k0 : k0 + kc, n : n + 32] as a dense f32 panel: packed f32 weights in
// place, anything else converted into `buf` (kc x 32, 32-byte aligned).
static inline const float* b_panel_f32(const MatmulArgs& p, std::int64_t n, std::int64_t n_end, std::int64_t k0,
                                       std::int64_t kc, float* buf) {
  if (p.packed && p.packed->dtype == DType::f32)
    return static_cast<const float*>(p.packed->values) + (n / kPanelCols * p.packed->k + k0) * kPanelCols;
  if (p.packed && p.packed->dtype == DType::bf16 && k0 % 2 == 0) {
    // Both rows of each pair from one load of it (BRows32 loads it per row),
    // a pair's address once (its tile's stride, 64 bytes, within a tile).
    for (std::int64_t k = 0; k < kc; k += 2) {
      const std::uint16_t* r = bf16_pair_row(*p.packed, n, k0 + k);
      float* even = buf + k * kPanelCols;
      for (int j = 0; j < 4; ++j) {
        const __m256i pairs = _mm256_load_si256(reinterpret_cast<const __m256i*>(r + j / 2 * 512 + j % 2 * 16));
        _mm256_store_ps(even + 8 * j, bf16_pair_half(pairs, 0));
        if (k + 1 < kc) _mm256_store_ps(even + kPanelCols + 8 * j, bf16_pair_half(pairs, 1));
      }
    }
    return buf;
  }
  BRows32 rows(p, n, n_end);
  for (std::int64_t k = 0; k < kc; ++k) {
    __m256 r[4];
    rows.row(k0 + k, r);
    for (int j = 0; j < 4; ++j) _mm256_store_ps(buf + k * kPanelCols + 8 * j, r[j]);
  }
  return buf;
}

}  // namespace tessera::kernels::avx2
