#pragma once
// The AVX-512 resize loops, compiled by avx512/resize.cpp for every storage
// type and by avx512_bf16/resize.cpp for bf16, whose conversions that level
// does in one instruction (vec.hpp, to_bf16). Static functions and an
// unnamed namespace only (see vec.hpp).
#include <cstring>
#include <type_traits>

#include "kernels/resize.hpp"
#include "kernels/x86/avx512/vec.hpp"

namespace tessera::kernels::avx512 {

namespace {  // internal to each level's translation unit

// The source elements that one block of 16 output columns reads from a row:
// indices [first, last] (they never decrease along a row). Spans of up to
// 32 elements — every upsample, and downsamples to about half — sit in one
// or two registers and are picked with a permute; wider ones are gathered.
template <class T>
class Window {
 public:
  Window(const char* row, T t, std::int64_t width, std::int64_t first, std::int64_t last)
      : row_(row), t_(t), first_(first), span_(last - first) {
    const std::int64_t es = bytes_of(t);
    // Masked to the row: the last block's window may reach past its end.
    if (span_ < 32) lo_ = load16(row + first * es, t, tail_mask(width - first));
    if (span_ >= 16 && span_ < 32) hi_ = load16(row + (first + 16) * es, t, tail_mask(width - first - 16));
  }

  // Element idx[l] of the row in lane l.
  __m512 pick(__m512i idx) const {
    const __m512i rel = _mm512_sub_epi32(idx, _mm512_set1_epi32(int(first_)));
    if (span_ < 16) return _mm512_permutexvar_ps(rel, lo_);
    if (span_ < 32) return _mm512_permutex2var_ps(lo_, rel, hi_);
    if (t_ == DType::f32) return _mm512_i32gather_ps(idx, row_, 4);
    // 16-bit elements: a 32-bit gather would read 2 bytes past the row's last element.
    alignas(64) std::int32_t at[16];
    char v[64];  // sized for load16's f32 case, which GCC cannot rule out
    _mm512_store_si512(at, idx);
    for (int l = 0; l < 16; ++l) std::memcpy(v + 2 * l, row_ + 2 * std::int64_t(at[l]), 2);
    return load16(v, t_, 0xffff);
  }

 private:
  const char* row_;
  T t_;
  std::int64_t first_, span_;
  __m512 lo_ = _mm512_setzero_ps(), hi_ = _mm512_setzero_ps();
};

}  // namespace

static inline __m512 blend(__m512 w0, __m512 a, __m512 w1, __m512 b) { return _mm512_fmadd_ps(w1, b, _mm512_mul_ps(w0, a)); }

// channels == 1 (NCHW), nearest: 16 output columns at a time, their sources
// picked from a window of the source row. T: the storage type, at compile
// time in the common case; Stream: streaming stores for y.
template <class T, class Stream>
static void nearest_columns(const ResizeArgs& a, T t, Stream stream, const char* top, char* y) {
  const std::int64_t es = bytes_of(t);
  const ResizeTable& c = a.cols;
  for_each16(a.out_width, [&](std::int64_t w, __mmask16 m) {
    const Window src(top, t, a.in_width, c.i0[w], c.i0[w + 15]);
    put16(y + w * es, t, src.pick(_mm512_loadu_si512(c.i0 + w)), m, stream);
  });
}

// Source row `src` interpolated along the columns for the outputs [w, w + 16)
// whose window spans 16 elements or more (downsamples): through Window, out
// of line, so that the common loop below keeps its registers (inlined, the
// gather's spill of the indices ran on every block).
template <class T>
__attribute__((noinline)) static __m512 interpolate_wide(const ResizeArgs& a, T t, const char* src, std::int64_t w) {
  const ResizeTable& c = a.cols;
  const Window row(src, t, a.in_width, c.i0[w], c.i1[w + 15]);
  return blend(_mm512_loadu_ps(c.w0 + w), row.pick(_mm512_loadu_si512(c.i0 + w)), _mm512_loadu_ps(c.w1 + w),
               row.pick(_mm512_loadu_si512(c.i1 + w)));
}

// channels == 1 (NCHW), bilinear, rows [r0, r1): each output row blends two
// source rows interpolated along the columns (InterpolatedRows).
template <class T, class Stream>
static void bilinear_columns(const ResizeArgs& a, T t, Stream stream, std::int64_t r0, std::int64_t r1) {
  const std::int64_t es = bytes_of(t), width = (a.out_width + 15) / 16 * 16;
  const ResizeTable& c = a.cols;
  InterpolatedRows<2> rows(width);
  auto interpolate = [&](std::int64_t i, float* out) {
    const char* src = static_cast<const char*>(a.x) + i * a.x_row_stride * es;
    // Each source row comes from memory once: fetched ahead as the
    // activations' streams are (vec.hpp), or every row's misses stall the
    // blends behind them (NCHW 2x, f32, 1 thread: 35 -> 27-30 ms).
    prefetch_ahead(src, a.in_width * es);
    for (std::int64_t w = 0; w < a.out_width; w += 16) {
      // Upsamples: the 16 outputs read fewer than 16 source elements, from
      // one vector (unmasked but at the row's end) picked by two permutes.
      const std::int64_t first = c.i0[w];
      if (c.i1[w + 15] - first >= 16) [[unlikely]] {
        _mm512_store_ps(out + w, interpolate_wide(a, t, src, w));
        continue;
      }
      const __m512 row = load16_first(src + first * es, t, a.in_width - first);
      const __m512i base = _mm512_set1_epi32(int(first));
      const __m512 left = _mm512_permutexvar_ps(_mm512_sub_epi32(_mm512_loadu_si512(c.i0 + w), base), row);
      const __m512 right = _mm512_permutexvar_ps(_mm512_sub_epi32(_mm512_loadu_si512(c.i1 + w), base), row);
      _mm512_store_ps(out + w, blend(_mm512_loadu_ps(c.w0 + w), left, _mm512_loadu_ps(c.w1 + w), right));
    }
  };
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::int64_t taps[] = {a.rows.i0[r], a.rows.i1[r]};
    const float* upper = rows.get(taps[0], taps, interpolate);
    const float* lower = rows.get(taps[1], taps, interpolate);
    const __m512 wy0 = _mm512_set1_ps(a.rows.w0[r]), wy1 = _mm512_set1_ps(a.rows.w1[r]);
    char* y = static_cast<char*>(a.y) + r * a.y_row_stride * es;
    auto value = [&](std::int64_t w) { return blend(wy0, _mm512_load_ps(upper + w), wy1, _mm512_load_ps(lower + w)); };
    std::int64_t w = 0;
    for (; w + 32 <= a.out_width; w += 32) put32(y + w * es, t, value(w), value(w + 16), stream);  // 16-bit: a line per store
    for (; w < a.out_width; w += 16) put16(y + w * es, t, value(w), tail_mask(a.out_width - w), stream);
  }
}

// channels > 1 (NHWC): one output pixel at a time, its channels 16 at a time.
template <class T, class Stream>
static void resize_pixels(const ResizeArgs& a, T t, Stream stream, const char* top, const char* bottom, char* y, std::int64_t r) {
  const std::int64_t es = bytes_of(t), xp = a.x_pixel_stride * es, yp = a.y_pixel_stride * es;
  const ResizeTable& c = a.cols;
  for (std::int64_t w = 0; w < a.out_width; ++w) {
    char* out = y + w * yp;
    const std::int64_t left = c.i0[w] * xp;
    if (a.taps == 1) {
      copy_bytes(out, top + left, a.channels * es, stream);  // nearest moves the elements as they are
      continue;
    }
    const std::int64_t right = c.i1[w] * xp;
    const __m512 wx0 = _mm512_set1_ps(c.w0[w]), wx1 = _mm512_set1_ps(c.w1[w]);
    const __m512 wy0 = _mm512_set1_ps(a.rows.w0[r]), wy1 = _mm512_set1_ps(a.rows.w1[r]);
    for_each16(a.channels, [&](std::int64_t ch, __mmask16 m) {
      const std::int64_t at = ch * es;
      const __m512 upper = blend(wx0, load16(top + left + at, t, m), wx1, load16(top + right + at, t, m));
      const __m512 lower = blend(wx0, load16(bottom + left + at, t, m), wx1, load16(bottom + right + at, t, m));
      put16(out + at, t, blend(wy0, upper, wy1, lower), m, stream);
    });
  }
}

// Rows [r0, r1), compiled per storage type and streaming mode, the
// arguments in a local copy (a store through y may alias them).
template <class T, class Stream>
static void resize_rows(const ResizeArgs& args, T t, Stream stream, std::int64_t r0, std::int64_t r1) {
  const ResizeArgs a = args;
  if (a.channels == 1 && a.taps == 2) return bilinear_columns(a, t, stream, r0, r1);
  const std::int64_t es = bytes_of(t);
  const char* x = static_cast<const char*>(a.x);
  for (std::int64_t r = r0; r < r1; ++r) {
    const char* top = x + a.rows.i0[r] * a.x_row_stride * es;
    const char* bottom = a.taps == 2 ? x + a.rows.i1[r] * a.x_row_stride * es : top;
    char* y = static_cast<char*>(a.y) + r * a.y_row_stride * es;
    if (a.channels == 1)
      nearest_columns(a, t, stream, top, y);
    else
      resize_pixels(a, t, stream, top, bottom, y, r);
  }
}

// Rows [r0, r1) of a plane for storage types Types (dispatch_float's
// signature), then the fence that streaming stores need.
template <class Types>
static void resize_planes(const ResizeArgs& a, std::int64_t r0, std::int64_t r1, Types types) {
  types(a.dtype, [&](auto t) {
    if (a.stream_y) resize_rows(a, t, std::true_type(), r0, r1);
    else resize_rows(a, t, std::false_type(), r0, r1);
  });
  if (a.stream_y) _mm_sfence();
}

}  // namespace tessera::kernels::avx512
