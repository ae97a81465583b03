#include <algorithm>
#include <type_traits>

#include "kernels/group_norm.hpp"
#include "kernels/x86/avx512/vec.hpp"

namespace tessera::kernels::avx512 {

// Deviations from a shift near the data (a value of the group) add up in f32
// over at most kFlush vectors (run_stats) or lines (column_stats), then move
// into f64: few enough terms that f32 loses nothing that shows, and the f64
// conversions are amortized over them.
static constexpr std::int64_t kFlush = 64;

// An operand as the loops use it: data, bytes between lines, and its dtype,
// a compile-time constant (std::integral_constant) in the common case of one
// dtype for all operands, so no switch on it runs per vector; see unary_rows.hpp.
template <class T>
struct Operand {
  char* data;
  std::int64_t line_bytes;
  T t;
  Operand(const GroupNormOperand& o, T type)
      : data(static_cast<char*>(o.data)), line_bytes(o.line_stride * bytes_of(type)), t(type) {}
  char* at(std::int64_t line, std::int64_t i) const { return data + line * line_bytes + i * bytes_of(t); }
  __m512 load(std::int64_t line, std::int64_t i, __mmask16 m) const { return load16(at(line, i), t, m); }
};

// The operands of a block: x, residual, mul, y, sum (absent ones have null data).
template <class T>
struct Block {
  Operand<T> x, residual, mul, y, sum;
  std::int64_t lines, len;

  // x [+ residual] at elements i..i+15 of a line.
  __m512 input16(std::int64_t l, std::int64_t i, __mmask16 m) const {
    __m512 v = x.load(l, i, m);
    if (residual.data) v = _mm512_add_ps(v, residual.load(l, i, m));
    return v;
  }
  // v as the statistics see it: written to sum when there is one, and read back rounded.
  __m512 stats16(std::int64_t l, std::int64_t i, __mmask16 m) const {
    const __m512 v = input16(l, i, m);
    return sum.data ? store16_rounded(sum.at(l, i), sum.t, v, m) : v;
  }
};

// Calls f(Block) with compile-time dtypes when every operand present has x's
// dtype, else with the run-time ones.
template <class F>
static void with_block(const GroupNormLines& a, F&& f) {
  const DType t = a.x.dtype;
  bool one_type = true;
  for (const GroupNormOperand* o : {&a.residual, &a.mul, &a.y, &a.sum}) one_type = one_type && (!o->data || o->dtype == t);
  if (one_type)
    return dispatch_float(t, [&](auto c) {
      f(Block<decltype(c)>{{a.x, c}, {a.residual, c}, {a.mul, c}, {a.y, c}, {a.sum, c}, a.lines, a.len});
    });
  f(Block<DType>{{a.x, a.x.dtype}, {a.residual, a.residual.dtype}, {a.mul, a.mul.dtype}, {a.y, a.y.dtype},
                 {a.sum, a.sum.dtype}, a.lines, a.len});
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
  with_block(a, [&](const auto& b) {
    const __m512 s = _mm512_set1_ps(shift);
    __m512d t1 = _mm512_setzero_pd(), t2 = _mm512_setzero_pd();
    for (std::int64_t l = 0; l < b.lines; ++l)
      for (std::int64_t i = 0; i < b.len;) {
        __m512 p1 = _mm512_setzero_ps(), p2 = _mm512_setzero_ps();
        for (const std::int64_t end = b.len - i > kFlush * 16 ? i + kFlush * 16 : b.len; i < end; i += 16) {
          const __mmask16 m = tail_mask(b.len - i);
          const __m512 d = _mm512_maskz_sub_ps(m, b.stats16(l, i, m), s);  // masked lanes add nothing
          p1 = _mm512_add_ps(p1, d);
          p2 = _mm512_fmadd_ps(d, d, p2);
        }
        t1 = _mm512_add_pd(t1, widen_sum(p1));
        t2 = _mm512_add_pd(t2, widen_sum(p2));
      }
    sums[0] += _mm512_reduce_add_pd(t1);
    sums[1] += _mm512_reduce_add_pd(t2);
  });
}

// Per-channel partials live in scratch (L1-resident for any practical C).
// Lines go in tiles of kTileLines, which stay in L1 while each 16 channels
// sum down the tile in registers: scratch is read and written once per tile,
// not once per line (two stores and two loads per vector of x).
static constexpr std::int64_t kTileLines = 8;

void group_norm_column_stats(const GroupNormLines& a, const float* shift, double* sums, float* scratch) {
  float* p1 = scratch;
  float* p2 = scratch + a.len;
  for (std::int64_t i = 0; i < 2 * a.len; ++i) scratch[i] = 0.0f;
  with_block(a, [&](const auto& b) {
    for (std::int64_t l0 = 0; l0 < b.lines; l0 += kFlush) {
      const std::int64_t l1 = b.lines - l0 > kFlush ? l0 + kFlush : b.lines;
      for (std::int64_t t0 = l0; t0 < l1; t0 += kTileLines) {
        const std::int64_t t1 = std::min(l1, t0 + kTileLines);
        for (std::int64_t i = 0; i < b.len; i += 16) {
          const __mmask16 m = tail_mask(b.len - i);
          const __m512 s = _mm512_maskz_loadu_ps(m, shift + i);
          __m512 s1 = _mm512_maskz_loadu_ps(m, p1 + i), s2 = _mm512_maskz_loadu_ps(m, p2 + i);
          for (std::int64_t l = t0; l < t1; ++l) {
            const __m512 d = _mm512_maskz_sub_ps(m, b.stats16(l, i, m), s);
            s1 = _mm512_add_ps(s1, d);
            s2 = _mm512_fmadd_ps(d, d, s2);
          }
          _mm512_mask_storeu_ps(p1 + i, m, s1);
          _mm512_mask_storeu_ps(p2 + i, m, s2);
        }
      }
      flush(p1, sums, b.len);
      flush(p2, sums + b.len, b.len);
    }
  });
}

void group_norm_apply(const GroupNormLines& a, const GroupNormCoefs& c) {
  with_block(a, [&](const auto& b) {
    const float *mean = c.mean, *scale = c.scale, *bias = c.bias;
    const std::int64_t stride = c.stride;
    const bool silu = c.silu;
    // Compiled with and without streaming stores, so the loop does not test for them.
    const auto lines = [&](auto stream) {
      for (std::int64_t l = 0; l < b.lines; ++l)
        for (std::int64_t i = 0; i < b.len; i += 16) {
          const __mmask16 m = tail_mask(b.len - i);
          const __m512 v = b.sum.data ? b.sum.load(l, i, m) : b.input16(l, i, m);
          __m512 t = _mm512_fmadd_ps(_mm512_sub_ps(v, coef16(mean, stride, i, m)), coef16(scale, stride, i, m),
                                     coef16(bias, stride, i, m));
          if (silu) t = silu16(t);
          if (b.mul.data) t = _mm512_mul_ps(t, b.mul.load(l, i, m));
          if constexpr (stream) put16(b.y.at(l, i), b.y.t, t, m, true);
          else store16(b.y.at(l, i), b.y.t, t, m);
        }
    };
    if (c.stream_y) {
      lines(std::true_type());
      _mm_sfence();
    } else {
      lines(std::false_type());
    }
  });
}

}  // namespace tessera::kernels::avx512
