#include "kernels/group_norm.hpp"
#include "kernels/x86/avx512/vec.hpp"

namespace tessera::kernels::avx512 {

// Deviations from a shift near the data (a value of the group) add up in f32
// over at most kFlush vectors (run_stats) or lines (column_stats), then move
// into f64: few enough terms that f32 loses nothing that shows, and the f64
// conversions are amortized over them.
static constexpr std::int64_t kFlush = 64;

static inline char* at(const GroupNormOperand& o, std::int64_t line, std::int64_t i) {
  return static_cast<char*>(o.data) + (line * o.line_stride + i) * bytes_of(o.dtype);
}

// x [+ residual] at elements i..i+15 of a line.
static inline __m512 input16(const GroupNormLines& a, std::int64_t line, std::int64_t i, __mmask16 m) {
  __m512 v = load16(at(a.x, line, i), a.x.dtype, m);
  if (a.residual.data) v = _mm512_add_ps(v, load16(at(a.residual, line, i), a.residual.dtype, m));
  return v;
}

// v as the statistics see it: written to sum when there is one, and read back rounded.
static inline __m512 stats16(const GroupNormLines& a, std::int64_t line, std::int64_t i, __mmask16 m) {
  const __m512 v = input16(a, line, i, m);
  if (!a.sum.data) return v;
  char* s = at(a.sum, line, i);
  store16(s, a.sum.dtype, v, m);
  return load16(s, a.sum.dtype, m);
}

static inline __m512d widen_sum(__m512 v) {
  return _mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(v)), _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)));
}

// sums[i] += p[i] in f64, then p[i] = 0, for i < n.
static inline void flush(float* p, double* sums, std::int64_t n) {
  for (std::int64_t i = 0; i < n; i += 8) {
    const __mmask8 m = n - i >= 8 ? __mmask8(0xff) : __mmask8((1u << (n - i)) - 1u);
    const __m512d v = _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, p + i));
    _mm512_mask_storeu_pd(sums + i, m, _mm512_add_pd(_mm512_maskz_loadu_pd(m, sums + i), v));
    _mm256_mask_storeu_ps(p + i, m, _mm256_setzero_ps());
  }
}

static inline __m512 coef16(const float* p, std::int64_t stride, std::int64_t i, __mmask16 m) {
  return stride ? _mm512_maskz_loadu_ps(m, p + i) : _mm512_set1_ps(*p);
}

void group_norm_run_stats(const GroupNormLines& a, float shift, double* sums) {
  const __m512 s = _mm512_set1_ps(shift);
  __m512d t1 = _mm512_setzero_pd(), t2 = _mm512_setzero_pd();
  for (std::int64_t l = 0; l < a.lines; ++l)
    for (std::int64_t i = 0; i < a.len;) {
      __m512 p1 = _mm512_setzero_ps(), p2 = _mm512_setzero_ps();
      for (const std::int64_t end = a.len - i > kFlush * 16 ? i + kFlush * 16 : a.len; i < end; i += 16) {
        const __mmask16 m = tail_mask(a.len - i);
        const __m512 d = _mm512_maskz_sub_ps(m, stats16(a, l, i, m), s);  // masked lanes add nothing
        p1 = _mm512_add_ps(p1, d);
        p2 = _mm512_fmadd_ps(d, d, p2);
      }
      t1 = _mm512_add_pd(t1, widen_sum(p1));
      t2 = _mm512_add_pd(t2, widen_sum(p2));
    }
  sums[0] += _mm512_reduce_add_pd(t1);
  sums[1] += _mm512_reduce_add_pd(t2);
}

// Per-channel partials live in scratch (L1-resident for any practical C), so
// one pass over a line updates every channel with unit-stride vectors.
void group_norm_column_stats(const GroupNormLines& a, const float* shift, double* sums, float* scratch) {
  float* p1 = scratch;
  float* p2 = scratch + a.len;
  for (std::int64_t i = 0; i < 2 * a.len; ++i) scratch[i] = 0.0f;
  for (std::int64_t l0 = 0; l0 < a.lines; l0 += kFlush) {
    const std::int64_t l1 = a.lines - l0 > kFlush ? l0 + kFlush : a.lines;
    for (std::int64_t l = l0; l < l1; ++l)
      for (std::int64_t i = 0; i < a.len; i += 16) {
        const __mmask16 m = tail_mask(a.len - i);
        const __m512 d = _mm512_maskz_sub_ps(m, stats16(a, l, i, m), _mm512_maskz_loadu_ps(m, shift + i));
        _mm512_mask_storeu_ps(p1 + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, p1 + i), d));
        _mm512_mask_storeu_ps(p2 + i, m, _mm512_fmadd_ps(d, d, _mm512_maskz_loadu_ps(m, p2 + i)));
      }
    flush(p1, sums, a.len);
    flush(p2, sums + a.len, a.len);
  }
}

void group_norm_apply(const GroupNormLines& a, const GroupNormCoefs& c) {
  for (std::int64_t l = 0; l < a.lines; ++l)
    for (std::int64_t i = 0; i < a.len; i += 16) {
      const __mmask16 m = tail_mask(a.len - i);
      const __m512 v = a.sum.data ? load16(at(a.sum, l, i), a.sum.dtype, m) : input16(a, l, i, m);
      __m512 t = _mm512_fmadd_ps(_mm512_sub_ps(v, coef16(c.mean, c.stride, i, m)), coef16(c.scale, c.stride, i, m),
                                 coef16(c.bias, c.stride, i, m));
      if (c.silu) t = silu16(t);
      if (a.mul.data) t = _mm512_mul_ps(t, load16(at(a.mul, l, i), a.mul.dtype, m));
      store16(at(a.y, l, i), a.y.dtype, t, m);
    }
}

}  // namespace tessera::kernels::avx512
