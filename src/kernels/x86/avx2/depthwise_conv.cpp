#include <algorithm>

#include "kernels/depthwise_conv.hpp"
#include "kernels/x86/avx2/epilogue.hpp"

namespace tessera::kernels::avx2 {

namespace {

// The AVX-512 row's loops, 8 channels at a time. Interior pixels computed
// together: each weight vector loaded feeds this many FMAs.
constexpr int kPixels = 4;


// y[n, oh, ow, c : c + count] (count <= 8) = epilogue(acc).
void finish8(const DepthwiseArgs& a, const DepthwiseOutputRow& row, __m256 acc, std::int64_t ow, std::int64_t c,
             std::int64_t count) {
  const EpilogueArgs& e = a.ep;
  const void* residual = row.residual ? advance(row.residual, e.residual_dtype, ow * e.residual_row_stride + c) : nullptr;
  put8_n(advance(row.y, a.y_dtype, ow * a.y_w_stride + c), a.y_dtype, epilogue_value8(e, acc, c, residual, count), count,
         a.stream_y);
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
#pragma GCC unroll 4
    for (int i = 0; i < P; ++i) finish8(a, row, acc[i], ow + i, c, count);
  }
}

template <bool Up>
void conv_rows(const DepthwiseArgs& a, std::int64_t r0, std::int64_t r1) {
  const std::int64_t height = Up ? 2 * a.in_height : a.in_height, width = Up ? 2 * a.in_width : a.in_width;
  const TapRange interior = depthwise_interior(a.out_width, a.stride_w, a.pad_w, a.dilation_w, a.kernel_w, width);
  for (std::int64_t r = r0; r < r1; ++r) {
    const DepthwiseOutputRow row = depthwise_output_row(a, r, height);
    for (std::int64_t ow = 0; ow < a.out_width;) {
      if (ow >= interior.lo && ow + kPixels <= interior.hi) {
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
