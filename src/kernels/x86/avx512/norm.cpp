#include "kernels/norm.hpp"
#include "kernels/x86/avx512/vec.hpp"

namespace tessera::kernels::avx512 {

// Passes over each row (the sum or the mean, the centered squares, the
// output): a row of a transformer (<= 16 KiB in f32) stays in L1 between
// them, so only the first pass and the output touch memory. Statistics add up
// in f64, so rows with |v| beyond 1.8e19 (whose f32 squares overflow) still work.

// v as a store to dtype t and a load back would give it.
static inline __m512 rounded(__m512 v, DType t) {
  switch (t) {
    case DType::bf16: return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(to_bf16(v)), 16));
    case DType::f16: return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    default: return v;
  }
}

template <bool kSquare>
static inline void accumulate(__m512 v, __m512d& lo, __m512d& hi) {
  const __m512d a = _mm512_cvtps_pd(_mm512_castps512_ps256(v)), b = _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1));
  if constexpr (kSquare) {
    lo = _mm512_fmadd_pd(a, a, lo);
    hi = _mm512_fmadd_pd(b, b, hi);
  } else {
    lo = _mm512_add_pd(lo, a);
    hi = _mm512_add_pd(hi, b);
  }
}

// The f64 sum of chunk(c, mask) (squared when kSquare) over the row's
// 16-column chunks, in four chains so that the adds' latency does not bound
// the pass. Masked-off lanes must be 0.
template <bool kSquare, class Chunk>
static inline double row_sum(std::int64_t n, Chunk&& chunk) {
  __m512d s0 = _mm512_setzero_pd(), s1 = s0, s2 = s0, s3 = s0;
  std::int64_t c = 0;
  for (; c + 32 <= n; c += 32) {
    accumulate<kSquare>(chunk(c, __mmask16(0xffff)), s0, s1);
    accumulate<kSquare>(chunk(c + 16, __mmask16(0xffff)), s2, s3);
  }
  for (; c < n; c += 16) accumulate<kSquare>(chunk(c, tail_mask(n - c)), s0, s1);
  return _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(s0, s1), _mm512_add_pd(s2, s3)));
}

void norm(const NormArgs& a, std::int64_t r0, std::int64_t r1) {
  const std::int64_t n = a.cols;
  const std::int64_t xs = bytes_of(a.x_dtype), rs = bytes_of(a.residual_dtype), ss = bytes_of(a.sum_dtype), ys = bytes_of(a.y_dtype);
  // The row normalized: the sum as stored when there is a residual, else x.
  const DType vt = a.residual ? a.sum_dtype : a.x_dtype;
  const std::int64_t vs = bytes_of(vt);
  const bool layer = a.kind == NormKind::layer;
  for (std::int64_t r = r0; r < r1; ++r) {
    const char* x = static_cast<const char*>(a.x) + r * a.x_row_stride * xs;
    char* y = static_cast<char*>(a.y) + r * a.y_row_stride * ys;
    const char* v = x;
    double total = 0.0;  // of v, for the mean
    if (a.residual) {
      const char* res = static_cast<const char*>(a.residual) + r * a.residual_row_stride * rs;
      char* sum = static_cast<char*>(a.sum) + r * a.sum_row_stride * ss;
      total = row_sum<false>(n, [&](std::int64_t c, __mmask16 m) {
        const __m512 t = rounded(_mm512_add_ps(load16(x + c * xs, a.x_dtype, m), load16(res + c * rs, a.residual_dtype, m)), a.sum_dtype);
        store16(sum + c * ss, a.sum_dtype, t, m);
        return t;
      });
      v = sum;
    } else if (layer) {
      total = row_sum<false>(n, [&](std::int64_t c, __mmask16 m) { return load16(x + c * xs, a.x_dtype, m); });
    }
    const double mean = layer ? total / double(n) : 0.0;
    const __m512 mean16 = _mm512_set1_ps(float(mean));
    const double var = row_sum<true>(n, [&](std::int64_t c, __mmask16 m) {
                         return _mm512_maskz_sub_ps(m, load16(v + c * vs, vt, m), mean16);
                       }) / double(n);
    const __m512 inv = _mm512_set1_ps(float(inv_std(var, a.eps)));
    for (std::int64_t c = 0; c < n; c += 16) {
      const __mmask16 m = tail_mask(n - c);
      const __m512 g = a.gamma ? load16(advance(a.gamma, a.gamma_dtype, c), a.gamma_dtype, m) : _mm512_set1_ps(1.0f);
      const __m512 b = a.beta ? load16(advance(a.beta, a.beta_dtype, c), a.beta_dtype, m) : _mm512_setzero_ps();
      const __m512 d = _mm512_mul_ps(_mm512_sub_ps(load16(v + c * vs, vt, m), mean16), inv);
      store16(y + c * ys, a.y_dtype, _mm512_fmadd_ps(d, g, b), m);
    }
  }
}

}  // namespace tessera::kernels::avx512
