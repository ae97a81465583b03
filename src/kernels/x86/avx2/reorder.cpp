#include "kernels/reorder.hpp"

#include <algorithm>
#include <type_traits>

#include "kernels/x86/avx2/vec.hpp"

namespace tessera::kernels::avx2 {

// Elements travel in 32-bit lanes. Between float dtypes they convert; within
// one dtype (`raw`) they keep their bits: 16-bit ones zero-extended and
// packed back, so integers and NaN payloads come out unchanged. n < 8
// elements go through a buffer (AVX2 has no masked 16-bit loads). T and Raw
// are compile-time constants (std::integral_constant) within one dtype, so
// that no dtype is tested per vector (see reorder()): the tests were most of
// the instructions. AMD EPYC Turin, TESSERA_ISA=avx2, 1 thread, against
// run-time types: [128, 256] -> [256, 128] in L2 f32 117 -> 25 ps a byte,
// bf16 180 -> 43; past the L3 (medians of 3 runs of each, alternating)
// f32 [5120, 4096] 17.0 -> 12.2 ms, nchw_to_nhwc [16, 320, 64, 64] 13.9
// -> 7.6, bf16 12.9 -> 9.7 and 12.4 -> 9.1.
template <class T, class Raw>
static inline __m256 load_lanes(const void* p, T t, Raw raw, std::int64_t n) {
  alignas(32) char buf[32] = {};
  if (n < 8) {
    std::memcpy(buf, p, std::size_t(n * bytes_of(t)));
    p = buf;
  }
  if (raw && bytes_of(t) == 2)
    return _mm256_castsi256_ps(_mm256_cvtepu16_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p))));
  return load8(p, raw ? DType::f32 : DType(t));
}

// With `stream`, whole aligned vectors go out as streaming stores (see put8_n).
template <class T, class Raw>
static inline void store_lanes(void* p, T t, Raw raw, __m256 v, std::int64_t n, bool stream) {
  if (!(raw && bytes_of(t) == 2)) return put8_n(p, raw ? DType::f32 : DType(t), v, n, stream);
  const __m256i h = _mm256_castps_si256(v);  // 16-bit values: packus saturates nothing
  const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
  if (n < 8) {
    alignas(16) char buf[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(buf), packed);
    std::memcpy(p, buf, std::size_t(n * 2));
  } else if (stream && (reinterpret_cast<std::uintptr_t>(p) & 15) == 0) {
    _mm_stream_si128(static_cast<__m128i*>(p), packed);
  } else {
    _mm_storeu_si128(static_cast<__m128i*>(p), packed);
  }
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

// 8x8 micro-tiles, stacked along rows as many as one 64-byte y line holds
// (2 for 4-byte y, 4 for 2-byte y): each column's line is written whole, by
// consecutive stores, so past the L3 it streams out in full and in cache it
// is not evicted between its halves. Missing x rows enter as zeros.
template <class X, class Y, class Raw>
static void transpose(const ReorderArgs& args, X xt, Y yt, Raw raw) {
  const ReorderArgs a = args;  // a local copy: a store through y may alias the arguments
  const std::int64_t xs = bytes_of(xt), ys = bytes_of(yt);
  const std::int64_t tiles = 64 / ys / 8;
  const char* x = static_cast<const char*>(a.x);
  char* y = static_cast<char*>(a.y);
  for (std::int64_t c0 = 0; c0 < a.cols; c0 += 8) {
    const std::int64_t nc = min(8, a.cols - c0);
    for (std::int64_t r0 = 0; r0 < a.rows; r0 += 8 * tiles) {
      __m256 t[4][8];
      std::int64_t nr[4];
      for (std::int64_t k = 0; k < tiles; ++k) {
        nr[k] = std::clamp<std::int64_t>(a.rows - r0 - 8 * k, 0, 8);
        if (nr[k] == 0) break;
        for (int i = 0; i < 8; ++i) {
          const char* row = x + ((r0 + 8 * k + i) * a.x_row_stride + c0) * xs;
          // Streaming, x's rows are pages apart: each line a few tiles ahead.
          if (a.stream_y && i < nr[k] && (c0 * xs) % 64 == 0) _mm_prefetch(row + 128, _MM_HINT_T0);
          t[k][i] = i < nr[k] ? load_lanes(row, xt, raw, nc) : _mm256_setzero_ps();
        }
        transpose8x8(t[k]);
      }
      for (int j = 0; j < nc; ++j)
        for (std::int64_t k = 0; k < tiles && nr[k] > 0; ++k)
          store_lanes(y + ((c0 + j) * a.y_col_stride + r0 + 8 * k) * ys, yt, raw, t[k][j], nr[k], a.stream_y);
    }
  }
  if (a.stream_y) _mm_sfence();
}

// 16-bit elements within one dtype, whole blocks of 32 rows x 16 columns:
// per 8 rows one 8x8 transpose of words in each 128-bit lane (24 unpacks
// for 128 elements, where widening to 32-bit lanes took 48 shuffles and 16
// packs), and per column 4 stores of 8 words that write its 64-byte y line
// whole, as transpose() does. AMD EPYC Zen 3, bench membound, time against
// transpose() on the whole at 1 / 2 threads: transpose_2d bf16 [5120,
// 4096] 0.67 / 0.63 and nchw_to_nhwc bf16 0.64 / 0.63 (medians of 3
// alternating runs), [4096, 4096] 0.52 / 0.56 (best of 2).
// Rows [0, rows) x columns [0, cols), multiples of 32 and 16: reorder()
// passes the rest to transpose().
static void transpose16_blocks(const ReorderArgs& a, std::int64_t rows, std::int64_t cols) {
  const char* x = static_cast<const char*>(a.x);
  char* y = static_cast<char*>(a.y);
  const auto store = [&](char* p, __m128i v) {
    if (a.stream_y && (reinterpret_cast<std::uintptr_t>(p) & 15) == 0)
      _mm_stream_si128(reinterpret_cast<__m128i*>(p), v);
    else
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v);
  };
  for (std::int64_t c0 = 0; c0 < cols; c0 += 16) {
    for (std::int64_t r0 = 0; r0 < rows; r0 += 32) {
      __m256i t[4][8];
      for (int k = 0; k < 4; ++k) {
        __m256i r[8];
        for (int i = 0; i < 8; ++i) {
          const char* row = x + ((r0 + 8 * k + i) * a.x_row_stride + c0) * 2;
          // Streaming, x's rows are pages apart: each line a few tiles ahead.
          if (a.stream_y && (c0 * 2) % 64 == 0) _mm_prefetch(row + 128, _MM_HINT_T0);
          r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row));
        }
        __m256i s[8], u[8];
        for (int i = 0; i < 4; ++i) {
          s[i] = _mm256_unpacklo_epi16(r[2 * i], r[2 * i + 1]);  // columns 0-3 of rows 2i, 2i + 1
          s[i + 4] = _mm256_unpackhi_epi16(r[2 * i], r[2 * i + 1]);  // columns 4-7
        }
        for (int h = 0; h < 2; ++h)  // h: columns 0-3 or 4-7
          for (int q = 0; q < 2; ++q) {  // q: rows 0-3 or 4-7
            u[4 * h + 2 * q] = _mm256_unpacklo_epi32(s[4 * h + 2 * q], s[4 * h + 2 * q + 1]);
            u[4 * h + 2 * q + 1] = _mm256_unpackhi_epi32(s[4 * h + 2 * q], s[4 * h + 2 * q + 1]);
          }
        // u[4h + 2q + p]: rows 4q..4q+3 of columns 4h + 2p, 4h + 2p + 1.
        for (int j = 0; j < 8; ++j) {
          const int h = j / 4, p = j % 4 / 2;
          const __m256i lo = u[4 * h + p], hi = u[4 * h + 2 + p];
          t[k][j] = j % 2 ? _mm256_unpackhi_epi64(lo, hi) : _mm256_unpacklo_epi64(lo, hi);
        }
      }
      // t[k][j]: rows r0 + 8k .. + 7 of column c0 + j (low lane) and c0 + 8 + j (high lane).
      for (int j = 0; j < 16; ++j) {
        char* line = y + ((c0 + j) * a.y_col_stride + r0) * 2;
        for (int k = 0; k < 4; ++k)
          store(line + 16 * k, j < 8 ? _mm256_castsi256_si128(t[k][j]) : _mm256_extracti128_si256(t[k][j - 8], 1));
      }
    }
  }
  if (a.stream_y) _mm_sfence();
}

// copy or transpose blocks only (see the row's supports()). Transposes
// within one dtype move 16- or 32-bit elements whatever the type;
// conversions take the run-time types.
void reorder(const ReorderArgs& a) {
  using Raw = std::true_type;
  using Bits16 = std::integral_constant<DType, DType::bf16>;
  using Bits32 = std::integral_constant<DType, DType::f32>;
  if (a.y_col_stride == 1)
    copy_runs(a);
  else if (a.x_dtype != a.y_dtype)
    transpose(a, a.x_dtype, a.y_dtype, false);
  else if (bytes_of(a.x_dtype) == 2) {
    const std::int64_t rows = a.rows / 32 * 32, cols = a.cols / 16 * 16;
    transpose16_blocks(a, rows, cols);
    ReorderArgs right = a, below = a;  // the columns past cols of those rows, then the rows past them
    right.rows = rows, right.cols = a.cols - cols;
    right.x = static_cast<const char*>(a.x) + cols * 2, right.y = static_cast<char*>(a.y) + cols * a.y_col_stride * 2;
    below.rows = a.rows - rows;
    below.x = static_cast<const char*>(a.x) + rows * a.x_row_stride * 2, below.y = static_cast<char*>(a.y) + rows * 2;
    if (right.rows > 0 && right.cols > 0) transpose(right, Bits16(), Bits16(), Raw());
    if (below.rows > 0) transpose(below, Bits16(), Bits16(), Raw());
  }
  else
    transpose(a, Bits32(), Bits32(), Raw());
}

}  // namespace tessera::kernels::avx2
