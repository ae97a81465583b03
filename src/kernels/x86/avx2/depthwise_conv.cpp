#include <algorithm>

#include "kernels/depthwise_conv.hpp"
#include "kernels/x86/avx2/epilogue.hpp"

namespace tessera::kernels::avx2 {

namespace {

// The AVX-512 row's loops, 8 channels at a time. Interior pixels computed
// together: each weight vector loaded feeds this many FMAs.
constexpr int kPixels = 4;


// y[n, oh, ow + i, c : c + count] (count <= 8) = epilogue(acc[i]) for the
// block's P pixels: one call per block, the accumulators passed through
// memory. GCC kept the epilogue out of line (its dtype and activation
// switches), and a call per output vector then cost about as much as the
// taps' FMAs. (Switching once per block, a loop per activation and dtype,
// measured slower than this: 1.9-2.0 against 1.4-1.5 ms, 3x3 f32 below.)
template <int P>
__attribute__((noinline)) void finish_pixels(const DepthwiseArgs& a, const DepthwiseOutputRow& row, const __m256 (&acc)[P],
                                             std::int64_t ow, std::int64_t c, std::int64_t count) {
  const EpilogueArgs& e = a.ep;
  for (int i = 0; i < P; ++i) {
    const void* residual = row.residual ? advance(row.residual, e.residual_dtype, (ow + i) * e.residual_row_stride + c) : nullptr;
    put8_n(advance(row.y, a.y_dtype, (ow + i) * a.y_w_stride + c), a.y_dtype, epilogue_value8(e, acc[i], c, residual, count),
           count, a.stream_y);
  }
}

// Output pixels [ow, ow + P) of a row, every channel, over the taps row.kh x
// kw_taps (which must hold for all P pixels). Up: x is read upsampled, each
// input coordinate halved. The arguments are copied to locals: the tails'
// memcpy would make GCC reload them from `a` in the inner loop.
template <int P, bool Up>
void pixels(const DepthwiseArgs& a, const DepthwiseOutputRow& row, std::int64_t ow, TapRange kw_taps) {
  const DType xt = a.x_dtype;
  const std::int64_t C = a.channels, kw_count = a.kernel_w, es = bytes_of(xt), h_bytes = a.x_h_stride * es,
                     w_bytes = a.x_w_stride * es;
  const std::int64_t stride = a.stride_w, dilation_h = a.dilation_h, dilation_w = a.dilation_w;
  const std::int64_t iw0 = ow * stride - a.pad_w;  // pixel ow's tap 0
  const float* weights = a.w;
  for (std::int64_t c = 0; c < C; c += 8) {
    const std::int64_t count = std::min<std::int64_t>(8, C - c);
    __m256 acc[P];
#pragma GCC unroll 4
    for (int i = 0; i < P; ++i) acc[i] = _mm256_setzero_ps();
    for (std::int64_t kh = row.kh.lo; kh < row.kh.hi; ++kh) {
      const char* x_row = row.x + ((row.ih0 + kh * dilation_h) >> Up) * h_bytes + c * es;
      const float* w_row = weights + kh * kw_count * C + c;
      for (std::int64_t kw = kw_taps.lo; kw < kw_taps.hi; ++kw) {
        const __m256 w = load8_n(w_row + kw * C, DType::f32, count);
        const std::int64_t iw = iw0 + kw * dilation_w;
#pragma GCC unroll 4
        for (int i = 0; i < P; ++i) {
          const char* px = Up ? x_row + ((iw + i * stride) >> 1) * w_bytes : x_row + (iw + i * stride) * w_bytes;
          acc[i] = _mm256_fmadd_ps(load8_n(px, xt, count), w, acc[i]);
        }
      }
    }
    finish_pixels(a, row, acc, ow, c, count);
  }
}

// Interior pixels [ow, ow + 8) at stride 1 without dilation, K taps a row,
// x's storage type T: per row of taps, each of the 8 + K - 1 input vectors
// the 8 outputs read is loaded once and feeds up to K of them (the taps'
// weights held in registers), where pixels() loads one per tap and output.
// There every FMA took a load of its own. With finish_pixels, AMD EPYC Zen
// 3, 1 thread, best of 200 in each of 3-4 runs, ms: [1, 64, 64, 320] 3x3 f32
// 2.3-2.5 -> 1.4-1.6, bf16 2.3-2.6 -> 1.4; [1, 56, 56, 192] 7x7 f32 4.1-4.2
// -> 3.7-3.8, bf16 4.2-4.3 -> 3.5 (its 7 weights and 8 sums fill the 16
// registers).
constexpr int kSlidingPixels = 8;
template <int K, class T>
void sliding_pixels(const DepthwiseArgs& a, const DepthwiseOutputRow& row, std::int64_t ow, T xt) {
  constexpr int P = kSlidingPixels;
  const std::int64_t C = a.channels, es = bytes_of(xt), h_bytes = a.x_h_stride * es, w_bytes = a.x_w_stride * es;
  const std::int64_t iw0 = ow - a.pad_w, dilation_h = a.dilation_h;
  const float* weights = a.w;
  for (std::int64_t c = 0; c < C; c += 8) {
    const std::int64_t count = std::min<std::int64_t>(8, C - c);
    __m256 acc[P];
    for (int i = 0; i < P; ++i) acc[i] = _mm256_setzero_ps();
    for (std::int64_t kh = row.kh.lo; kh < row.kh.hi; ++kh) {
      const char* x_row = row.x + (row.ih0 + kh * dilation_h) * h_bytes + (iw0 * a.x_w_stride + c) * es;
      const float* w_row = weights + kh * K * C + c;
      __m256 w[K];
      for (int k = 0; k < K; ++k) w[k] = load8_n(w_row + k * C, DType::f32, count);
      for (int j = 0; j < P + K - 1; ++j) {
        const __m256 x = load8_n(x_row + j * w_bytes, xt, count);
        for (int k = 0; k < K; ++k)
          if (j - k >= 0 && j - k < P) acc[j - k] = _mm256_fmadd_ps(x, w[k], acc[j - k]);
      }
    }
    finish_pixels(a, row, acc, ow, c, count);
  }
}

template <bool Up>
void conv_rows(const DepthwiseArgs& a, std::int64_t r0, std::int64_t r1) {
  const std::int64_t height = Up ? 2 * a.in_height : a.in_height, width = Up ? 2 * a.in_width : a.in_width;
  const TapRange interior = depthwise_interior(a.out_width, a.stride_w, a.pad_w, a.dilation_w, a.kernel_w, width);
  const bool sliding = !Up && a.stride_w == 1 && a.dilation_w == 1 && (a.kernel_w == 3 || a.kernel_w == 5 || a.kernel_w == 7);
  const auto slide = [&](const DepthwiseOutputRow& row, std::int64_t ow) {
    dispatch_float(a.x_dtype, [&](auto xt) {
      if (a.kernel_w == 3) sliding_pixels<3>(a, row, ow, xt);
      else if (a.kernel_w == 5) sliding_pixels<5>(a, row, ow, xt);
      else sliding_pixels<7>(a, row, ow, xt);
    });
  };
  for (std::int64_t r = r0; r < r1; ++r) {
    const DepthwiseOutputRow row = depthwise_output_row(a, r, height);
    for (std::int64_t ow = 0; ow < a.out_width;) {
      if (sliding && ow >= interior.lo && ow + kSlidingPixels <= interior.hi) {
        slide(row, ow);
        ow += kSlidingPixels;
      } else if (ow >= interior.lo && ow + kPixels <= interior.hi) {
        pixels<kPixels, Up>(a, row, ow, {0, a.kernel_w});
        ow += kPixels;
      } else {
        pixels<1, Up>(a, row, ow, depthwise_taps(ow, a.stride_w, a.pad_w, a.dilation_w, a.kernel_w, width));
        ++ow;
      }
    }
  }
  if (a.stream_y) _mm_sfence();
}

}  // namespace

void depthwise_conv(const DepthwiseArgs& a, std::int64_t r0, std::int64_t r1) {
  if (a.upsample_nearest2x)
    conv_rows<true>(a, r0, r1);
  else
    conv_rows<false>(a, r0, r1);
}

}  // namespace tessera::kernels::avx2
