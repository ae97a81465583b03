#include "kernels/depthwise_conv.hpp"
#include "kernels/x86/avx512/epilogue.hpp"

namespace tessera::kernels::avx512 {

namespace {

// Interior pixels computed together: each weight vector loaded feeds this
// many FMAs, so the loads do not outnumber them two to one.
constexpr int kPixels = 8;


// y[n, oh, ow, c : c + 16] (masked) = epilogue(acc).
void finish16(const DepthwiseArgs& a, const DepthwiseOutputRow& row, __m512 acc, std::int64_t ow, std::int64_t c, __mmask16 m) {
  const EpilogueArgs& e = a.ep;
  const void* residual = row.residual ? advance(row.residual, e.residual_dtype, ow * e.residual_row_stride + c) : nullptr;
  put16(advance(row.y, a.y_dtype, ow * a.y_w_stride + c), a.y_dtype, epilogue_value16(e, acc, c, residual, m), m, a.stream_y);
}

// Output pixels [ow, ow + P) of a row, every channel, over the taps row.kh x
// kw_taps (which must hold for all P pixels). Up: x is read upsampled, each
// input coordinate halved. The arguments are copied to locals: the masked
// loads count as memory accesses GCC cannot see through, which would make it
// reload them from `a` in the inner loop.
template <int P, bool Up, class XType>
void pixels(const DepthwiseArgs& a, XType xt, const DepthwiseOutputRow& row, std::int64_t ow, TapRange kw_taps) {
  constexpr std::int64_t es = bytes_of(XType::value);
  const std::int64_t C = a.channels, kw_count = a.kernel_w, h_bytes = a.x_h_stride * es, w_bytes = a.x_w_stride * es;
  const std::int64_t stride = a.stride_w, dilation_h = a.dilation_h, dilation_w = a.dilation_w;
  const std::int64_t iw0 = ow * stride - a.pad_w;  // pixel ow's tap 0
  const float* weights = a.w;
  for (std::int64_t c = 0; c < C; c += 16) {
    const __mmask16 m = tail_mask(C - c);
    __m512 acc[P];
#pragma GCC unroll 8
    for (int i = 0; i < P; ++i) acc[i] = _mm512_setzero_ps();
    for (std::int64_t kh = row.kh.lo; kh < row.kh.hi; ++kh) {
      const char* x_row = row.x + ((row.ih0 + kh * dilation_h) >> Up) * h_bytes + c * es;
      const float* w_row = weights + kh * kw_count * C + c;
      for (std::int64_t kw = kw_taps.lo; kw < kw_taps.hi; ++kw) {
        const __m512 w = _mm512_maskz_loadu_ps(m, w_row + kw * C);
        const std::int64_t iw = iw0 + kw * dilation_w;
#pragma GCC unroll 8
        for (int i = 0; i < P; ++i) {
          const char* px = Up ? x_row + ((iw + i * stride) >> 1) * w_bytes : x_row + (iw + i * stride) * w_bytes;
          acc[i] = _mm512_fmadd_ps(load16(px, xt, m), w, acc[i]);
        }
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < P; ++i) finish16(a, row, acc[i], ow + i, c, m);
  }
}

template <bool Up, class XType>
void conv_rows(const DepthwiseArgs& a, XType xt, std::int64_t r0, std::int64_t r1) {
  const std::int64_t height = Up ? 2 * a.in_height : a.in_height, width = Up ? 2 * a.in_width : a.in_width;
  const TapRange interior = depthwise_interior(a.out_width, a.stride_w, a.pad_w, a.dilation_w, a.kernel_w, width);
  for (std::int64_t r = r0; r < r1; ++r) {
    const DepthwiseOutputRow row = depthwise_output_row(a, r, height);
    for (std::int64_t ow = 0; ow < a.out_width;) {
      if (ow >= interior.lo && ow + kPixels <= interior.hi) {
        pixels<kPixels, Up>(a, xt, row, ow, {0, a.kernel_w});
        ow += kPixels;
      } else {
        pixels<1, Up>(a, xt, row, ow, depthwise_taps(ow, a.stride_w, a.pad_w, a.dilation_w, a.kernel_w, width));
        ++ow;
      }
    }
  }
  if (a.stream_y) _mm_sfence();
}

}  // namespace

void depthwise_conv(const DepthwiseArgs& a, std::int64_t r0, std::int64_t r1) {
  dispatch_float(a.x_dtype, [&](auto xt) {
    if (a.upsample_nearest2x)
      conv_rows<true>(a, xt, r0, r1);
    else
      conv_rows<false>(a, xt, r0, r1);
  });
}

}  // namespace tessera::kernels::avx512
