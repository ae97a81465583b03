#include <algorithm>
#include <type_traits>

#include "kernels/group_norm.hpp"
#include "kernels/scratch.hpp"
#include "kernels/x86/avx2/math.hpp"

namespace tessera::kernels::avx2 {

// As the AVX-512 rows: deviations from a shift near the data add up in f32
// over at most kFlush vectors or lines, then move into f64.
static constexpr std::int64_t kFlush = 64;

// An operand's storage type: T when known at compile time (the operands
// sharing one, std::integral_constant), else its own.
template <class T>
static inline auto type_of(const GroupNormOperand& o, T t) {
  if constexpr (std::is_same_v<T, DType>) return o.dtype;
  else return t;
}

// Element i of a line, its size from T when known at compile time: as
// bytes_of(o.dtype), a table lookup and a multiply per vector of every
// operand in the loops below.
template <class T>
static inline char* at(const GroupNormOperand& o, std::int64_t line, std::int64_t i, T t) {
  return static_cast<char*>(o.data) + (line * o.line_stride + i) * bytes_of(type_of(o, t));
}

// v as the statistics see it, elements i..i+n-1 (n <= 8) of a line, zeros
// in the lanes past n: x [+ residual], written to sum when there is one and
// read back rounded.
template <class T>
static inline __m256 stats8(const GroupNormLines& a, std::int64_t line, std::int64_t i, std::int64_t n, T t) {
  __m256 v = load8_n(at(a.x, line, i, t), type_of(a.x, t), n);
  if (a.residual.data) v = _mm256_add_ps(v, load8_n(at(a.residual, line, i, t), type_of(a.residual, t), n));
  if (!a.sum.data) return v;
  char* s = at(a.sum, line, i, t);
  store8_n(s, type_of(a.sum, t), v, n);
  return load8_n(s, type_of(a.sum, t), n);
}

static inline __m256d widen_sum(__m256 v) {
  return _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

// sums[i] += v[i] in f64, for i < n <= 8. Whole vectors from registers: stored
// and added by flush() instead, [1, 64, 64, 320] group norm took 3-7 % longer.
static inline void add_f64_n(__m256 v, double* sums, std::int64_t n) {
  if (n == 8) {
    _mm256_storeu_pd(sums, _mm256_add_pd(_mm256_loadu_pd(sums), _mm256_cvtps_pd(_mm256_castps256_ps128(v))));
    _mm256_storeu_pd(sums + 4, _mm256_add_pd(_mm256_loadu_pd(sums + 4), _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))));
    return;
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, v);
  for (std::int64_t i = 0; i < n; ++i) sums[i] += double(lanes[i]);
}

// sums[i] += p[i] in f64, then p[i] = 0, for i < n.
static inline void flush(float* p, double* sums, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    _mm256_storeu_pd(sums + i, _mm256_add_pd(_mm256_loadu_pd(sums + i), _mm256_cvtps_pd(_mm_loadu_ps(p + i))));
    _mm_storeu_ps(p + i, _mm_setzero_ps());
  }
  for (; i < n; ++i) {
    sums[i] += double(p[i]);
    p[i] = 0.0f;
  }
}

static inline __m256 coef8(const float* p, std::int64_t stride, std::int64_t i, std::int64_t n) {
  return stride ? load8_n(p + i, DType::f32, n) : _mm256_set1_ps(*p);
}

void group_norm_run_stats(const GroupNormLines& a, float shift, double* sums) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256d t1 = _mm256_setzero_pd(), t2 = _mm256_setzero_pd();
  for (std::int64_t l = 0; l < a.lines; ++l)
    for (std::int64_t i = 0; i < a.len;) {
      __m256 p1 = _mm256_setzero_ps(), p2 = _mm256_setzero_ps();
      for (const std::int64_t end = a.len - i > kFlush * 8 ? i + kFlush * 8 : a.len; i < end; i += 8) {
        const std::int64_t n = a.len - i;
        __m256 d = _mm256_sub_ps(stats8(a, l, i, n, a.x.dtype), s);
        if (n < 8) d = _mm256_and_ps(d, lanes_below(n));  // lanes past the end add nothing
        p1 = _mm256_add_ps(p1, d);
        p2 = _mm256_fmadd_ps(d, d, p2);
      }
      t1 = _mm256_add_pd(t1, widen_sum(p1));
      t2 = _mm256_add_pd(t2, widen_sum(p2));
    }
  sums[0] += hsum_pd(t1);
  sums[1] += hsum_pd(t2);
}

// Per-channel partials in scratch, updated with unit-stride vectors per
// line, the lines read in order: for lines from memory (a.from_memory),
// whose reads in order the hardware prefetchers follow; column_blocks below
// read them slower (AMD EPYC Zen 3, 1 thread, NHWC [8, 64, 64, 320] f32,
// samples of the stats pass in one profile each: 158-190 here against
// 231-288; with a residual 226-242 against 384-437). Past the end of a line
// v and shift both load as zeros, so d is 0 there. Compiled per storage
// type T of x, the residual and the sum when they share one (else DTypes
// read at run time), whole vectors apart from each line's tail.
template <class T>
static void column_stats_by_lines(const GroupNormLines& args, const float* shift, double* sums, float* scratch, T t) {
  const GroupNormLines a = args;  // a local copy: a store through sum may alias the arguments
  float* p1 = scratch;
  float* p2 = scratch + a.len;
  for (std::int64_t i = 0; i < 2 * a.len; ++i) scratch[i] = 0.0f;
  for (std::int64_t l0 = 0; l0 < a.lines; l0 += kFlush) {
    const std::int64_t l1 = a.lines - l0 > kFlush ? l0 + kFlush : a.lines;
    for (std::int64_t l = l0; l < l1; ++l) {
      std::int64_t i = 0;
      for (; i + 8 <= a.len; i += 8) {
        const __m256 d = _mm256_sub_ps(stats8(a, l, i, 8, t), _mm256_loadu_ps(shift + i));
        _mm256_storeu_ps(p1 + i, _mm256_add_ps(_mm256_loadu_ps(p1 + i), d));
        _mm256_storeu_ps(p2 + i, _mm256_fmadd_ps(d, d, _mm256_loadu_ps(p2 + i)));
      }
      if (i < a.len) {
        const std::int64_t n = a.len - i;
        const __m256 d = _mm256_sub_ps(stats8(a, l, i, n, t), load8_n(shift + i, DType::f32, n));
        store8_n(p1 + i, DType::f32, _mm256_add_ps(load8_n(p1 + i, DType::f32, n), d), n);
        store8_n(p2 + i, DType::f32, _mm256_fmadd_ps(d, d, load8_n(p2 + i, DType::f32, n)), n);
      }
    }
    flush(p1, sums, a.len);
    flush(p2, sums + a.len, a.len);
  }
}

// Lines a block of column_blocks: their columns stay in L1 across its passes.
static constexpr std::int64_t kLines = 16;

// Per-channel sums over lines in cache, 32 channels at a time: over a
// block of kLines lines the 32 columns' partial sums and squares stay in
// registers (their shifts too), then move into f64; each partial sees its
// lines in order. Against column_stats_by_lines' load, add and store of a
// partial per vector and sum (5 cycles a vector here): AMD EPYC Zen 3, 1
// thread, NHWC [1, 64, 64, 320], the whole op's samples in one profile each
// (400 calls): f32 1536-1955 -> 963-1043, bf16 1397-1524 -> 761-796.
template <class T>
static void column_blocks(const GroupNormLines& args, const float* shift, double* sums, T t) {
  const GroupNormLines a = args;  // a local copy: a store through sum may alias the arguments
  constexpr int kVectors = 4;
  for (std::int64_t l0 = 0; l0 < a.lines; l0 += kLines) {
    const std::int64_t l1 = a.lines - l0 > kLines ? l0 + kLines : a.lines;
    for (std::int64_t i0 = 0; i0 < a.len; i0 += 8 * kVectors) {
      __m256 sh[kVectors], p1[kVectors], p2[kVectors];
      for (int v = 0; v < kVectors; ++v) {
        const std::int64_t n = std::clamp<std::int64_t>(a.len - i0 - 8 * v, 0, 8);
        sh[v] = load8_n(shift + i0 + 8 * v, DType::f32, n);
        p1[v] = p2[v] = _mm256_setzero_ps();
      }
      if (a.len - i0 >= 8 * kVectors) {
        for (std::int64_t l = l0; l < l1; ++l)
          for (int v = 0; v < kVectors; ++v) {
            const __m256 d = _mm256_sub_ps(stats8(a, l, i0 + 8 * v, 8, t), sh[v]);
            p1[v] = _mm256_add_ps(p1[v], d);
            p2[v] = _mm256_fmadd_ps(d, d, p2[v]);
          }
      } else {
        for (std::int64_t l = l0; l < l1; ++l)
          for (int v = 0; v < kVectors && i0 + 8 * v < a.len; ++v) {
            const std::int64_t n = std::min<std::int64_t>(8, a.len - i0 - 8 * v);
            const __m256 d = _mm256_sub_ps(stats8(a, l, i0 + 8 * v, n, t), sh[v]);
            p1[v] = _mm256_add_ps(p1[v], d);
            p2[v] = _mm256_fmadd_ps(d, d, p2[v]);
          }
      }
      for (int v = 0; v < kVectors && i0 + 8 * v < a.len; ++v) {
        const std::int64_t i = i0 + 8 * v, n = std::min<std::int64_t>(8, a.len - i);
        add_f64_n(p1[v], sums + i, n);
        add_f64_n(p2[v], sums + a.len + i, n);
      }
    }
  }
}

// Lines from memory in order, lines in cache by blocks of columns.
template <class T>
static void column_stats(const GroupNormLines& a, const float* shift, double* sums, float* scratch, T t) {
  if (a.from_memory) column_stats_by_lines(a, shift, sums, scratch, t);
  else column_blocks(a, shift, sums, t);
}

void group_norm_column_stats(const GroupNormLines& a, const float* shift, double* sums, float* scratch) {
  const DType t = a.x.dtype;
  const auto same = [&](const GroupNormOperand& o) { return !o.data || o.dtype == t; };
  if (same(a.residual) && same(a.sum))
    dispatch_float(t, [&](auto ct) { column_stats(a, shift, sums, scratch, ct); });
  else
    column_stats(a, shift, sums, scratch, t);
}

// Compiled per storage type T (of every x-shaped operand, else DTypes read
// at run time) and for SiLU or not, the arguments in locals; 16 elements a
// step, so that two SiLUs' chains overlap, and y streamed past the L3. With
// one storage type the 16 go in load16_unordered's order (bf16: no
// shuffles; the per-channel coefficients permuted to it once per call):
// AMD EPYC Zen 3, bench membound --size large, medians of 5 alternating
// runs, time against the in-order widening and narrowing at 1 / 2 threads:
// group_norm_nhwc bf16 0.51 / 0.67, with a residual and SiLU 0.68 / 0.76
// (f32, whose instructions barely changed, 0.65-0.82: this machine drifts).
template <bool kSilu, class T>
static void apply_lines(const GroupNormLines& args, const GroupNormCoefs& coefs, T t) {
  const GroupNormLines a = args;  // a local copy: a store through y may alias the arguments
  const GroupNormCoefs c = coefs;
  const GroupNormOperand in = a.sum.data ? a.sum : a.x;
  const bool add_residual = a.residual.data && !a.sum.data, mul = a.mul.data != nullptr, stream = c.stream_y;
  const auto finish = [&](__m256 r) __attribute__((always_inline)) {
    if constexpr (kSilu) r = silu8<out_type<T>()>(r);
    return r;
  };
  const auto y8 = [&](std::int64_t l, std::int64_t i, std::int64_t n) __attribute__((always_inline)) {
    __m256 v = load8_n(at(in, l, i, t), type_of(in, t), n);
    if (add_residual) v = _mm256_add_ps(v, load8_n(at(a.residual, l, i, t), type_of(a.residual, t), n));
    __m256 r = finish(_mm256_fmadd_ps(_mm256_sub_ps(v, coef8(c.mean, c.stride, i, n)), coef8(c.scale, c.stride, i, n),
                                      coef8(c.bias, c.stride, i, n)));
    if (mul) r = _mm256_mul_ps(r, load8_n(at(a.mul, l, i, t), type_of(a.mul, t), n));
    return r;
  };
  const std::int64_t whole = std::is_same_v<T, DType> ? 0 : a.len / 16 * 16;
  const float* mean = c.mean;
  const float* scale = c.scale;
  const float* bias = c.bias;
  if (out_type<T>() == DType::bf16 && c.stride && whole) {
    auto* ordered = static_cast<float*>(thread_scratch(ScratchSlot::a_panel, std::size_t(3 * whole) * sizeof(float)));
    for (std::int64_t i = 0; i < whole; i += 16) {
      to_bf16_order16(c.mean + i, ordered + i);
      to_bf16_order16(c.scale + i, ordered + whole + i);
      to_bf16_order16(c.bias + i, ordered + 2 * whole + i);
    }
    mean = ordered, scale = ordered + whole, bias = ordered + 2 * whole;
  }
  // Elements [i, i + 16) of line l in load16_unordered's order.
  const auto y16 = [&](std::int64_t l, std::int64_t i) __attribute__((always_inline)) {
    Pair v = load16_unordered(at(in, l, i, t), t);
    if (add_residual) {
      const Pair r = load16_unordered(at(a.residual, l, i, t), t);
      v = {_mm256_add_ps(v.lo, r.lo), _mm256_add_ps(v.hi, r.hi)};
    }
    const auto coef = [&](const float* p, int h) { return coef8(p, c.stride, i + 8 * h, 8); };
    Pair r{finish(_mm256_fmadd_ps(_mm256_sub_ps(v.lo, coef(mean, 0)), coef(scale, 0), coef(bias, 0))),
           finish(_mm256_fmadd_ps(_mm256_sub_ps(v.hi, coef(mean, 1)), coef(scale, 1), coef(bias, 1)))};
    if (mul) {
      const Pair m = load16_unordered(at(a.mul, l, i, t), t);
      r = {_mm256_mul_ps(r.lo, m.lo), _mm256_mul_ps(r.hi, m.hi)};
    }
    return r;
  };
  for (std::int64_t l = 0; l < a.lines; ++l) {
    std::int64_t i = 0;
    for (; i < whole; i += 16) put16_unordered(at(a.y, l, i, t), t, y16(l, i), stream);
    for (; i + 16 <= a.len; i += 16) {
      const __m256 lo = y8(l, i, 8), hi = y8(l, i + 8, 8);
      put8_n(at(a.y, l, i, t), type_of(a.y, t), lo, 8, stream);
      put8_n(at(a.y, l, i + 8, t), type_of(a.y, t), hi, 8, stream);
    }
    for (; i < a.len; i += 8) put8_n(at(a.y, l, i, t), type_of(a.y, t), y8(l, i, a.len - i), a.len - i, stream);
  }
  if (stream) _mm_sfence();
}

void group_norm_apply(const GroupNormLines& a, const GroupNormCoefs& c) {
  const DType t = a.y.dtype;
  const auto same = [&](const GroupNormOperand& o) { return !o.data || o.dtype == t; };
  dispatch_bool(c.silu, [&](auto silu) {
    if (same(a.x) && same(a.residual) && same(a.sum) && same(a.mul))
      dispatch_float(t, [&](auto ct) { apply_lines<silu()>(a, c, ct); });
    else
      apply_lines<silu()>(a, c, t);
  });
}

}  // namespace tessera::kernels::avx2
