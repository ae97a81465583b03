#include <cmath>
#include <limits>

#include "core/element.hpp"
#include "kernels/reduce.hpp"
#include "kernels/x86/avx2/math.hpp"
#include "kernels/x86/avx2/vec.hpp"

namespace tessera::kernels::avx2 {

// The AVX-512 rows and columns, 8 lanes wide, with min, products,
// log-sum-exp and the terms of L1 / L2 (which the AVX-512 rows leave here).

// max (min) that keeps a NaN from either side: max_ps alone returns its
// second operand when either is NaN, which keeps acc's NaN but would drop v's.
template <bool Max>
static inline __m256 extreme_keep_nan(__m256 acc, __m256 v) {
  return _mm256_blendv_ps(Max ? _mm256_max_ps(v, acc) : _mm256_min_ps(v, acc), v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

// A sum's term of each lane (ReduceTerm).
template <ReduceTerm Term>
__attribute__((always_inline)) static inline __m256 term8(__m256 v) {
  if constexpr (Term == ReduceTerm::abs) return abs8(v);
  else if constexpr (Term == ReduceTerm::square) return _mm256_mul_ps(v, v);
  else return v;
}

// f(term) with term a std::integral_constant<ReduceTerm, ...>.
template <class F>
static inline void dispatch_term(ReduceTerm t, F&& f) {
  switch (t) {
    case ReduceTerm::abs: return f(std::integral_constant<ReduceTerm, ReduceTerm::abs>());
    case ReduceTerm::square: return f(std::integral_constant<ReduceTerm, ReduceTerm::square>());
    default: return f(std::integral_constant<ReduceTerm, ReduceTerm::value>());
  }
}

// The sum of a row's terms in f64, as the AVX-512 row: vectors add up in f32 over
// blocks of 256 columns (32 terms per lane) and each block's sums move to
// f64 once; bf16 in load16_unordered's order, which a sum does not need. The
// storage type is a compile-time constant: switched per vector, with the
// conversion to f64 per vector, the row ran at half of triad past the L3
// (bf16 [5120, 4096], AMD EPYC Zen 3).
template <ReduceTerm Term, class T>
static double row_sum(const char* x, T t, std::int64_t len) {
  const std::int64_t xs = bytes_of(t);
  __m256d s0 = _mm256_setzero_pd(), s1 = s0;
  for (std::int64_t c = 0; c < len;) {
    __m256 p0 = _mm256_setzero_ps(), p1 = p0, p2 = p0, p3 = p0;  // four chains hide the adds' latency
    const std::int64_t end = len - c > 256 ? c + 256 : len;
    for (; c + 32 <= end; c += 32) {
      const Pair a = load16_unordered(x + c * xs, t), b = load16_unordered(x + (c + 16) * xs, t);
      p0 = _mm256_add_ps(p0, term8<Term>(a.lo)), p1 = _mm256_add_ps(p1, term8<Term>(a.hi));
      p2 = _mm256_add_ps(p2, term8<Term>(b.lo)), p3 = _mm256_add_ps(p3, term8<Term>(b.hi));
    }
    for (; c < end; c += 8) p0 = _mm256_add_ps(p0, term8<Term>(load8_n(x + c * xs, t, end - c)));  // zeros past the end
    add_f64(_mm256_add_ps(_mm256_add_ps(p0, p1), _mm256_add_ps(p2, p3)), s0, s1);
  }
  return hsum_pd(_mm256_add_pd(s0, s1));
}

// The row's largest (Max) or smallest value, NaN if it holds one.
template <bool Max, class T>
static float row_extreme(const char* x, T t, std::int64_t len) {
  const std::int64_t xs = bytes_of(t);
  const __m256 start = _mm256_set1_ps(Max ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity());
  __m256 m0 = start, m1 = start;
  std::int64_t c = 0;
  for (; c + 16 <= len; c += 16) {
    const Pair v = load16_unordered(x + c * xs, t);
    m0 = extreme_keep_nan<Max>(m0, v.lo);
    m1 = extreme_keep_nan<Max>(m1, v.hi);
  }
  for (; c < len; c += 8) {
    const std::int64_t n = len - c;
    const __m256 v = load8_n(x + c * xs, t, n);
    m0 = extreme_keep_nan<Max>(m0, n >= 8 ? v : _mm256_blendv_ps(start, v, lanes_below(n)));
  }
  const __m256 v = extreme_keep_nan<Max>(m0, m1);
  if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) return std::numeric_limits<float>::quiet_NaN();
  return Max ? hmax(v) : -hmax(_mm256_xor_ps(v, _mm256_set1_ps(-0.0f)));
}

// v's 8 lanes multiplied into f64 products (lo: lanes 0-3, hi: 4-7): f32
// factors near its extremes overflow f32 within two, f64 only past eight.
static inline void mul_f64(__m256 v, __m256d& lo, __m256d& hi) {
  lo = _mm256_mul_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
  hi = _mm256_mul_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

template <class T>
static double row_prod(const char* x, T t, std::int64_t len) {
  const std::int64_t xs = bytes_of(t);
  __m256d p0 = _mm256_set1_pd(1.0), p1 = p0, p2 = p0, p3 = p0;
  std::int64_t c = 0;
  for (; c + 16 <= len; c += 16) {
    const Pair v = load16_unordered(x + c * xs, t);  // a product takes its factors in any order
    mul_f64(v.lo, p0, p1);
    mul_f64(v.hi, p2, p3);
  }
  for (; c < len; c += 8) {
    const std::int64_t n = len - c;
    const __m256 v = load8_n(x + c * xs, t, n);
    mul_f64(n >= 8 ? v : _mm256_blendv_ps(_mm256_set1_ps(1.0f), v, lanes_below(n)), p0, p1);
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_mul_pd(_mm256_mul_pd(p0, p1), _mm256_mul_pd(p2, p3)));
  return lanes[0] * lanes[1] * lanes[2] * lanes[3];
}

// Log-sum-exp per lane, a block of n vectors at a time: the block's largest
// element first, so that the running max m moves once a block and each
// element costs one exp(v - m) and an add. (An online update per element,
// exp(-|v - m|) with compares and blends to rescale the sum, ran at 3.9
// GB/s against a sum's 14: [8192, 4096] f32 rows, one thread, AMD EPYC Zen
// 3.) s sums in f64 (lo: lanes 0-3, hi: 4-7), each block's terms in f32
// first. A NaN makes m NaN for good (max_ps returns its second operand,
// m, when either is NaN; the compare adds v's); an infinite m stands for
// itself at the end, its s unused (exp(inf - inf) is NaN): 0 replaces it
// in the exps.
// load(i) gives vector i of the block: read twice (the max, then the
// exps), from L1 the second time, rather than kept in registers the
// polynomial needs.
template <class Load>
__attribute__((always_inline)) static inline void lse_block(Load&& load, int n, __m256& m, __m256d& s_lo, __m256d& s_hi) {
  __m256 top = m;
  for (int i = 0; i < n; ++i) {
    const __m256 v = load(i);
    top = _mm256_or_ps(_mm256_max_ps(v, top), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  const __m256 base = _mm256_and_ps(top, _mm256_cmp_ps(abs8(top), _mm256_set1_ps(std::numeric_limits<float>::infinity()), _CMP_LT_OQ));
  // v - base <= 0 and m - base <= 0 where base is the finite top; elsewhere
  // the lane's s is unused, or its elements are all -inf.
  __m256 sum0 = _mm256_setzero_ps(), sum1 = sum0;  // two chains hide the adds' latency
  for (int i = 0; i < n; ++i) {
    const __m256 e = exp8<ExpArg::nonpositive, ExpTiny::normal>(_mm256_sub_ps(load(i), base));
    i % 2 ? sum1 = _mm256_add_ps(sum1, e) : sum0 = _mm256_add_ps(sum0, e);
  }
  const __m256 sum = _mm256_add_ps(sum0, sum1), rescale = exp8<ExpArg::nonpositive, ExpTiny::normal>(_mm256_sub_ps(m, base));
  s_lo = _mm256_fmadd_pd(s_lo, _mm256_cvtps_pd(_mm256_castps256_ps128(rescale)), _mm256_cvtps_pd(_mm256_castps256_ps128(sum)));
  s_hi = _mm256_fmadd_pd(s_hi, _mm256_cvtps_pd(_mm256_extractf128_ps(rescale, 1)), _mm256_cvtps_pd(_mm256_extractf128_ps(sum, 1)));
  m = top;
}

// m + log(s) of lanes (m_i, s_i) merged: NaN if any m is, an infinite max
// itself, else M + log(sum of s_i exp(m_i - M)) (lanes of -inf add 0).
static float merge_lse(const float* m, const double* s, int lanes) {
  float top = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < lanes; ++i) {
    if (std::isnan(m[i])) return m[i];
    top = std::max(top, m[i]);
  }
  if (std::isinf(top)) return top;
  double sum = 0.0;
  for (int i = 0; i < lanes; ++i) sum += s[i] * std::exp(double(m[i]) - double(top));
  return float(double(top) + std::log(sum));
}

template <class T>
static float row_log_sum_exp(const char* x, T t, std::int64_t len) {
  constexpr int kBlock = 8;  // vectors
  const std::int64_t xs = bytes_of(t);
  const __m256 none = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 m = none;
  __m256d s_lo = _mm256_setzero_pd(), s_hi = s_lo;
  std::int64_t c = 0;
  for (; c + 8 * kBlock <= len; c += 8 * kBlock) lse_block([&](int i) { return load8(x + (c + 8 * i) * xs, t); }, kBlock, m, s_lo, s_hi);
  if (c < len)  // the tail: -inf past the end
    lse_block(
        [&](int i) {
          const std::int64_t at = c + 8 * i, left = len - at;
          const __m256 v = load8_n(x + at * xs, t, left);
          return left >= 8 ? v : _mm256_blendv_ps(none, v, lanes_below(left));
        },
        int((len - c + 7) / 8), m, s_lo, s_hi);
  alignas(32) float ms[8];
  alignas(32) double ss[8];
  _mm256_store_ps(ms, m);
  _mm256_store_pd(ss, s_lo), _mm256_store_pd(ss + 4, s_hi);
  return merge_lse(ms, ss, 8);
}

void reduce_rows(const ReduceArgs& a) {
  const std::int64_t xs = bytes_of(a.x_dtype), ys = bytes_of(a.y_dtype);
  const double scale = a.kind == ReduceKind::mean ? 1.0 / double(a.length) : 1.0;
  dispatch_float(a.x_dtype, [&](auto t) {
    for (std::int64_t j = 0; j < a.n; ++j) {
      const char* x = static_cast<const char*>(a.x) + j * a.x_stride * xs;
      float v = 0.0f;
      switch (a.kind) {
        case ReduceKind::max: v = row_extreme<true>(x, t, a.length); break;
        case ReduceKind::min: v = row_extreme<false>(x, t, a.length); break;
        case ReduceKind::prod: v = float(row_prod(x, t, a.length)); break;
        case ReduceKind::log_sum_exp: v = row_log_sum_exp(x, t, a.length); break;
        default:
          dispatch_term(a.term, [&](auto term) { v = float(finish_sum(a.finish, row_sum<term.value>(x, t, a.length) * scale)); });
          break;
      }
      store8_n(static_cast<char*>(a.y) + j * a.y_stride * ys, a.y_dtype, _mm256_set1_ps(v), 1);
    }
  });
}

// argmax / argmin of rows: the extreme by row_extreme, then the first index
// holding it (or the first NaN), a second pass over a row still in cache.
template <bool Max, class T>
static std::int64_t row_arg(const char* x, T t, std::int64_t len) {
  const std::int64_t xs = bytes_of(t);
  const float best = row_extreme<Max>(x, t, len);
  const __m256 target = _mm256_set1_ps(best);
  const bool nan = std::isnan(best);
  for (std::int64_t c = 0; c < len; c += 8) {
    const std::int64_t n = len - c;
    const __m256 v = load8_n(x + c * xs, t, n);
    int hits = _mm256_movemask_ps(nan ? _mm256_cmp_ps(v, v, _CMP_UNORD_Q) : _mm256_cmp_ps(v, target, _CMP_EQ_OQ));
    if (n < 8) hits &= (1 << n) - 1;
    if (hits) return c + __builtin_ctz(unsigned(hits));
  }
  return 0;  // not reached: the extreme is in the row
}

void reduce_arg_rows(const ReduceArgs& a) {
  const std::int64_t xs = bytes_of(a.x_dtype);
  dispatch_float(a.x_dtype, [&](auto t) {
    for (std::int64_t j = 0; j < a.n; ++j) {
      const char* x = static_cast<const char*>(a.x) + j * a.x_stride * xs;
      const std::int64_t i = a.kind == ReduceKind::argmax ? row_arg<true>(x, t, a.length) : row_arg<false>(x, t, a.length);
      tessera::detail::store_int(a.y, a.y_dtype, j * a.y_stride, i);
    }
  });
}

// Columns: the partial results of up to kChunk outputs stay in L1 / L2
// while the rows of x stream past them, kRowGroup rows at a time, so that
// each partial result is loaded and stored once per group. Chunks of 512
// (4 KiB of f64 sums) read a row in 2 KiB pieces 16 KiB apart, which the
// prefetcher followed poorly, and stored the sums after every row: AMD EPYC
// Zen 3, [5120, 4096] f32 over axis 0, 1 thread, medians of 9 in two
// rounds, ms: sum 12.5-13.7 -> 4.2-6.3, max 9.9-10.1 -> 4.2-5.0 (chunks of
// 4096 alone 8.1-10.5 and 7.5-8.2; groups of 4 rows alone 6.4-7.6 and
// 7.5-8.1); rows over axis 1 take 3.7-4.8.
static constexpr std::int64_t kChunk = 4096;  // 32 KiB of f64 sums

// f(x, rows) for the rows of x from column j0 in groups of Group (and the
// last, fewer): x their starts, rows a std::integral_constant.
static constexpr int kRowGroup = 4;
template <int Group = kRowGroup, class F>
static void for_row_groups(const ReduceArgs& a, std::int64_t j0, std::int64_t xs, F&& f) {
  const char* x[Group];
  std::int64_t r = 0;
  const auto start = [&](std::int64_t rr) { return static_cast<const char*>(a.x) + (rr * a.x_step + j0) * xs; };
  for (; r + Group <= a.length; r += Group) {
    for (int i = 0; i < Group; ++i) x[i] = start(r + i);
    f(x, std::integral_constant<int, Group>());
  }
  for (; r < a.length; ++r) {
    x[0] = start(r);
    f(x, std::integral_constant<int, 1>());
  }
}

// Sums (Prod: products) of the columns' terms in f64.
template <ReduceTerm Term, bool Prod, class T>
static void columns_sum(const ReduceArgs& a, T t, std::int64_t j0, std::int64_t w, double scale) {
  const std::int64_t xs = bytes_of(t), ys = bytes_of(a.y_dtype);
  alignas(32) double acc[kChunk];
  const __m256d start = _mm256_set1_pd(Prod ? 1.0 : 0.0);
  for (std::int64_t c = 0; c < w; c += 8) {  // whole vectors of 8, as the loop below reads them
    _mm256_store_pd(acc + c, start);
    _mm256_store_pd(acc + c + 4, start);
  }
  for_row_groups(a, j0, xs, [&](const char* const* x, auto rows) {
    for (std::int64_t c = 0; c < w; c += 8) {  // a tail's lanes past w take zeros (never stored)
      __m256d lo = _mm256_load_pd(acc + c), hi = _mm256_load_pd(acc + c + 4);
      if constexpr (Prod) {
        for (int i = 0; i < rows; ++i) mul_f64(load8_n(x[i] + c * xs, t, w - c), lo, hi);
      } else {
        __m256 v = term8<Term>(load8_n(x[0] + c * xs, t, w - c));
        for (int i = 1; i < rows; ++i) v = _mm256_add_ps(v, term8<Term>(load8_n(x[i] + c * xs, t, w - c)));
        add_f64(v, lo, hi);
      }
      _mm256_store_pd(acc + c, lo);
      _mm256_store_pd(acc + c + 4, hi);
    }
  });
  if (a.finish != ReduceFinish::none) {
    for (std::int64_t c = 0; c < w; ++c) acc[c] = finish_sum(a.finish, acc[c] * scale);
    scale = 1.0;
  }
  const __m256d vs = _mm256_set1_pd(scale);
  for (std::int64_t c = 0; c < w; c += 8) {
    const __m128 lo = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_load_pd(acc + c), vs));
    const __m128 hi = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_load_pd(acc + c + 4), vs));
    store8_n(static_cast<char*>(a.y) + (j0 + c) * ys, a.y_dtype, _mm256_set_m128(hi, lo), w - c);
  }
}

template <bool Max, class T>
static void columns_extreme(const ReduceArgs& a, T t, std::int64_t j0, std::int64_t w) {
  const std::int64_t xs = bytes_of(t), ys = bytes_of(a.y_dtype);
  alignas(32) float acc[kChunk];
  const float start = Max ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  for (std::int64_t c = 0; c < w; c += 8) _mm256_store_ps(acc + c, _mm256_set1_ps(start));
  for_row_groups(a, j0, xs, [&](const char* const* x, auto rows) {
    for (std::int64_t c = 0; c < w; c += 8) {  // a tail's lanes past w take zeros and are never stored
      __m256 v = _mm256_load_ps(acc + c);
      for (int i = 0; i < rows; ++i) v = extreme_keep_nan<Max>(v, load8_n(x[i] + c * xs, t, w - c));
      _mm256_store_ps(acc + c, v);
    }
  });
  for (std::int64_t c = 0; c < w; c += 8)
    store8_n(static_cast<char*>(a.y) + (j0 + c) * ys, a.y_dtype, _mm256_load_ps(acc + c), w - c);
}

// Each column's log-sum-exp (lse_block over each group of rows): maxima
// in f32, sums in f64.
static constexpr int kLseRowGroup = 8;
template <class T>
static void columns_log_sum_exp(const ReduceArgs& a, T t, std::int64_t j0, std::int64_t w) {
  const std::int64_t xs = bytes_of(t), ys = bytes_of(a.y_dtype);
  alignas(32) float m[kChunk];
  alignas(32) double s[kChunk];
  for (std::int64_t c = 0; c < w; c += 8) {
    _mm256_store_ps(m + c, _mm256_set1_ps(-std::numeric_limits<float>::infinity()));
    _mm256_store_pd(s + c, _mm256_setzero_pd());
    _mm256_store_pd(s + c + 4, _mm256_setzero_pd());
  }
  for_row_groups<kLseRowGroup>(a, j0, xs, [&](const char* const* x, auto rows) {
    for (std::int64_t c = 0; c < w; c += 8) {  // a tail's lanes past w take zeros (never stored)
      __m256 mv = _mm256_load_ps(m + c);
      __m256d lo = _mm256_load_pd(s + c), hi = _mm256_load_pd(s + c + 4);
      lse_block([&](int i) { return load8_n(x[i] + c * xs, t, w - c); }, rows, mv, lo, hi);
      _mm256_store_ps(m + c, mv);
      _mm256_store_pd(s + c, lo);
      _mm256_store_pd(s + c + 4, hi);
    }
  });
  for (std::int64_t c = 0; c < w; c += 8) {
    alignas(32) float out[8];
    for (int i = 0; i < 8; ++i) out[i] = merge_lse(m + c + i, s + c + i, 1);
    store8_n(static_cast<char*>(a.y) + (j0 + c) * ys, a.y_dtype, _mm256_load_ps(out), w - c);
  }
}

void reduce_columns(const ReduceArgs& a) {
  const double scale = a.kind == ReduceKind::mean ? 1.0 / double(a.length) : 1.0;
  dispatch_float(a.x_dtype, [&](auto t) {  // the type fixed for the loops, as in the rows
    for (std::int64_t j0 = 0; j0 < a.n; j0 += kChunk) {
      const std::int64_t w = a.n - j0 < kChunk ? a.n - j0 : kChunk;
      switch (a.kind) {
        case ReduceKind::max: columns_extreme<true>(a, t, j0, w); break;
        case ReduceKind::min: columns_extreme<false>(a, t, j0, w); break;
        case ReduceKind::prod: columns_sum<ReduceTerm::value, true>(a, t, j0, w, scale); break;
        case ReduceKind::log_sum_exp: columns_log_sum_exp(a, t, j0, w); break;
        default: dispatch_term(a.term, [&](auto term) { columns_sum<term.value, false>(a, t, j0, w, scale); }); break;
      }
    }
  });
}

}  // namespace tessera::kernels::avx2
