#include "kernels/quantize.hpp"
#include "kernels/x86/avx512/vec.hpp"
#include "kernels/x86/load1.hpp"

namespace tessera::kernels::avx512 {

namespace {

// Lanes [0, n) of run elements i .. i + n - 1: the value of each one's group,
// at(g), loaded once per group (two loads for groups of 16 or more).
template <class At>
__m512 per_group16(std::int64_t i, std::int64_t n, std::int64_t group, At at) {
  std::int64_t g = i / group;
  __m512 v = _mm512_set1_ps(at(g));
  for (std::int64_t lane = (g + 1) * group - i; lane < n; lane += group)
    v = _mm512_mask_mov_ps(v, __mmask16(0xffffu << lane), _mm512_set1_ps(at(++g)));
  return v;
}

// n <= 16 integers from element i on (i4: i even, so they start a byte), as i32 lanes.
inline __m512i load_q16(const void* base, DType t, std::int64_t i, std::int64_t n) {
  const auto* p = static_cast<const std::uint8_t*>(base);
  if (t == DType::i4) {
    const __m512i b = _mm512_cvtepu8_epi64(_mm_maskz_loadu_epi8(__mmask16((1u << ((n + 1) / 2)) - 1), p + i / 2));
    const __m512i both = _mm512_or_si512(b, _mm512_slli_epi64(b, 32));  // byte k in lanes 2k and 2k + 1
    // Even lanes take the low nibble, odd lanes the high one, to the top; the
    // arithmetic shift back down sign-extends.
    return _mm512_srai_epi32(_mm512_sllv_epi32(both, _mm512_set1_epi64(0x000000180000001cll)), 28);
  }
  const __m128i bytes = _mm_maskz_loadu_epi8(tail_mask(n), p + i);
  return t == DType::u8 ? _mm512_cvtepu8_epi32(bytes) : _mm512_cvtepi8_epi32(bytes);
}

// Stores n <= 16 in-range integers at element i on (i4: i even). An odd i4
// count ends in half a byte: its other nibble is kept.
inline void store_q16(void* base, DType t, std::int64_t i, __m512i q, std::int64_t n) {
  auto* p = static_cast<std::uint8_t*>(base);
  if (t != DType::i4) {
    _mm512_mask_cvtepi32_storeu_epi8(p + i, tail_mask(n), q);  // i8 and u8: the low byte is the value
    return;
  }
  const __m512i nib = _mm512_and_si512(q, _mm512_set1_epi32(0xf));
  // Per 64-bit lane: element 2k's nibble | element 2k + 1's << 4 in the low byte.
  const __m128i bytes = _mm512_cvtepi64_epi8(_mm512_or_si512(nib, _mm512_srli_epi64(nib, 28)));
  p += i / 2;
  _mm_mask_storeu_epi8(p, __mmask16((1u << (n / 2)) - 1), bytes);
  if (n & 1) {
    alignas(16) std::uint8_t b[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(b), bytes);
    p[n / 2] = std::uint8_t((p[n / 2] & 0xf0) | (b[n / 2] & 0x0f));
  }
}

// The scale and zero point of each run element as f32 lanes: constant ones
// are loaded once, per-element contiguous ones as vectors, the rest per group.
class Params {
 public:
  explicit Params(const QuantArgs& a)
      : a_(a), scale_(_mm512_set1_ps(scale_at(0))), zero_(a.zp ? _mm512_set1_ps(zero_at(0)) : _mm512_setzero_ps()) {}

  __m512 scale(std::int64_t i, std::int64_t n, __mmask16 m) const {
    if (a_.scale_stride == 0) return scale_;
    if (a_.group == 1 && a_.scale_stride == 1) return load16(advance(a_.scale, a_.scale_dtype, a_.scale_offset + i), a_.scale_dtype, m);
    return per_group16(i, n, a_.group, [&](std::int64_t g) { return scale_at(g); });
  }
  __m512 zero(std::int64_t i, std::int64_t n) const {
    if (!a_.zp || a_.zp_stride == 0) return zero_;
    if (a_.group == 1 && a_.zp_stride == 1 && a_.zp_dtype != DType::i4)
      return _mm512_cvtepi32_ps(load_q16(a_.zp, a_.zp_dtype, a_.zp_offset + i, n));
    return per_group16(i, n, a_.group, [&](std::int64_t g) { return zero_at(g); });
  }

 private:
  float scale_at(std::int64_t g) const { return load1(a_.scale, a_.scale_dtype, a_.scale_offset + g * a_.scale_stride); }
  float zero_at(std::int64_t g) const { return float(quantized_at(a_.zp, a_.zp_dtype, a_.zp_offset + g * a_.zp_stride)); }

  const QuantArgs& a_;
  __m512 scale_, zero_;
};

}  // namespace

template <class X, class Q>
static void quantize_scaled(const QuantArgs& a, X xt, Q qt, std::int64_t i0, std::int64_t i1) {
  const char* x = static_cast<const char*>(a.x) + a.x_offset * bytes_of(xt);
  const float* scale = static_cast<const float*>(a.scale) + a.scale_offset;
  const bool per_element = a.scale_stride != 0;
  const __m512 scale0 = _mm512_set1_ps(scale[0]);
  const QuantRange range = quant_range(qt);
  const __m512 lo = _mm512_set1_ps(float(range.lo)), hi = _mm512_set1_ps(float(range.hi));
  // Whole vectors with the constant mask and count, so their loads and
  // stores compile unmasked (vec.hpp, for_each16).
  for_each16(i1 - i0, [&](std::int64_t j, __mmask16 m) {
    const std::int64_t i = i0 + j, n = m == 0xffff ? 16 : i1 - i;
    prefetch_ahead(x + i * bytes_of(xt), 16 * bytes_of(xt));  // the division leaves time to wait on misses
    const __m512 s = per_element ? _mm512_maskz_loadu_ps(m, scale + i) : scale0;
    __m512 q = _mm512_roundscale_ps(_mm512_div_ps(load16(x + i * bytes_of(xt), xt, m), s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(q, q, _CMP_ORD_Q), q);  // NaN -> 0, the zero point
    q = _mm512_min_ps(_mm512_max_ps(q, lo), hi);
    store_q16(a.y, qt, a.y_offset + i, _mm512_cvtps_epi32(q), n);
  });
}

// Division, not a multiply by the reciprocal: bit-identical to the reference.
void quantize(const QuantArgs& a, std::int64_t i0, std::int64_t i1) {
  if (common_quant_layout(a, a.y_dtype))
    return dispatch_quant_types(a.x_dtype, a.y_dtype, [&](auto xt, auto qt) { quantize_scaled(a, xt, qt, i0, i1); });
  const QuantRange range = quant_range(a.y_dtype);
  const __m512 lo = _mm512_set1_ps(float(range.lo)), hi = _mm512_set1_ps(float(range.hi));
  const Params params(a);
  for (std::int64_t i = i0; i < i1; i += 16) {
    const std::int64_t n = std::min<std::int64_t>(16, i1 - i);
    const __mmask16 m = tail_mask(n);
    const __m512 x = load16(advance(a.x, a.x_dtype, a.x_offset + i), a.x_dtype, m);
    const __m512 z = params.zero(i, n);
    const __m512 r = _mm512_roundscale_ps(_mm512_div_ps(x, params.scale(i, n, m)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 q = _mm512_add_ps(r, z);
    q = _mm512_mask_mov_ps(q, _mm512_cmp_ps_mask(q, q, _CMP_UNORD_Q), z);  // NaN -> the zero point
    q = _mm512_min_ps(_mm512_max_ps(q, lo), hi);
    store_q16(a.y, a.y_dtype, a.y_offset + i, _mm512_cvtps_epi32(q), n);
  }
}

template <class X, class Y>
static void dequantize_scaled(const QuantArgs& a, X xt, Y yt, std::int64_t i0, std::int64_t i1) {
  char* y = static_cast<char*>(a.y) + a.y_offset * bytes_of(yt);
  const float* scale = static_cast<const float*>(a.scale) + a.scale_offset;
  const bool per_element = a.scale_stride != 0;
  const __m512 scale0 = _mm512_set1_ps(scale[0]);
  const bool stream = a.stream_y;
  // n the constant 16 in the main loop, so load_q16's loads compile unmasked
  // (masked loads of cold memory run at half speed: vec.hpp, for_each16).
  auto value = [&](std::int64_t i, std::int64_t n) {
    const __m512 q = _mm512_cvtepi32_ps(load_q16(a.x, xt, a.x_offset + i, n));
    return _mm512_mul_ps(q, per_element ? _mm512_maskz_loadu_ps(tail_mask(n), scale + i) : scale0);
  };
  std::int64_t i = i0;
  for (; i + 32 <= i1; i += 32) put32(y + i * bytes_of(yt), yt, value(i, 16), value(i + 16, 16), stream);
  for (; i < i1; i += 16) put16(y + i * bytes_of(yt), yt, value(i, std::min<std::int64_t>(16, i1 - i)), tail_mask(i1 - i), stream);
  if (stream) _mm_sfence();
}

void dequantize(const QuantArgs& a, std::int64_t i0, std::int64_t i1) {
  if (common_quant_layout(a, a.x_dtype))
    return dispatch_quant_types(a.y_dtype, a.x_dtype, [&](auto yt, auto xt) { dequantize_scaled(a, xt, yt, i0, i1); });
  const Params params(a);
  for (std::int64_t i = i0; i < i1; i += 16) {
    const std::int64_t n = std::min<std::int64_t>(16, i1 - i);
    const __mmask16 m = tail_mask(n);
    const __m512 q = _mm512_cvtepi32_ps(load_q16(a.x, a.x_dtype, a.x_offset + i, n));
    // q - zero is exact, so one rounding, as in the reference.
    const __m512 y = _mm512_mul_ps(_mm512_sub_ps(q, params.zero(i, n)), params.scale(i, n, m));
    store16(advance(a.y, a.y_dtype, a.y_offset + i), a.y_dtype, y, m);
  }
}

}  // namespace tessera::kernels::avx512
