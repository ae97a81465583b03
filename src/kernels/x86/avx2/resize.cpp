#include <algorithm>

#include "kernels/resize.hpp"
#include "kernels/x86/avx2/vec.hpp"
#include "kernels/x86/prefetch.hpp"

namespace tessera::kernels::avx2 {

namespace {

// The source elements that one block of 8 output columns reads from a row:
// indices [first, last] (they never decrease along a row). Spans of up to 16
// elements sit in two registers and are picked with permutes; wider ones
// are gathered. T: the storage type, at compile time.
template <class T>
class Window {
 public:
  Window(const char* row, T t, std::int64_t width, std::int64_t first, std::int64_t last)
      : row_(row), t_(t), first_(first), span_(last - first) {
    const std::int64_t es = bytes_of(t);
    // Cut to the row: the last block's window may reach past its end.
    if (span_ < 16) lo_ = load8_n(row + first * es, t, std::min<std::int64_t>(8, width - first));
    if (span_ >= 8 && span_ < 16) hi_ = load8_n(row + (first + 8) * es, t, std::min<std::int64_t>(8, width - first - 8));
  }

  // Element idx[l] of the row in lane l.
  __m256 pick(__m256i idx) const {
    const __m256i rel = _mm256_sub_epi32(idx, _mm256_set1_epi32(int(first_)));
    // permutevar8x32 reads the low 3 bits of rel: lanes past 7 take hi_ at rel - 8.
    if (span_ < 8) return _mm256_permutevar8x32_ps(lo_, rel);
    if (span_ < 16)
      return _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo_, rel), _mm256_permutevar8x32_ps(hi_, rel),
                              _mm256_castsi256_ps(_mm256_cmpgt_epi32(rel, _mm256_set1_epi32(7))));
    if (t_ == DType::f32) return _mm256_i32gather_ps(reinterpret_cast<const float*>(row_), idx, 4);
    // 16-bit elements: a 32-bit gather would read 2 bytes past the row's last element.
    alignas(32) std::int32_t at[8];
    char v[32];  // sized for load8's f32 case, which GCC cannot rule out
    _mm256_store_si256(reinterpret_cast<__m256i*>(at), idx);
    for (int l = 0; l < 8; ++l) std::memcpy(v + 2 * l, row_ + 2 * std::int64_t(at[l]), 2);
    return load8(v, t_);
  }

 private:
  const char* row_;
  T t_;
  std::int64_t first_, span_;
  __m256 lo_ = _mm256_setzero_ps(), hi_ = _mm256_setzero_ps();
};

__m256 blend(__m256 w0, __m256 a, __m256 w1, __m256 b) { return _mm256_fmadd_ps(w1, b, _mm256_mul_ps(w0, a)); }

__m256i load_indices(const std::int32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// channels == 1 (NCHW), nearest: 8 output columns at a time, their sources
// picked from a window of the source row. T: the storage type, at compile
// time; Stream: streaming stores for y.
template <class T, class Stream>
void nearest_columns(const ResizeArgs& a, T t, Stream stream, const char* top, char* y) {
  const std::int64_t es = bytes_of(t);
  const ResizeTable& c = a.cols;
  for (std::int64_t w = 0; w < a.out_width; w += 8) {
    const Window src(top, t, a.in_width, c.i0[w], c.i0[w + 7]);
    put8_n(y + w * es, t, src.pick(load_indices(c.i0 + w)), std::min<std::int64_t>(8, a.out_width - w), stream);
  }
}

// Columns of a half-pixel upsample x2 (ResizeTable::half_pixel_x2): for 8
// sources, the 8 even and 8 odd outputs from the sources and their two
// neighbours, loaded shifted by one element, then one multiply and two FMAs.
// No index loads, windows or permutes as in the generic path, which ran the
// op at 16-33 % of triad on a 32x32 -> 64x64 latent. A neighbour past the
// row's end clamps to the end: picked from the sources' own register, not
// from a copy of the row padded at its ends, whose loads right after its
// stores stalled on store forwarding. The 16 outputs go to `out` in order,
// or, where `pairs`, the evens then the odds: put16_unordered's bf16 order,
// so that the blends of the rows need no shuffles. A block past out_width
// (not a multiple of 16) is in order.
template <class T>
void interpolate_x2(const char* src, T t, std::int64_t in_width, std::int64_t out_width, bool pairs, float* out) {
  const std::int64_t es = bytes_of(t);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), one = _mm256_set1_epi32(1);
  const __m256 quarter = _mm256_set1_ps(0.25f), three_quarters = _mm256_set1_ps(0.75f);
  for (std::int64_t j = 0; j < in_width; j += 8) {
    const std::int64_t n = std::min<std::int64_t>(8, in_width - j);
    const __m256 source = load8_n(src + j * es, t, n);
    const __m256 left = j == 0 ? _mm256_permutevar8x32_ps(source, _mm256_max_epi32(_mm256_sub_epi32(lane, one), _mm256_setzero_si256()))
                               : load8_n(src + (j - 1) * es, t, std::min<std::int64_t>(8, n + 1));
    const __m256 right = j + 9 <= in_width
                             ? load8(src + (j + 1) * es, t)
                             : _mm256_permutevar8x32_ps(source, _mm256_min_epi32(_mm256_add_epi32(lane, one), _mm256_set1_epi32(int(n - 1))));
    const __m256 centre = _mm256_mul_ps(three_quarters, source);
    const __m256 even = _mm256_fmadd_ps(quarter, left, centre), odd = _mm256_fmadd_ps(quarter, right, centre);
    float* o = out + 2 * j;
    if (pairs && 2 * j + 16 <= out_width) {
      _mm256_store_ps(o, even);
      _mm256_store_ps(o + 8, odd);
      continue;
    }
    const __m256 lo = _mm256_unpacklo_ps(even, odd), hi = _mm256_unpackhi_ps(even, odd);
    _mm256_store_ps(o, _mm256_permute2f128_ps(lo, hi, 0x20));
    _mm256_store_ps(o + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
  }
}

// channels == 1 (NCHW), bilinear, rows [r0, r1): each output row blends two
// source rows interpolated along the columns (InterpolatedRows).
template <class T, class Stream>
void bilinear_columns(const ResizeArgs& a, T t, Stream stream, std::int64_t r0, std::int64_t r1) {
  const std::int64_t es = bytes_of(t), width = (a.out_width + 15) / 16 * 16;
  const ResizeTable& c = a.cols;
  const bool pairs = c.half_pixel_x2 && t == DType::bf16;
  InterpolatedRows<2> rows(width);
  auto interpolate = [&](std::int64_t i, float* out) {
    const char* src = static_cast<const char*>(a.x) + i * a.x_row_stride * es;
    // Each source row comes from memory once: fetched ahead, or its misses
    // stall the blends behind them (as in the AVX-512 row).
    prefetch_ahead(src, a.in_width * es);
    if (c.half_pixel_x2) return interpolate_x2(src, t, a.in_width, a.out_width, pairs, out);
    for (std::int64_t w = 0; w < a.out_width; w += 8) {
      const Window row(src, t, a.in_width, c.i0[w], c.i1[w + 7]);
      const __m256 wx0 = _mm256_loadu_ps(c.w0 + w), wx1 = _mm256_loadu_ps(c.w1 + w);
      _mm256_store_ps(out + w, blend(wx0, row.pick(load_indices(c.i0 + w)), wx1, row.pick(load_indices(c.i1 + w))));
    }
  };
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::int64_t taps[] = {a.rows.i0[r], a.rows.i1[r]};
    const float* upper = rows.get(taps[0], taps, interpolate);
    const float* lower = rows.get(taps[1], taps, interpolate);
    const __m256 wy0 = _mm256_set1_ps(a.rows.w0[r]), wy1 = _mm256_set1_ps(a.rows.w1[r]);
    char* y = static_cast<char*>(a.y) + r * a.y_row_stride * es;
    std::int64_t w = 0;
    if (pairs)
      for (; w + 16 <= a.out_width; w += 16)
        put16_unordered(y + w * es, t,
                        {blend(wy0, _mm256_load_ps(upper + w), wy1, _mm256_load_ps(lower + w)),
                         blend(wy0, _mm256_load_ps(upper + w + 8), wy1, _mm256_load_ps(lower + w + 8))},
                        stream);
    for (; w < a.out_width; w += 8)
      put8_n(y + w * es, t, blend(wy0, _mm256_load_ps(upper + w), wy1, _mm256_load_ps(lower + w)),
             std::min<std::int64_t>(8, a.out_width - w), stream);
  }
}

// Cubic: sum of w[k] v[k] over the four taps.
__m256 blend4(const __m256* w, const __m256* v) {
  return _mm256_fmadd_ps(w[3], v[3], _mm256_fmadd_ps(w[2], v[2], _mm256_fmadd_ps(w[1], v[1], _mm256_mul_ps(w[0], v[0]))));
}

// Weights of four taps of a table, at output index o, broadcast.
void broadcast_weights(const ResizeTable& t, std::int64_t o, __m256* w) {
  w[0] = _mm256_set1_ps(t.w0[o]), w[1] = _mm256_set1_ps(t.w1[o]), w[2] = _mm256_set1_ps(t.w2[o]), w[3] = _mm256_set1_ps(t.w3[o]);
}

// channels == 1 (NCHW), cubic, rows [r0, r1): as bilinear_columns, each
// output row blends four source rows interpolated along the columns (8
// outputs at a time: their 4 taps picked from a window of the source row).
template <class T, class Stream>
void cubic_columns(const ResizeArgs& a, T t, Stream stream, std::int64_t r0, std::int64_t r1) {
  const std::int64_t es = bytes_of(t), width = (a.out_width + 15) / 16 * 16;
  const ResizeTable& c = a.cols;
  InterpolatedRows<4> rows(width);
  auto interpolate = [&](std::int64_t i, float* out) {
    const char* src = static_cast<const char*>(a.x) + i * a.x_row_stride * es;
    prefetch_ahead(src, a.in_width * es);
    for (std::int64_t w = 0; w < a.out_width; w += 8) {
      // The taps of a block's lanes lie in [i0 of its first, i3 of its last]
      // (clamped taps never decrease along a table).
      const Window row(src, t, a.in_width, c.i0[w], c.i3[w + 7]);
      const __m256 wx[] = {_mm256_loadu_ps(c.w0 + w), _mm256_loadu_ps(c.w1 + w), _mm256_loadu_ps(c.w2 + w), _mm256_loadu_ps(c.w3 + w)};
      const __m256 v[] = {row.pick(load_indices(c.i0 + w)), row.pick(load_indices(c.i1 + w)), row.pick(load_indices(c.i2 + w)),
                          row.pick(load_indices(c.i3 + w))};
      _mm256_store_ps(out + w, blend4(wx, v));
    }
  };
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::int64_t taps[] = {a.rows.i0[r], a.rows.i1[r], a.rows.i2[r], a.rows.i3[r]};
    const float* src[4];
    for (int k = 0; k < 4; ++k) src[k] = rows.get(taps[k], taps, interpolate);
    __m256 wy[4];
    broadcast_weights(a.rows, r, wy);
    char* y = static_cast<char*>(a.y) + r * a.y_row_stride * es;
    for (std::int64_t w = 0; w < a.out_width; w += 8) {
      const __m256 v[] = {_mm256_load_ps(src[0] + w), _mm256_load_ps(src[1] + w), _mm256_load_ps(src[2] + w), _mm256_load_ps(src[3] + w)};
      put8_n(y + w * es, t, blend4(wy, v), std::min<std::int64_t>(8, a.out_width - w), stream);
    }
  }
}

// channels > 1 (NHWC), cubic: one output pixel at a time, its channels 8 at
// a time, each of the four source rows blended along the row first.
template <class T, class Stream>
void cubic_pixels(const ResizeArgs& a, T t, Stream stream, std::int64_t r, char* y) {
  const std::int64_t es = bytes_of(t), xp = a.x_pixel_stride * es, yp = a.y_pixel_stride * es;
  const ResizeTable& c = a.cols;
  const char* x = static_cast<const char*>(a.x);
  const char* src[] = {x + a.rows.i0[r] * a.x_row_stride * es, x + a.rows.i1[r] * a.x_row_stride * es,
                       x + a.rows.i2[r] * a.x_row_stride * es, x + a.rows.i3[r] * a.x_row_stride * es};
  __m256 wy[4];
  broadcast_weights(a.rows, r, wy);
  for (std::int64_t w = 0; w < a.out_width; ++w) {
    const std::int64_t at[] = {c.i0[w] * xp, c.i1[w] * xp, c.i2[w] * xp, c.i3[w] * xp};
    __m256 wx[4];
    broadcast_weights(c, w, wx);
    for (std::int64_t ch = 0; ch < a.channels; ch += 8) {
      const std::int64_t n = std::min<std::int64_t>(8, a.channels - ch), off = ch * es;
      __m256 along[4];
      for (int k = 0; k < 4; ++k) {
        const __m256 v[] = {load8_n(src[k] + at[0] + off, t, n), load8_n(src[k] + at[1] + off, t, n),
                            load8_n(src[k] + at[2] + off, t, n), load8_n(src[k] + at[3] + off, t, n)};
        along[k] = blend4(wx, v);
      }
      put8_n(y + w * yp + off, t, blend4(wy, along), n, stream);
    }
  }
}

// channels > 1 (NHWC): one output pixel at a time, its channels 8 at a time.
template <class T, class Stream>
void resize_pixels(const ResizeArgs& a, T t, Stream stream, const char* top, const char* bottom, char* y, std::int64_t r) {
  const std::int64_t es = bytes_of(t), xp = a.x_pixel_stride * es, yp = a.y_pixel_stride * es;
  const ResizeTable& c = a.cols;
  for (std::int64_t w = 0; w < a.out_width; ++w) {
    char* out = y + w * yp;
    const std::int64_t left = c.i0[w] * xp;
    if (a.taps == 1) {
      // Nearest moves the elements as they are, streamed past the L3: by
      // memcpy each output line was read before it was written (bench
      // membound resize_nearest2x_nhwc large, AMD EPYC, Zen 2, alternating,
      // ms at 1 / 2 threads: f32 34.6 / 19.2 -> 18.5 / 11.3, bf16 18.5 / 9.0
      // -> 9.4 / 5.6; oneDNN's f32 17.9 / 16.3 in the same run).
      copy_bytes(out, top + left, a.channels * es, stream, [](std::int64_t) {});
      continue;
    }
    const std::int64_t right = c.i1[w] * xp;
    const __m256 wx0 = _mm256_set1_ps(c.w0[w]), wx1 = _mm256_set1_ps(c.w1[w]);
    const __m256 wy0 = _mm256_set1_ps(a.rows.w0[r]), wy1 = _mm256_set1_ps(a.rows.w1[r]);
    for (std::int64_t ch = 0; ch < a.channels; ch += 8) {
      const std::int64_t n = std::min<std::int64_t>(8, a.channels - ch), at = ch * es;
      const __m256 upper = blend(wx0, load8_n(top + left + at, t, n), wx1, load8_n(top + right + at, t, n));
      const __m256 lower = blend(wx0, load8_n(bottom + left + at, t, n), wx1, load8_n(bottom + right + at, t, n));
      put8_n(out + at, t, blend(wy0, upper, wy1, lower), n, stream);
    }
  }
}

// Rows [r0, r1), compiled per storage type and streaming mode, the
// arguments in a local copy (a store through y may alias them).
template <class T, class Stream>
void resize_rows(const ResizeArgs& args, T t, Stream stream, std::int64_t r0, std::int64_t r1) {
  const ResizeArgs a = args;
  if (a.channels == 1 && a.taps == 2) return bilinear_columns(a, t, stream, r0, r1);
  if (a.channels == 1 && a.taps == 4) return cubic_columns(a, t, stream, r0, r1);
  const std::int64_t es = bytes_of(t);
  const char* x = static_cast<const char*>(a.x);
  for (std::int64_t r = r0; r < r1; ++r) {
    const char* top = x + a.rows.i0[r] * a.x_row_stride * es;
    const char* bottom = a.taps == 2 ? x + a.rows.i1[r] * a.x_row_stride * es : top;
    char* y = static_cast<char*>(a.y) + r * a.y_row_stride * es;
    if (a.taps == 4)
      cubic_pixels(a, t, stream, r, y);
    else if (a.channels == 1)
      nearest_columns(a, t, stream, top, y);
    else
      resize_pixels(a, t, stream, top, bottom, y, r);
  }
}

}  // namespace

void resize(const ResizeArgs& a, std::int64_t r0, std::int64_t r1) {
  dispatch_float(a.dtype, [&](auto t) {
    if (a.stream_y) resize_rows(a, t, std::true_type(), r0, r1);
    else resize_rows(a, t, std::false_type(), r0, r1);
  });
  if (a.stream_y) _mm_sfence();
}

}  // namespace tessera::kernels::avx2
