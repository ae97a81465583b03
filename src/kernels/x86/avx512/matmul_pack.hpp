#pragma once
// Operand preparation for the AVX-512 and AMX matmul kernels: rows of A
// converted (and W8A8-rounded), rows of B read from any source: a strided
// float matrix or packed f32 / bf16 / i8 / i4 weights, dequantized to f32.
// Static functions only (see vec.hpp).
#include <algorithm>
#include <type_traits>

#include "kernels/dispatch.hpp"
#include "kernels/matmul.hpp"
#include "kernels/scratch.hpp"
#include "kernels/x86/load1.hpp"
#include "kernels/x86/avx512/vec.hpp"

namespace tessera::kernels::avx512 {

// 16 elements of row m of A from column k (masked), as f32.
static inline __m512 load_a16(const MatmulArgs& p, std::int64_t m, std::int64_t k, __mmask16 mask) {
  const std::int64_t at = m * p.a_row_stride + k * p.a_col_stride;
  if (p.a_col_stride == 1) return load16(advance(p.a, p.a_dtype, at), p.a_dtype, mask);
  alignas(64) float v[16] = {};
  for (int i = 0; i < 16; ++i)
    if (mask >> i & 1) v[i] = load1(p.a, p.a_dtype, at + i * p.a_col_stride);
  return _mm512_load_ps(v);
}

// Calls f(load) for row m of A, load(k, mask) giving its 16 elements from k
// as f32: with the dtype fixed at compile time for contiguous rows, through
// load_a16 for strided ones.
template <class F>
__attribute__((always_inline)) static inline void with_a_row(const MatmulArgs& p, std::int64_t m, F&& f) {
  if (p.a_col_stride != 1) return f([&](std::int64_t k, __mmask16 mask) { return load_a16(p, m, k, mask); });
  dispatch_float(p.a_dtype, [&](auto t) {
    const char* row = static_cast<const char*>(p.a) + m * p.a_row_stride * bytes_of(t());
    f([&](std::int64_t k, __mmask16 mask) { return load16(row + k * bytes_of(t()), t(), mask); });
  });
}

// The largest |x| of a row of k elements, as its f32 bits: load(at, mask)
// gives the 16 from `at` as f32. An integer max of the magnitude bits (the
// order of non-negative floats, with Inf and NaN above every finite value:
// bits >= kNonFiniteBits flags a row that is not all finite), in four
// chains of 16. For the per-token quantization of A (W8A8, the int16 steps
// of the weight-only decode), where a float max and a compare per vector
// for NaN and Inf, through the dtype-switching load_a16, took 0.75 ns an
// element (AMD EPYC Turin): 6 % of a W8A8 linear at M = 128.
template <class Load>
__attribute__((always_inline)) static inline std::int32_t max_magnitude_bits(Load&& load, std::int64_t k) {
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff);
  const auto bits_of = [&](std::int64_t at, __mmask16 valid) { return _mm512_and_si512(_mm512_castps_si512(load(at, valid)), magnitude); };
  __m512i mx[4] = {};
  std::int64_t i = 0;
  for (; i + 64 <= k; i += 64)
    for (int j = 0; j < 4; ++j) mx[j] = _mm512_max_epi32(mx[j], bits_of(i + 16 * j, 0xffff));
  for (; i < k; i += 16) mx[0] = _mm512_max_epi32(mx[0], bits_of(i, tail_mask(k - i)));
  return _mm512_reduce_max_epi32(_mm512_max_epi32(_mm512_max_epi32(mx[0], mx[1]), _mm512_max_epi32(mx[2], mx[3])));
}

// Rows [m0, m1) of A in slivers of `mr` <= 16 rows, each unit-major
// ([unit][mr]; a unit is the 4 bytes one broadcast gives the micro-kernel:
// one f32, a bf16 pair or four u8), so the micro-kernel broadcasts from one
// sequential stream. `load(m, k)` gives row m's 16 units from column k of
// the slice (zero past its kc columns); 16 x 16 blocks are transposed in
// registers; rows past m1 in the last sliver are zero.
template <std::int64_t UnitK, class Load>
static inline void pack_a_units(std::int64_t m0, std::int64_t m1, std::int64_t kc, float* dst, std::int64_t mr, Load load) {
  const std::int64_t units = (kc + UnitK - 1) / UnitK;
  const __mmask16 row_mask = tail_mask(mr);
  for (std::int64_t s = m0; s < m1; s += mr) {
    const std::int64_t rows = std::min(mr, m1 - s);
    float* out = dst + (s - m0) * units;
    for (std::int64_t u = 0; u < units; u += 16) {
      __m512 r[16];
      for (std::int64_t i = 0; i < 16; ++i) r[i] = i < rows ? load(s + i, u * UnitK) : _mm512_setzero_ps();
      transpose16x16(r);
      const std::int64_t n = std::min<std::int64_t>(16, units - u);
      for (std::int64_t j = 0; j < n; ++j) _mm512_mask_storeu_ps(out + (u + j) * mr, row_mask, r[j]);
    }
  }
}

// Rows of A are a page or more apart, so the hardware prefetcher does not
// follow them: the packers fetch a few lines ahead, past the slice too.
constexpr std::int64_t kPrefetchAhead = 96;  // elements of a row of A

__attribute__((always_inline)) static inline void prefetch_a_row(const MatmulArgs& p, std::int64_t m, std::int64_t k) {
  if (p.a_col_stride == 1 && k + kPrefetchAhead < p.k)
    _mm_prefetch(static_cast<const char*>(advance(p.a, p.a_dtype, m * p.a_row_stride + k + kPrefetchAhead)), _MM_HINT_T0);
}

// Columns [k0, k0 + kc) of A's rows as f32 (W8A8: the int8 steps of each
// row's scale), packed by pack_a_units.
static inline void pack_a_f32(const MatmulArgs& p, std::int64_t m0, std::int64_t m1, std::int64_t k0, std::int64_t kc,
                              float* dst, std::int64_t mr) {
  pack_a_units<1>(m0, m1, kc, dst, mr, [&](std::int64_t m, std::int64_t k) {
    const auto load = [&](__mmask16 mask) {
      if (p.a_q) {
        const auto* q = reinterpret_cast<const __m128i*>(p.a_q + m * p.a_q_stride + k0 + k);
        return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, q))), _mm512_set1_ps(p.a_scales[m]));
      }
      prefetch_a_row(p, m, k0 + k);
      return load_a16(p, m, k0 + k, mask);
    };
    return kc - k >= 16 ? load(0xffff) : load(tail_mask(kc - k));  // whole vectors unmasked (vec.hpp, for_each16)
  });
}

// W8A8 for vpdpbusd (u8 x s8): the task's rows of quantized A offset by
// +128, into thread scratch as [m1 - m0][k_pad]. a_q is zero past K, so the
// padding becomes 128 and meets zero weights; the kernels take the offset
// back with the weights' column offsets (packed_weights.hpp).
static inline const std::uint8_t* unsigned_a_rows(const MatmulArgs& p, std::int64_t m0, std::int64_t m1,
                                                  std::int64_t k_pad) {
  auto* a = static_cast<std::uint8_t*>(thread_scratch(ScratchSlot::a_panel, std::size_t((m1 - m0) * k_pad)));
  for (std::int64_t m = m0; m < m1; ++m)
    for (std::int64_t k = 0; k < k_pad; k += 64)
      _mm512_storeu_si512(a + (m - m0) * k_pad + k,
                          _mm512_xor_si512(_mm512_loadu_si512(p.a_q + m * p.a_q_stride + k), _mm512_set1_epi8(char(0x80))));
  return a;
}

// Row E (0..3) of a 64-byte block of int4 weights (packed_weights.hpp): the
// stored integers of columns 0-15 (lo) and 16-31 (hi), one per lane, by
// constant shifts (a shift by a count in a register is two instructions).
template <int E>
static inline void i4_block_row(__m512i block, __m512i& lo, __m512i& hi) {
  const __m512i nibble = _mm512_set1_epi32(0xf);
  lo = _mm512_and_si512(E == 0 ? block : _mm512_srli_epi32(block, 8 * E), nibble);
  hi = E == 3 ? _mm512_srli_epi32(block, 28) : _mm512_and_si512(_mm512_srli_epi32(block, 8 * E + 4), nibble);
}

// How far ahead of itself each panel stream of the decode kernels
// (matmul_decode.cpp, avx512_bf16/matmul_decode_vnni.cpp and
// matmul_quantized_vnni.cpp) asks for its lines, into L2: the hardware
// prefetcher stops at page boundaries. 8 KiB (measured on Zen 4 within
// noise of 4-16 KiB, and into L2 because four streams that far ahead filled
// its 32 KiB L1) ran 1.1-1.25x slower than 2 KiB at M = 1 on AMD EPYC
// Turin: 4096 x 4096, cold, the distances alternating in one process (21
// rounds), time at 2 KiB over 8 KiB, 1 / 2 threads: f32 0.96 / 0.90, bf16
// 0.83 / 0.87-0.88, W8A8 0.90 / 0.92, weight-only int8 0.81 / 0.89, int4
// 0.76-0.80 / 0.80; 1 KiB about the same, 4 KiB in between; at M = 4 (one
// or two streams) every distance from 1.5 to 8 KiB within 3 %.
constexpr std::int64_t kPanelStreamAhead = 2048;

// A panel's scales and zero points of group g (32 columns from n, a panel's
// start) into L2, for a decode loop to ask for a group ahead: a load that
// misses stalls the loop on every group (AMD EPYC, Zen 4, when the groups
// lay a row of N apart: 39 % of the int4 loop's time at group 128 on the
// scales' load; with this 4096 x 4096 int4 at M = 1, cold, 1 thread
// 14-15.5 -> 17-21 GB/s, 2 threads 21.5-25 -> 26-33). Always inlined, as
// prefetch_ahead (vec.hpp).
__attribute__((always_inline)) static inline void prefetch_group_params(const PackedB& b, std::int64_t g, std::int64_t n) {
  if (g * b.group_size >= b.k) return;
  const std::int64_t at = group_param_index(b, g, n);
  const char* s = static_cast<const char*>(advance(b.scales, b.scale_dtype, at));
  _mm_prefetch(s, _MM_HINT_T1);
  if (bytes_of(b.scale_dtype) * kPanelCols > 64) _mm_prefetch(s + 64, _MM_HINT_T1);
  if (b.zeros) _mm_prefetch(reinterpret_cast<const char*>(b.zeros + at), _MM_HINT_T1);
}

// How many groups ahead of the one in use a decode loop asks for their
// scales: about `ahead` bytes of a panel's stream, at least one.
static inline std::int64_t groups_ahead(const PackedB& b, std::int64_t ahead) {
  const std::int64_t group_bytes = std::max<std::int64_t>(1, std::min(b.group_size, b.k)) * panel_row_bytes(b.dtype);
  return std::max<std::int64_t>(1, ahead / group_bytes);
}

// Reads rows of B[k, n : n + 32] as f32 (zero past N), in order of k. In an
// unnamed namespace: member functions are implicitly inline, and `static`
// cannot be applied to a class.
namespace {

// Dequantization constants of one group for a panel (32 columns from n):
// w = (q - zero) * scale, computed as one fused step q * scale - zero * scale.
struct GroupScales {
  __m512 scale[2] = {}, zero_scale[2] = {};

  void load(const PackedB& b, std::int64_t g, std::int64_t n) {
    const std::int64_t at = group_param_index(b, g, n);
    for (int h = 0; h < 2; ++h) {
      scale[h] = load16(advance(b.scales, b.scale_dtype, at + 16 * h), b.scale_dtype, 0xffff);
      const __m512 zero = b.zeros ? _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(
                                        reinterpret_cast<const __m128i*>(b.zeros + at + 16 * h))))
                                  : _mm512_set1_ps(b.dtype == DType::i4 ? 8.0f : 0.0f);
      zero_scale[h] = _mm512_mul_ps(zero, scale[h]);
    }
  }
  __m512 apply(__m512i q, int half) const { return _mm512_fmsub_ps(_mm512_cvtepi32_ps(q), scale[half], zero_scale[half]); }
  void apply(__m512i q0, __m512i q1, __m512& w0, __m512& w1) const { w0 = apply(q0, 0), w1 = apply(q1, 1); }
};

class BRows32 {
 public:
  // Columns [n, min(n + 32, n_end)) of B.
  BRows32(const MatmulArgs& p, std::int64_t n, std::int64_t n_end) : p_(p), n_(n), cols_(std::min(kPanelCols, n_end - n)) {}

  __attribute__((always_inline)) void row(std::int64_t k, __m512& lo, __m512& hi) {  // per row of B: a call would cost as much as the work
    if (!p_.packed) return raw(k, lo, hi);
    const PackedB& b = *p_.packed;
    const std::int64_t panel = n_ / kPanelCols;
    switch (b.dtype) {
      case DType::f32: {
        const float* r = static_cast<const float*>(b.values) + (panel * b.k + k) * kPanelCols;
        lo = _mm512_load_ps(r), hi = _mm512_load_ps(r + 16);
        return;
      }
      case DType::bf16: {
        // Row k is the even or odd bf16 of each (k, k+1) pair in a 64-byte tile row.
        const auto* v = static_cast<const std::uint16_t*>(b.values);
        const std::int64_t tile = panel * (padded_k(b.dtype, b.k) / kBf16KStep) + k / kBf16KStep;
        const std::uint16_t* r = v + tile * 2 * 512 + (k % kBf16KStep) / 2 * 32;
        lo = bf16_pair_half(_mm512_load_si512(r), k % 2);
        hi = bf16_pair_half(_mm512_load_si512(r + 512), k % 2);
        return;
      }
      default: return quantized(b, panel, k, lo, hi);
    }
  }

 private:
  static __m512 bf16_pair_half(__m512i pairs, std::int64_t odd) {
    return odd ? bf16_odd(pairs) : bf16_even(pairs);
  }

  void raw(std::int64_t k, __m512& lo, __m512& hi) {
    const std::int64_t at = k * p_.b_row_stride + n_ * p_.b_col_stride;
    if (p_.b_col_stride == 1) {
      lo = load16_first(advance(p_.b, p_.b_dtype, at), p_.b_dtype, cols_);
      hi = load16_first(advance(p_.b, p_.b_dtype, at + 16), p_.b_dtype, std::max<std::int64_t>(0, cols_ - 16));
      return;
    }
    alignas(64) float v[32] = {};
    for (std::int64_t j = 0; j < cols_; ++j) v[j] = load1(p_.b, p_.b_dtype, at + j * p_.b_col_stride);
    lo = _mm512_load_ps(v), hi = _mm512_load_ps(v + 16);
  }
  void quantized(const PackedB& b, std::int64_t panel, std::int64_t k, __m512& lo, __m512& hi) {
    const std::int64_t g = k / b.group_size;
    if (g != group_) scales_.load(b, group_ = g, n_);
    const auto* v = static_cast<const std::uint8_t*>(b.values);
    __m512i q0, q1;
    if (b.dtype == DType::i4) {
      // Row k % 4 of the 64 bytes holding k, by constant shifts (k % 4
      // repeats, so the branch is predicted).
      const __m512i block = _mm512_load_si512(v + i4_byte_index(padded_k(b.dtype, b.k), k - k % 4, n_));
      switch (k % 4) {
        case 0: i4_block_row<0>(block, q0, q1); break;
        case 1: i4_block_row<1>(block, q0, q1); break;
        case 2: i4_block_row<2>(block, q0, q1); break;
        default: i4_block_row<3>(block, q0, q1); break;
      }
    } else {
      // Byte k % 4 of each 4-byte lane of the tile row holding k: shift it to
      // the top, then back down with or without its sign.
      const std::uint8_t* row = v + ((panel * (padded_k(b.dtype, b.k) / kI8KStep) + k / kI8KStep) * 2 * 1024) + (k % kI8KStep) / 4 * 64;
      const __m512i up = _mm512_set1_epi32(int(8 * (3 - k % 4)));
      const __m512i d0 = _mm512_sllv_epi32(_mm512_load_si512(row), up), d1 = _mm512_sllv_epi32(_mm512_load_si512(row + 1024), up);
      q0 = b.zeros ? _mm512_srli_epi32(d0, 24) : _mm512_srai_epi32(d0, 24);
      q1 = b.zeros ? _mm512_srli_epi32(d1, 24) : _mm512_srai_epi32(d1, 24);
    }
    scales_.apply(q0, q1, lo, hi);
  }

  const MatmulArgs& p_;
  std::int64_t n_, cols_;
  std::int64_t group_ = -1;
  GroupScales scales_;
};
}  // namespace

// (k, k+1) rows of 16 columns as the 16 bf16 pairs of one B-tile row.
static inline __m512i bf16_pairs(__m512 even, __m512 odd) {
  return _mm512_or_si512(_mm512_cvtepu16_epi32(to_bf16(even)), _mm512_slli_epi32(_mm512_cvtepu16_epi32(to_bf16(odd)), 16));
}

// B[k0 : k0 + kc, n : n + 32] in the bf16 tile layout (packed_weights.hpp),
// kc rounded up to 32 with zero rows: packed bf16 weights in place, anything
// else (raw B, int8 / int4 weights dequantized) converted into buf. k0 is a
// multiple of 32.
static inline const std::uint16_t* bf16_b_tiles(const MatmulArgs& p, std::int64_t n, std::int64_t n_end, std::int64_t k0,
                                                std::int64_t kc, std::uint16_t* buf) {
  if (p.packed && p.packed->dtype == DType::bf16) {
    const std::int64_t steps = padded_k(DType::bf16, p.packed->k) / kBf16KStep;
    return static_cast<const std::uint16_t*>(p.packed->values) + ((n / kPanelCols) * steps + k0 / kBf16KStep) * 2 * 512;
  }
  BRows32 rows(p, n, n_end);
  const std::int64_t kc_pad = round_up(kc, kBf16KStep);
  for (std::int64_t k = 0; k < kc_pad; k += 2) {
    __m512 e0 = _mm512_setzero_ps(), e1 = e0, o0 = e0, o1 = e0;
    if (k < kc) rows.row(k0 + k, e0, e1);
    if (k + 1 < kc) rows.row(k0 + k + 1, o0, o1);
    std::uint16_t* tile = buf + (k / kBf16KStep) * 2 * 512 + (k % kBf16KStep) / 2 * 32;
    _mm512_store_si512(tile, bf16_pairs(e0, o0));
    _mm512_store_si512(tile + 512, bf16_pairs(e1, o1));
  }
  return buf;
}

// B[k0 : k0 + kc, n : n + 32] as a dense f32 panel: packed f32 weights in
// place, anything else converted into `buf` (kc x 32).
static inline const float* b_panel_f32(const MatmulArgs& p, std::int64_t n, std::int64_t n_end, std::int64_t k0,
                                       std::int64_t kc, float* buf) {
  if (p.packed && p.packed->dtype == DType::f32)
    return static_cast<const float*>(p.packed->values) + (n / kPanelCols * p.packed->k + k0) * kPanelCols;
  BRows32 rows(p, n, n_end);
  for (std::int64_t k = 0; k < kc; ++k) {
    __m512 lo, hi;
    rows.row(k0 + k, lo, hi);
    _mm512_store_ps(buf + k * kPanelCols, lo);
    _mm512_store_ps(buf + k * kPanelCols + 16, hi);
  }
  return buf;
}

}  // namespace tessera::kernels::avx512
