#include "kernels/reorder.hpp"
#include "kernels/x86/avx2/vec.hpp"

namespace tessera::kernels::avx2 {

// Elements travel in 32-bit lanes. Between float dtypes they convert; within
// one dtype (`raw`) they keep their bits: 16-bit ones zero-extended and
// packed back, so integers and NaN payloads come out unchanged. n < 8
// elements go through a buffer (AVX2 has no masked 16-bit loads).
static inline __m256 load_lanes(const void* p, DType t, bool raw, std::int64_t n) {
  alignas(32) char buf[32] = {};
  if (n < 8) {
    std::memcpy(buf, p, std::size_t(n * bytes_of(t)));
    p = buf;
  }
  if (raw && bytes_of(t) == 2)
    return _mm256_castsi256_ps(_mm256_cvtepu16_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p))));
  return load8(p, raw ? DType::f32 : t);
}

static inline void store_lanes(void* p, DType t, bool raw, __m256 v, std::int64_t n) {
  alignas(32) char buf[32];
  void* dst = n < 8 ? static_cast<void*>(buf) : p;
  if (raw && bytes_of(t) == 2) {
    const __m256i h = _mm256_castps_si256(v);  // 16-bit values: packus saturates nothing
    _mm_storeu_si128(static_cast<__m128i*>(dst), _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
  } else {
    store8(dst, raw ? DType::f32 : t, v);
  }
  if (n < 8) std::memcpy(p, buf, std::size_t(n * bytes_of(t)));
}

static inline std::int64_t min(std::int64_t a, std::int64_t b) { return a < b ? a : b; }

static void copy_runs(const ReorderArgs& a) {
  const std::int64_t xs = bytes_of(a.x_dtype), ys = bytes_of(a.y_dtype);
  for (std::int64_t r = 0; r < a.rows; ++r) {
    const char* x = static_cast<const char*>(a.x) + r * a.x_row_stride * xs;
    char* y = static_cast<char*>(a.y) + r * a.y_row_stride * ys;
    if (a.x_dtype == a.y_dtype) {
      std::memcpy(y, x, std::size_t(a.cols * xs));
      continue;
    }
    std::int64_t c = 0;
    for (; c + 8 <= a.cols; c += 8) store8(y + c * ys, a.y_dtype, load8(x + c * xs, a.x_dtype));
    if (c < a.cols) store8_tail(y + c * ys, a.y_dtype, load8_tail(x + c * xs, a.x_dtype, a.cols - c), a.cols - c);
  }
}

// 8x8 micro-tiles: 8 rows of x (8 elements along cols each) in, one
// in-register transpose, 8 rows of y (8 elements along rows each) out.
// Missing x rows enter as zeros.
static void transpose(const ReorderArgs& a) {
  const bool raw = a.x_dtype == a.y_dtype;
  for (std::int64_t r0 = 0; r0 < a.rows; r0 += 8) {
    const std::int64_t nr = min(8, a.rows - r0);
    for (std::int64_t c0 = 0; c0 < a.cols; c0 += 8) {
      const std::int64_t nc = min(8, a.cols - c0);
      __m256 t[8];
      for (int i = 0; i < 8; ++i)
        t[i] = i < nr ? load_lanes(advance(a.x, a.x_dtype, (r0 + i) * a.x_row_stride + c0), a.x_dtype, raw, nc)
                      : _mm256_setzero_ps();
      transpose8x8(t);
      for (int j = 0; j < nc; ++j)
        store_lanes(advance(a.y, a.y_dtype, (c0 + j) * a.y_col_stride + r0), a.y_dtype, raw, t[j], nr);
    }
  }
}

// copy or transpose blocks only (see the row's supports()).
void reorder(const ReorderArgs& a) {
  if (a.y_col_stride == 1)
    copy_runs(a);
  else
    transpose(a);
}

}  // namespace tessera::kernels::avx2
