#include <limits>

#include "kernels/reduce.hpp"
#include "kernels/x86/avx512/vec.hpp"

namespace tessera::kernels::avx512 {

// max that keeps a NaN from either side: max_ps alone returns its second
// operand when either is NaN, which keeps acc's NaN but would drop v's.
static inline __m512 max_keep_nan(__m512 acc, __m512 v) {
  return _mm512_mask_mov_ps(_mm512_max_ps(v, acc), _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v);
}

// The sum of a row in f64: vectors add up in f32 over blocks of 512 columns
// (32 terms per lane, which f32 holds with room to spare) and each block's
// sums move to f64 once, since the conversions cost more than the adds.
// Rows stream in order with no software prefetch: asking for the next row
// into L2 while summing this one paid on 4 KiB pages, where the hardware
// prefetcher restarted at each; on the huge pages large tensors now get
// (aligned.cpp) it cost a third (AMD EPYC, Zen 4, bench membound
// reduce_sum_last large f32, 1 thread, alternating: 17-19.5 GB/s with it,
// 25-28.5 without, 0.66-0.75x -> 1.00-1.02x oneDNN).
template <class T>
static double row_sum(const char* x, T t, std::int64_t len) {
  const std::int64_t xs = bytes_of(t);
  __m512d s0 = _mm512_setzero_pd(), s1 = s0;
  for (std::int64_t c = 0; c < len;) {
    __m512 p0 = _mm512_setzero_ps(), p1 = p0, p2 = p0, p3 = p0;  // four chains hide the adds' latency
    const std::int64_t end = len - c > 512 ? c + 512 : len;
    for (; c + 64 <= end; c += 64) {
      p0 = _mm512_add_ps(p0, load16(x + c * xs, t, 0xffff));
      p1 = _mm512_add_ps(p1, load16(x + (c + 16) * xs, t, 0xffff));
      p2 = _mm512_add_ps(p2, load16(x + (c + 32) * xs, t, 0xffff));
      p3 = _mm512_add_ps(p3, load16(x + (c + 48) * xs, t, 0xffff));
    }
    for (; c < end; c += 16) p0 = _mm512_add_ps(p0, load16(x + c * xs, t, tail_mask(end - c)));
    add_f64(_mm512_add_ps(_mm512_add_ps(p0, p1), _mm512_add_ps(p2, p3)), s0, s1);
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
}

// The max of a row, NaN if any element is.
template <class T>
static float row_max(const char* x, T t, std::int64_t len) {
  const std::int64_t xs = bytes_of(t);
  __m512 m0 = _mm512_set1_ps(-std::numeric_limits<float>::infinity()), m1 = m0;
  std::int64_t c = 0;
  for (; c + 32 <= len; c += 32) {
    m0 = max_keep_nan(m0, load16(x + c * xs, t, 0xffff));
    m1 = max_keep_nan(m1, load16(x + (c + 16) * xs, t, 0xffff));
  }
  for (; c < len; c += 16) {
    const __mmask16 m = tail_mask(len - c);
    m0 = _mm512_mask_mov_ps(m0, m, max_keep_nan(m0, load16(x + c * xs, t, m)));
  }
  const __m512 v = max_keep_nan(m0, m1);
  return _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) ? std::numeric_limits<float>::quiet_NaN() : _mm512_reduce_max_ps(v);
}

// Plain sum, mean and max only: kernels/reduce.cpp gives the other reductions the AVX2 rows.
void reduce_rows(const ReduceArgs& a) {
  const std::int64_t xs = bytes_of(a.x_dtype), ys = bytes_of(a.y_dtype);
  const double scale = a.kind == ReduceKind::mean ? 1.0 / double(a.length) : 1.0;
  for (std::int64_t j = 0; j < a.n; ++j) {
    const char* x = static_cast<const char*>(a.x) + j * a.x_stride * xs;
    float v;
    dispatch_float(a.x_dtype, [&](auto t) {
      v = a.kind == ReduceKind::max ? row_max(x, t, a.length) : float(row_sum(x, t, a.length) * scale);
    });
    store16(static_cast<char*>(a.y) + j * a.y_stride * ys, a.y_dtype, _mm512_set1_ps(v), 1);
  }
}

// Columns: the partial results of up to kChunk outputs stay in an L1 buffer
// while the rows of x stream past them. Each row's piece is contiguous, so
// the prefetchers keep up, and no horizontal step is needed.
static constexpr std::int64_t kChunk = 512;  // 4 KiB of f64 sums

static void columns_sum(const ReduceArgs& a, std::int64_t j0, std::int64_t w, double scale) {
  const std::int64_t xs = bytes_of(a.x_dtype), ys = bytes_of(a.y_dtype);
  alignas(64) double acc[kChunk];
  for (std::int64_t c = 0; c < w; c += 16) {  // whole vectors of 16: the tail's lanes are summed (never stored) too
    _mm512_store_pd(acc + c, _mm512_setzero_pd());
    _mm512_store_pd(acc + c + 8, _mm512_setzero_pd());
  }
  for (std::int64_t r = 0; r < a.length; ++r) {
    const char* x = static_cast<const char*>(a.x) + (r * a.x_step + j0) * xs;
    for (std::int64_t c = 0; c < w; c += 16) {
      __m512d lo = _mm512_load_pd(acc + c), hi = _mm512_load_pd(acc + c + 8);
      add_f64(load16(x + c * xs, a.x_dtype, tail_mask(w - c)), lo, hi);
      _mm512_store_pd(acc + c, lo);
      _mm512_store_pd(acc + c + 8, hi);
    }
  }
  const __m512d vs = _mm512_set1_pd(scale);
  for (std::int64_t c = 0; c < w; c += 16) {
    const __m256 lo = _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_load_pd(acc + c), vs));
    const __m256 hi = _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_load_pd(acc + c + 8), vs));
    store16(static_cast<char*>(a.y) + (j0 + c) * ys, a.y_dtype, _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1),
            tail_mask(w - c));
  }
}

static void columns_max(const ReduceArgs& a, std::int64_t j0, std::int64_t w) {
  const std::int64_t xs = bytes_of(a.x_dtype), ys = bytes_of(a.y_dtype);
  alignas(64) float acc[kChunk];
  for (std::int64_t c = 0; c < w; c += 16) _mm512_store_ps(acc + c, _mm512_set1_ps(-std::numeric_limits<float>::infinity()));
  for (std::int64_t r = 0; r < a.length; ++r) {
    const char* x = static_cast<const char*>(a.x) + (r * a.x_step + j0) * xs;
    for (std::int64_t c = 0; c < w; c += 16)  // lanes past w take zeros and are never stored
      _mm512_store_ps(acc + c, max_keep_nan(_mm512_load_ps(acc + c), load16(x + c * xs, a.x_dtype, tail_mask(w - c))));
  }
  for (std::int64_t c = 0; c < w; c += 16)
    store16(static_cast<char*>(a.y) + (j0 + c) * ys, a.y_dtype, _mm512_load_ps(acc + c), tail_mask(w - c));
}

// sum, mean and max, as the rows.
void reduce_columns(const ReduceArgs& a) {
  const double scale = a.kind == ReduceKind::mean ? 1.0 / double(a.length) : 1.0;
  for (std::int64_t j0 = 0; j0 < a.n; j0 += kChunk) {
    const std::int64_t w = a.n - j0 < kChunk ? a.n - j0 : kChunk;
    if (a.kind == ReduceKind::max)
      columns_max(a, j0, w);
    else
      columns_sum(a, j0, w, scale);
  }
}

}  // namespace tessera::kernels::avx512
