#include <cmath>
#include <limits>

#include "kernels/softmax.hpp"
#include "kernels/x86/avx512/vec.hpp"

namespace tessera::kernels::avx512 {

namespace {
struct Row {
  const char* x;
  const char* mask;
  DType x_dtype, mask_dtype;
  __m512 scale;
  std::int64_t xs, ms;  // element sizes
  __m512 logits(std::int64_t c, __mmask16 m) const {
    __m512 l = _mm512_mul_ps(load16(x + c * xs, x_dtype, m), scale);
    if (mask) l = _mm512_add_ps(l, load16(mask + c * ms, mask_dtype, m));
    return l;
  }
};
}  // namespace

// Three passes over an L1-resident row: max (and NaN check), sum of exps,
// normalized exps (log: logit - max - log(sum)); columns past the causal
// window are written as 0 (log: -inf). Unit column strides only (see
// supports()).
void softmax(const SoftmaxArgs& a, std::int64_t r0, std::int64_t r1) {
  const std::int64_t xs = bytes_of(a.x_dtype), ys = bytes_of(a.y_dtype), ms = bytes_of(a.mask_dtype);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (std::int64_t r = r0; r < r1; ++r) {
    const Row row{static_cast<const char*>(a.x) + r * a.x_row_stride * xs,
                  a.mask ? static_cast<const char*>(a.mask) + r * a.mask_row_stride * ms : nullptr,
                  a.x_dtype, a.mask_dtype, _mm512_set1_ps(a.scale), xs, ms};
    char* y = static_cast<char*>(a.y) + r * a.y_row_stride * ys;
    const std::int64_t visible =
        a.causal ? std::min(a.cols, std::max<std::int64_t>(0, r + a.causal_offset + 1)) : a.cols;

    __m512 vmax = _mm512_set1_ps(neg_inf);
    __mmask16 nan = 0;
    for (std::int64_t c = 0; c < visible; c += 16) {
      const __mmask16 m = tail_mask(visible - c);
      const __m512 l = _mm512_mask_mov_ps(_mm512_set1_ps(neg_inf), m, row.logits(c, m));
      nan |= _mm512_cmp_ps_mask(l, l, _CMP_UNORD_Q);
      vmax = _mm512_max_ps(vmax, l);
    }
    const float max = _mm512_reduce_max_ps(vmax);
    const bool empty = max == neg_inf && nan == 0;
    __m512 vsum = _mm512_setzero_ps();
    const __m512 vm = _mm512_set1_ps(max);
    for (std::int64_t c = 0; c < visible && !empty; c += 16) {
      const __mmask16 m = tail_mask(visible - c);
      vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(row.logits(c, m), vm))));
    }
    const float sum = nan ? std::numeric_limits<float>::quiet_NaN() : _mm512_reduce_add_ps(vsum);
    const __m512 inv = _mm512_set1_ps(1.0f / sum);
    const __m512 log_sum = _mm512_set1_ps(a.log ? float(std::log(double(sum))) : 0.0f);
    const __m512 hidden = _mm512_set1_ps(a.log ? neg_inf : 0.0f);
    for (std::int64_t c = 0; c < a.cols; c += 16) {
      const __mmask16 m = tail_mask(a.cols - c);
      __m512 p = hidden;
      if (c < visible && !empty) {
        const __mmask16 vis = tail_mask(visible - c);
        const __m512 d = _mm512_sub_ps(row.logits(c, vis), vm);
        p = a.log ? _mm512_mask_sub_ps(hidden, vis, d, log_sum) : _mm512_mask_mul_ps(hidden, vis, exp16(d), inv);
      }
      store16(y + c * ys, a.y_dtype, p, m);
    }
  }
}

}  // namespace tessera::kernels::avx512
