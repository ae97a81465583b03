#include <cstring>
#include <type_traits>

#include "kernels/reorder.hpp"
#include "kernels/x86/avx512/vec.hpp"

namespace tessera::kernels::avx512 {

// The transposes of 32-bit lanes (transpose, transpose_to_16bit_lines):
// between float dtypes the elements convert; within one 4-byte dtype (`raw`)
// they keep their bits, so integers and NaN payloads come out unchanged.
// Within one 2-byte dtype they move as 16-bit elements (transpose_16bit). T
// and Raw are compile-time constants (std::integral_constant) in the common
// cases, so that no test on them runs per vector; see reorder().
template <class T, class Raw>
static inline __m512 load_lanes(const void* p, T t, Raw raw, __mmask16 m) {
  return load16(p, raw ? DType::f32 : DType(t), m);
}

// With `stream`, whole aligned vectors go out as streaming stores (see put16).
template <class T, class Raw>
static inline void store_lanes(void* p, T t, Raw raw, __m512 v, __mmask16 m, bool stream) {
  put16(p, raw ? DType::f32 : DType(t), v, m, stream);
}

static inline std::int64_t min(std::int64_t a, std::int64_t b) { return a < b ? a : b; }

// Past the L3 the transposes fetch x ahead: its rows are pages apart, and the
// hardware prefetcher follows no walk down a strip of them (+10-20 %, f32
// [5120, 4096], Zen 4). One line of each of rows [r, r + n) of the block at
// column c, if c is in it. Always inlined, as prefetch.hpp explains.
__attribute__((always_inline)) static inline void prefetch_rows(const ReorderArgs& a, std::int64_t elem, std::int64_t r,
                                                                std::int64_t c, std::int64_t n) {
  if (c >= a.cols) return;
  for (std::int64_t i = r; i < min(r + n, a.rows); ++i)
    _mm_prefetch(static_cast<const char*>(a.x) + (i * a.x_row_stride + c) * elem, _MM_HINT_T0);
}

// The n rows 32 below the micro-tile at (r0, c0) of a walk down the block's
// strips of `strip` columns; past a strip's end, the next strip's at the
// same distance from its top.
__attribute__((always_inline)) static inline void prefetch_below(const ReorderArgs& a, std::int64_t elem, std::int64_t r0,
                                                                 std::int64_t c0, std::int64_t n, std::int64_t strip) {
  if (r0 + 32 < a.rows) prefetch_rows(a, elem, r0 + 32, c0, n);
  else prefetch_rows(a, elem, r0 + 32 - a.rows, c0 + strip, n);
}

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

// 16 lanes rounded to 16-bit y elements.
template <class Y>
static inline __m256i halves(__m512 v, Y t) {
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
      // Many rows: 32 below. Few (nchw_to_nhwc's 16-row blocks, where below
      // is the next strip): two micro-tiles to the right. AMD EPYC Turin,
      // alternating in one process, 15 rounds, time below over right at 1 /
      // 2 threads: f32 [5120, 4096] -> [4096, 5120] (128-row blocks) 0.89 /
      // 0.82; nchw_to_nhwc [16, 320, 64, 64] 1.08 / 1.16.
      if (stream) {
        if (a.rows > 32) prefetch_below(a, bytes_of(xt), r0, c0, 16, 16);
        else prefetch_rows(a, bytes_of(xt), r0, c0 + 32, 16);
      }
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
        const __m512i line = _mm512_inserti64x4(_mm512_castsi256_si512(halves(lo[j], yt)), halves(hi[j], yt), 1);
        void* p = y + ((c0 + j) * a.y_col_stride + r0) * bytes_of(yt);
        if (nr == 32)
          store_line(p, line, true);
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

// One dtype of 2 bytes: 16-bit elements, 32 to a vector, transposed in
// 16 x 32 micro-tiles, a third of the shuffles per element of the 32-bit
// lanes' path (zero-extend, 16 x 16 transpose, narrow). bf16 [R, C] -> [C,
// R], 1 thread, alternating (AMD EPYC Turin, Zen 5), ns per 16 elements: in
// L2 (256 x 256) 1.73 -> 1.06, [320, 4096] 3.07 -> 2.32, [4096, 64] 3.30 ->
// 2.34, [64, 4096] 2.67 -> 1.81; past the L3 even (memory-bound).
//
// Rows [r0, r0 + nr) of x (nr <= 16; missing rows enter as zeros), 32
// elements from column c0 each (col_mask: the real ones), transposed: z[2j + h]
// holds columns c0 + 16h + j (low 256 bits) and c0 + 16h + 8 + j (high),
// 16 rows each. Per group of 8 rows, three rounds of unpacks transpose the
// 8 x 8 blocks within each 128-bit lane (lane k of v[j] holds column 8k + j);
// a permute then pairs the two groups' lanes.
static inline void load_tile_16bit(const char* x, std::int64_t row_bytes, std::int64_t nr, __mmask32 col_mask, __m512i z[16]) {
  __m512i v[2][8];
  for (int g = 0; g < 2; ++g) {
    __m512i a[8], t[8];
    for (int i = 0; i < 8; ++i) a[i] = 8 * g + i < nr ? _mm512_maskz_loadu_epi16(col_mask, x + (8 * g + i) * row_bytes) : _mm512_setzero_si512();
    for (int i = 0; i < 4; ++i) {
      t[2 * i] = _mm512_unpacklo_epi16(a[2 * i], a[2 * i + 1]);
      t[2 * i + 1] = _mm512_unpackhi_epi16(a[2 * i], a[2 * i + 1]);
    }
    for (int i = 0; i < 2; ++i) {
      a[4 * i + 0] = _mm512_unpacklo_epi32(t[4 * i + 0], t[4 * i + 2]);
      a[4 * i + 1] = _mm512_unpackhi_epi32(t[4 * i + 0], t[4 * i + 2]);
      a[4 * i + 2] = _mm512_unpacklo_epi32(t[4 * i + 1], t[4 * i + 3]);
      a[4 * i + 3] = _mm512_unpackhi_epi32(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int i = 0; i < 4; ++i) {
      v[g][2 * i] = _mm512_unpacklo_epi64(a[i], a[4 + i]);
      v[g][2 * i + 1] = _mm512_unpackhi_epi64(a[i], a[4 + i]);
    }
  }
  const __m512i low_lanes = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
  const __m512i high_lanes = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
  for (int j = 0; j < 8; ++j) {
    z[2 * j] = _mm512_permutex2var_epi64(v[0][j], low_lanes, v[1][j]);
    z[2 * j + 1] = _mm512_permutex2var_epi64(v[0][j], high_lanes, v[1][j]);
  }
}

// 32 x 32 elements at a time, two micro-tiles of 16 rows, so that each y
// line (32 rows) is written whole by one store: with half lines, a y of
// rows 8 KiB apart ([4096, 64] -> [64, 4096]) ran 1.5x slower than the
// 32-bit lanes' path, its lines evicted between the halves (all in one L1
// set). Past the L3 the whole aligned lines stream.
static void transpose_16bit(const ReorderArgs& args) {
  const ReorderArgs a = args;  // a local copy: a store through y may alias the arguments
  const char* x = static_cast<const char*>(a.x);
  char* y = static_cast<char*>(a.y);
  const std::int64_t x_row_bytes = a.x_row_stride * 2;
  for (std::int64_t c0 = 0; c0 < a.cols; c0 += 32) {
    const std::int64_t nc = min(32, a.cols - c0);
    const __mmask32 col_mask = tail_mask32(nc);
    for (std::int64_t r0 = 0; r0 < a.rows; r0 += 32) {
      const std::int64_t nr = min(32, a.rows - r0);
      // bf16 [5120, 4096] -> [4096, 5120], alternating in one process (AMD
      // EPYC Turin, 15 rounds), time with over without at 1 / 2 threads:
      // 0.65 / 0.64; nchw_to_nhwc [16, 320, 64, 64] 0.96 / 0.98. Two
      // micro-tiles to the right gave 0.92 / 0.86, 64 or 96 rows down
      // 0.68-0.72.
      if (a.stream_y) prefetch_below(a, 2, r0, c0, 32, 32);
      __m512i lo[16], hi[16];
      load_tile_16bit(x + (r0 * a.x_row_stride + c0) * 2, x_row_bytes, min(16, nr), col_mask, lo);
      load_tile_16bit(x + ((r0 + 16) * a.x_row_stride + c0) * 2, x_row_bytes, nr - 16, col_mask, hi);
      const __mmask32 row_mask = tail_mask32(nr);
      for (int i = 0; i < 16; ++i)
        for (int half = 0; half < 2; ++half) {
          const int col = 16 * (i % 2) + 8 * half + i / 2;  // of lo[i] and hi[i]'s half `half`
          if (col >= nc) continue;
          const __m512i line = half ? _mm512_shuffle_i64x2(lo[i], hi[i], 0xee) : _mm512_shuffle_i64x2(lo[i], hi[i], 0x44);
          void* p = y + ((c0 + col) * a.y_col_stride + r0) * 2;
          if (nr == 32)
            store_line(p, line, a.stream_y);
          else
            _mm512_mask_storeu_epi16(p, row_mask, line);
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
  if (a.y_col_stride == 1)
    copy_runs(a);
  else if (a.x_dtype != a.y_dtype)
    transpose_block(a, a.x_dtype, a.y_dtype, false);
  else if (bytes_of(a.x_dtype) == 2)
    transpose_16bit(a);
  else
    transpose_block(a, std::integral_constant<DType, DType::f32>(), std::integral_constant<DType, DType::f32>(), Raw());
}

}  // namespace tessera::kernels::avx512
