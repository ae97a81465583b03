#include <limits>

#include "kernels/reduce.hpp"
#include "kernels/x86/avx2/vec.hpp"

namespace tessera::kernels::avx2 {

// The AVX-512 rows and columns, 8 lanes wide.

// max that keeps a NaN from either side: max_ps alone returns its second
// operand when either is NaN, which keeps acc's NaN but would drop v's.
static inline __m256 max_keep_nan(__m256 acc, __m256 v) {
  return _mm256_blendv_ps(_mm256_max_ps(v, acc), v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

static double row_sum(const char* x, DType t, std::int64_t len) {
  const std::int64_t xs = bytes_of(t);
  __m256d s0 = _mm256_setzero_pd(), s1 = s0, s2 = s0, s3 = s0;  // two vectors in flight hide the add latency
  std::int64_t c = 0;
  for (; c + 16 <= len; c += 16) {
    add_f64(load8(x + c * xs, t), s0, s1);
    add_f64(load8(x + (c + 8) * xs, t), s2, s3);
  }
  if (c < len) add_f64(load8_n(x + c * xs, t, len - c), s0, s1);
  if (c + 8 < len) add_f64(load8_tail(x + (c + 8) * xs, t, len - c - 8), s2, s3);
  return hsum_pd(_mm256_add_pd(_mm256_add_pd(s0, s1), _mm256_add_pd(s2, s3)));
}

static float row_max(const char* x, DType t, std::int64_t len) {
  const std::int64_t xs = bytes_of(t);
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 m0 = neg_inf, m1 = neg_inf;
  std::int64_t c = 0;
  for (; c + 16 <= len; c += 16) {
    m0 = max_keep_nan(m0, load8(x + c * xs, t));
    m1 = max_keep_nan(m1, load8(x + (c + 8) * xs, t));
  }
  for (; c < len; c += 8) {
    const std::int64_t n = len - c;
    const __m256 v = load8_n(x + c * xs, t, n);
    m0 = max_keep_nan(m0, n >= 8 ? v : _mm256_blendv_ps(neg_inf, v, lanes_below(n)));
  }
  const __m256 v = max_keep_nan(m0, m1);
  return _mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) ? std::numeric_limits<float>::quiet_NaN() : hmax(v);
}

void reduce_rows(const ReduceArgs& a) {
  const std::int64_t xs = bytes_of(a.x_dtype), ys = bytes_of(a.y_dtype);
  const double scale = a.kind == ReduceKind::mean ? 1.0 / double(a.length) : 1.0;
  for (std::int64_t j = 0; j < a.n; ++j) {
    const char* x = static_cast<const char*>(a.x) + j * a.x_stride * xs;
    const float v = a.kind == ReduceKind::max ? row_max(x, a.x_dtype, a.length) : float(row_sum(x, a.x_dtype, a.length) * scale);
    store8_n(static_cast<char*>(a.y) + j * a.y_stride * ys, a.y_dtype, _mm256_set1_ps(v), 1);
  }
}

// Columns: the partial results of up to kChunk outputs stay in an L1 buffer
// while the rows of x stream past them (see the AVX-512 kernel).
static constexpr std::int64_t kChunk = 512;  // 4 KiB of f64 sums

static void columns_sum(const ReduceArgs& a, std::int64_t j0, std::int64_t w, double scale) {
  const std::int64_t xs = bytes_of(a.x_dtype), ys = bytes_of(a.y_dtype);
  alignas(32) double acc[kChunk];
  for (std::int64_t c = 0; c < w; c += 8) {  // whole vectors of 8, as the loop below reads them
    _mm256_store_pd(acc + c, _mm256_setzero_pd());
    _mm256_store_pd(acc + c + 4, _mm256_setzero_pd());
  }
  for (std::int64_t r = 0; r < a.length; ++r) {
    const char* x = static_cast<const char*>(a.x) + (r * a.x_step + j0) * xs;
    for (std::int64_t c = 0; c < w; c += 8) {  // a tail's lanes past w add zeros (never stored)
      __m256d lo = _mm256_load_pd(acc + c), hi = _mm256_load_pd(acc + c + 4);
      add_f64(load8_n(x + c * xs, a.x_dtype, w - c), lo, hi);
      _mm256_store_pd(acc + c, lo);
      _mm256_store_pd(acc + c + 4, hi);
    }
  }
  const __m256d vs = _mm256_set1_pd(scale);
  for (std::int64_t c = 0; c < w; c += 8) {
    const __m128 lo = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_load_pd(acc + c), vs));
    const __m128 hi = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_load_pd(acc + c + 4), vs));
    store8_n(static_cast<char*>(a.y) + (j0 + c) * ys, a.y_dtype, _mm256_set_m128(hi, lo), w - c);
  }
}

static void columns_max(const ReduceArgs& a, std::int64_t j0, std::int64_t w) {
  const std::int64_t xs = bytes_of(a.x_dtype), ys = bytes_of(a.y_dtype);
  alignas(32) float acc[kChunk];
  for (std::int64_t c = 0; c < w; c += 8) _mm256_store_ps(acc + c, _mm256_set1_ps(-std::numeric_limits<float>::infinity()));
  for (std::int64_t r = 0; r < a.length; ++r) {
    const char* x = static_cast<const char*>(a.x) + (r * a.x_step + j0) * xs;
    for (std::int64_t c = 0; c < w; c += 8)  // a tail's lanes past w take zeros and are never stored
      _mm256_store_ps(acc + c, max_keep_nan(_mm256_load_ps(acc + c), load8_n(x + c * xs, a.x_dtype, w - c)));
  }
  for (std::int64_t c = 0; c < w; c += 8)
    store8_n(static_cast<char*>(a.y) + (j0 + c) * ys, a.y_dtype, _mm256_load_ps(acc + c), w - c);
}

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

}  // namespace tessera::kernels::avx2
