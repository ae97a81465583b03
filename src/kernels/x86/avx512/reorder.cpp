#include <cstring>
#include <type_traits>

#include "kernels/reorder.hpp"
#include "kernels/x86/avx512/vec.hpp"

namespace tessera::kernels::avx512 {

// Elements travel in 32-bit lanes. Between float dtypes they convert; within
// one dtype (`raw`) they keep their bits: 16-bit ones zero-extended and
// truncated back, so integers and NaN payloads come out unchanged. T and Raw
// are compile-time constants (std::integral_constant) in the common cases,
// so that no test on them runs per vector; see reorder().
template <class T, class Raw>
static inline __m512 load_lanes(const void* p, T t, Raw raw, __mmask16 m) {
  if (raw && bytes_of(t) == 2) return _mm512_castsi512_ps(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)));
  return load16(p, raw ? DType::f32 : DType(t), m);
}

// With `stream`, whole aligned vectors go out as streaming stores (see put16).
template <class T, class Raw>
static inline void store_lanes(void* p, T t, Raw raw, __m512 v, __mmask16 m, bool stream) {
  if (!raw || bytes_of(t) != 2) return put16(p, raw ? DType::f32 : DType(t), v, m, stream);
  const __m256i h = _mm512_cvtepi32_epi16(_mm512_castps_si512(v));
  if (stream && m == 0xffff && (reinterpret_cast<std::uintptr_t>(p) & 31) == 0)
    _mm256_stream_si256(static_cast<__m256i*>(p), h);
  else
    _mm256_mask_storeu_epi16(p, m, h);
}

static inline std::int64_t min(std::int64_t a, std::int64_t b) { return a < b ? a : b; }

static void copy_runs(const ReorderArgs& a) {
  const std::int64_t xs = bytes_of(a.x_dtype), ys = bytes_of(a.y_dtype);
  for (std::int64_t r = 0; r < a.rows; ++r) {
    const char* x = static_cast<const char*>(a.x) + r * a.x_row_stride * xs;
    char* y = static_cast<char*>(a.y) + r * a.y_row_stride * ys;
    if (a.x_dtype == a.y_dtype) {
      copy_bytes(y, x, a.cols * xs, a.stream_y);
      continue;
    }
    for_each16(a.cols, [&](std::int64_t c, __mmask16 m) { put16(y + c * ys, a.y_dtype, load16(x + c * xs, a.x_dtype, m), m, a.stream_y); });
  }
  if (a.stream_y) _mm_sfence();
}

// One 16x16 micro-tile of x at (r0, c0), nr x nc of it real (missing rows
// enter as zeros), transposed in registers: t[j] holds column c0 + j.
template <class X, class Raw>
static inline void load_tile(const ReorderArgs& a, X xt, Raw raw, std::int64_t r0, std::int64_t c0, std::int64_t nr,
                             __mmask16 col_mask, __m512 t[16]) {
  const char* x = static_cast<const char*>(a.x);
  for (int i = 0; i < 16; ++i)
    t[i] = i < nr ? load_lanes(x + ((r0 + i) * a.x_row_stride + c0) * bytes_of(xt), xt, raw, col_mask) : _mm512_setzero_ps();
  transpose16x16(t);
}

// 16 lanes as 16-bit y elements: the low halves of the raw bits, or rounded.
template <class Y, class Raw>
static inline __m256i halves(__m512 v, Y t, Raw raw) {
  if (raw) return _mm512_cvtepi32_epi16(_mm512_castps_si512(v));
  return t == DType::bf16 ? to_bf16(v) : _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

// 16x16 micro-tiles: 16 rows of x (16 elements along cols each) in, one
// in-register transpose, 16 rows of y (16 elements along rows each) out.
// Tails are masked on both sides.
template <class X, class Y, class Raw>
static void transpose(const ReorderArgs& a, X xt, Y yt, Raw raw) {
  const bool stream = a.stream_y;
  char* y = static_cast<char*>(a.y);
  for (std::int64_t c0 = 0; c0 < a.cols; c0 += 16) {
    const std::int64_t nc = min(16, a.cols - c0);
    const __mmask16 col_mask = tail_mask(nc);
    for (std::int64_t r0 = 0; r0 < a.rows; r0 += 16) {
      const std::int64_t nr = min(16, a.rows - r0);
      // Streaming (past the L3), each row of x two micro-tiles ahead: its
      // rows are pages apart (+10-20 %, f32 [5120, 4096], Zen 4).
      if (stream && c0 + 32 < a.cols)
        for (std::int64_t i = 0; i < nr; ++i)
          _mm_prefetch(static_cast<const char*>(a.x) + ((r0 + i) * a.x_row_stride + c0 + 32) * bytes_of(xt), _MM_HINT_T0);
      __m512 t[16];
      load_tile(a, xt, raw, r0, c0, nr, col_mask, t);
      for (int j = 0; j < nc; ++j)
        store_lanes(y + ((c0 + j) * a.y_col_stride + r0) * bytes_of(yt), yt, raw, t[j], tail_mask(nr), stream);
    }
  }
  if (stream) _mm_sfence();
}

// 16-bit y past the L3: a micro-tile fills only half a y line, and streaming
// half lines leaves the write-combining buffers to flush partial lines. Two
// micro-tiles (32 x rows) are transposed together instead, so each y line
// goes out whole in one streaming store.
template <class X, class Y, class Raw>
static void transpose_to_16bit_lines(const ReorderArgs& a, X xt, Y yt, Raw raw) {
  char* y = static_cast<char*>(a.y);
  for (std::int64_t c0 = 0; c0 < a.cols; c0 += 16) {
    const std::int64_t nc = min(16, a.cols - c0);
    const __mmask16 col_mask = tail_mask(nc);
    for (std::int64_t r0 = 0; r0 < a.rows; r0 += 32) {
      const std::int64_t nr = min(32, a.rows - r0);
      const __mmask32 row_mask = tail_mask32(nr);
      __m512 lo[16], hi[16];
      load_tile(a, xt, raw, r0, c0, min(16, nr), col_mask, lo);
      load_tile(a, xt, raw, r0 + 16, c0, nr - 16, col_mask, hi);
      for (int j = 0; j < nc; ++j) {
        const __m512i line = _mm512_inserti64x4(_mm512_castsi256_si512(halves(lo[j], yt, raw)), halves(hi[j], yt, raw), 1);
        void* p = y + ((c0 + j) * a.y_col_stride + r0) * bytes_of(yt);
        if (nr == 32 && (reinterpret_cast<std::uintptr_t>(p) & 63) == 0)
          _mm512_stream_si512(static_cast<__m512i*>(p), line);
        else
          _mm512_mask_storeu_epi16(p, row_mask, line);
      }
    }
  }
  _mm_sfence();
}

template <class X, class Y, class Raw>
static void transpose_block(const ReorderArgs& args, X xt, Y yt, Raw raw) {
  const ReorderArgs a = args;  // a local copy: a store through y may alias the arguments
  if (a.stream_y && bytes_of(yt) == 2)
    transpose_to_16bit_lines(a, xt, yt, raw);
  else
    transpose(a, xt, yt, raw);
}

// copy or transpose blocks only (see the row's supports()). Transposes
// within one dtype move 32- or 16-bit lanes whatever the type, so they are
// compiled for those two widths; conversions take the run-time types.
void reorder(const ReorderArgs& a) {
  using Raw = std::true_type;
  if (a.y_col_stride == 1)
    copy_runs(a);
  else if (a.x_dtype != a.y_dtype)
    transpose_block(a, a.x_dtype, a.y_dtype, false);
  else if (bytes_of(a.x_dtype) == 2)
    transpose_block(a, std::integral_constant<DType, DType::bf16>(), std::integral_constant<DType, DType::bf16>(), Raw());
  else
    transpose_block(a, std::integral_constant<DType, DType::f32>(), std::integral_constant<DType, DType::f32>(), Raw());
}

}  // namespace tessera::kernels::avx512
