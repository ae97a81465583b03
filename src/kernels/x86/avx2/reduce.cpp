#include <cmath>
#include <limits>

#include "core/element.hpp"
#include "kernels/reduce.hpp"
#include "kernels/x86/avx2/vec.hpp"

namespace tessera::kernels::avx2 {

// The AVX-512 rows and columns, 8 lanes wide.

// max (min) that keeps a NaN from either side: max_ps alone returns its
// second operand when either is NaN, which keeps acc's NaN but would drop v's.
template <bool Max>
static inline __m256 extreme_keep_nan(__m256 acc, __m256 v) {
  return _mm256_blendv_ps(Max ? _mm256_max_ps(v, acc) : _mm256_min_ps(v, acc), v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

// The sum of a row in f64, as the AVX-512 row: vectors add up in f32 over
// blocks of 256 columns (32 terms per lane) and each block's sums move to
// f64 once; bf16 in load16_unordered's order, which a sum does not need. The
// storage type is a compile-time constant: switched per vector, with the
// conversion to f64 per vector, the row ran at half of triad past the L3
// (bf16 [5120, 4096], AMD EPYC Zen 3).
template <class T>
static double row_sum(const char* x, T t, std::int64_t len) {
  const std::int64_t xs = bytes_of(t);
  __m256d s0 = _mm256_setzero_pd(), s1 = s0;
  for (std::int64_t c = 0; c < len;) {
    __m256 p0 = _mm256_setzero_ps(), p1 = p0, p2 = p0, p3 = p0;  // four chains hide the adds' latency
    const std::int64_t end = len - c > 256 ? c + 256 : len;
    for (; c + 32 <= end; c += 32) {
      const Pair a = load16_unordered(x + c * xs, t), b = load16_unordered(x + (c + 16) * xs, t);
      p0 = _mm256_add_ps(p0, a.lo), p1 = _mm256_add_ps(p1, a.hi);
      p2 = _mm256_add_ps(p2, b.lo), p3 = _mm256_add_ps(p3, b.hi);
    }
    for (; c < end; c += 8) p0 = _mm256_add_ps(p0, load8_n(x + c * xs, t, end - c));  // zeros past the end
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

void reduce_rows(const ReduceArgs& a) {
  const std::int64_t xs = bytes_of(a.x_dtype), ys = bytes_of(a.y_dtype);
  const double scale = a.kind == ReduceKind::mean ? 1.0 / double(a.length) : 1.0;
  dispatch_float(a.x_dtype, [&](auto t) {
    for (std::int64_t j = 0; j < a.n; ++j) {
      const char* x = static_cast<const char*>(a.x) + j * a.x_stride * xs;
      const float v = a.kind == ReduceKind::max   ? row_extreme<true>(x, t, a.length)
                      : a.kind == ReduceKind::min ? row_extreme<false>(x, t, a.length)
                                                  : float(row_sum(x, t, a.length) * scale);
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

// f(x, rows) for the rows of x from column j0 in groups of kRowGroup (and
// the last, fewer): x their starts, rows a std::integral_constant.
static constexpr int kRowGroup = 4;
template <class F>
static void for_row_groups(const ReduceArgs& a, std::int64_t j0, std::int64_t xs, F&& f) {
  const char* x[kRowGroup];
  std::int64_t r = 0;
  const auto start = [&](std::int64_t rr) { return static_cast<const char*>(a.x) + (rr * a.x_step + j0) * xs; };
  for (; r + kRowGroup <= a.length; r += kRowGroup) {
    for (int i = 0; i < kRowGroup; ++i) x[i] = start(r + i);
    f(x, std::integral_constant<int, kRowGroup>());
  }
  for (; r < a.length; ++r) {
    x[0] = start(r);
    f(x, std::integral_constant<int, 1>());
  }
}

template <class T>
static void columns_sum(const ReduceArgs& a, T t, std::int64_t j0, std::int64_t w, double scale) {
  const std::int64_t xs = bytes_of(t), ys = bytes_of(a.y_dtype);
  alignas(32) double acc[kChunk];
  for (std::int64_t c = 0; c < w; c += 8) {  // whole vectors of 8, as the loop below reads them
    _mm256_store_pd(acc + c, _mm256_setzero_pd());
    _mm256_store_pd(acc + c + 4, _mm256_setzero_pd());
  }
  for_row_groups(a, j0, xs, [&](const char* const* x, auto rows) {
    for (std::int64_t c = 0; c < w; c += 8) {  // a tail's lanes past w add zeros (never stored)
      __m256 v = load8_n(x[0] + c * xs, t, w - c);
      for (int i = 1; i < rows; ++i) v = _mm256_add_ps(v, load8_n(x[i] + c * xs, t, w - c));
      __m256d lo = _mm256_load_pd(acc + c), hi = _mm256_load_pd(acc + c + 4);
      add_f64(v, lo, hi);
      _mm256_store_pd(acc + c, lo);
      _mm256_store_pd(acc + c + 4, hi);
    }
  });
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

void reduce_columns(const ReduceArgs& a) {
  const double scale = a.kind == ReduceKind::mean ? 1.0 / double(a.length) : 1.0;
  dispatch_float(a.x_dtype, [&](auto t) {  // the type fixed for the loops, as in the rows
    for (std::int64_t j0 = 0; j0 < a.n; j0 += kChunk) {
      const std::int64_t w = a.n - j0 < kChunk ? a.n - j0 : kChunk;
      if (a.kind == ReduceKind::max)
        columns_extreme<true>(a, t, j0, w);
      else if (a.kind == ReduceKind::min)
        columns_extreme<false>(a, t, j0, w);
      else
        columns_sum(a, t, j0, w, scale);
    }
  });
}

}  // namespace tessera::kernels::avx2
