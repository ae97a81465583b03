#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/softmax.hpp"
#include "kernels/x86/avx2/math.hpp"

namespace tessera::kernels::avx2 {

namespace {
// Rows up to this many columns keep their exps in an L1 buffer between the
// sum and the output pass, so each logit's exp is computed once.
constexpr std::int64_t kBufferedCols = 4096;

// One row's logits in log2 units (scale carries log2 e, the mask is scaled
// by it), for x and mask storage types known at compile time
// (std::integral_constant) or read from the arguments.
template <class X, class M>
struct Row {
  const char* x;
  const char* mask;
  X x_dtype;
  M mask_dtype;
  __m256 scale;  // the op's scale times log2 e
  // Logits of columns c .. c + min(n, 8); lanes past n hold -inf, which
  // neither raises the max nor adds to the sum (exp_of_logit(-inf) is 0).
  __m256 logits(std::int64_t c, std::int64_t n) const {
    __m256 l = _mm256_mul_ps(load8_n(x + c * bytes_of(x_dtype), x_dtype, n), scale);
    if (mask) l = _mm256_fmadd_ps(load8_n(mask + c * bytes_of(mask_dtype), mask_dtype, n), _mm256_set1_ps(kLog2e), l);
    return n >= 8 ? l : _mm256_blendv_ps(_mm256_set1_ps(-std::numeric_limits<float>::infinity()), l, lanes_below(n));
  }
  // Logits of columns c .. c + 15, all real: in bf16's own order when x and
  // the mask are bf16 (vec.hpp, load16_unordered), else in order.
  Pair logits16(std::int64_t c) const {
    if constexpr (std::is_same_v<X, std::integral_constant<DType, DType::bf16>>) {
      const Pair v = load16_unordered(x + c * 2, x_dtype);
      Pair l{_mm256_mul_ps(v.lo, scale), _mm256_mul_ps(v.hi, scale)};
      if (mask) {
        const Pair m = load16_unordered(mask + c * 2, mask_dtype);
        const __m256 log2e = _mm256_set1_ps(kLog2e);
        l = {_mm256_fmadd_ps(m.lo, log2e, l.lo), _mm256_fmadd_ps(m.hi, log2e, l.hi)};
      }
      return l;
    } else {
      return {logits(c, 8), logits(c + 8, 8)};
    }
  }
};
// 2^d for d = logit - max <= 0 in log2 units (Row): exp of the logits
// without exp's reduction by ln 2 (math.hpp, exp2_8; f32 softmax of [32,
// 4096] in L2, AMD EPYC Zen 3, 1 thread, best of 200, 3 runs: 0.72-0.74 ->
// 0.64-0.67 ns an element; bench membound --size large, 3 alternating
// runs, ms at 1 / 2 threads: 19.4-19.7 / 10.7-11.3 -> 15.9-18.6 /
// 9.7-10.4, bf16 and log_softmax even). 0 below exp_floor(normal),
// where the result would be subnormal (see ExpTiny: rows with -inf in their
// mask ran 3x slower). To the precision of Out, y's storage type.
template <DType Out>
static inline __m256 exp_of_logit(__m256 d) {
  const __m256 normal = _mm256_cmp_ps(d, _mm256_set1_ps(exp_floor(ExpTiny::normal) * kLog2e), _CMP_GE_OQ);
  return _mm256_and_ps(normal, exp2_8<Out, ExpArg::nonpositive, ExpTiny::normal>(d));
}
}  // namespace

// The AVX-512 row's three passes, 8 lanes wide: max (and NaN check), sum of
// exps (kept in a buffer for the next pass), normalized exps (log: logit -
// max - log(sum)); columns past the
// causal window are written as 0 (log: -inf). Unit column strides only.
// Compiled per storage type when x, y (and the mask) share one, the
// arguments in a local copy (a store through y may alias them).
template <class X, class M, class Y>
static void softmax_rows(const SoftmaxArgs& args, X xt, M mt, Y yt, std::int64_t r0, std::int64_t r1) {
  const SoftmaxArgs a = args;
  const std::int64_t xs = bytes_of(xt), ys = bytes_of(yt), ms = bytes_of(mt);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const __m256 hidden = _mm256_set1_ps(a.log ? neg_inf : 0.0f);
  alignas(32) float exps[kBufferedCols];
  for (std::int64_t r = r0; r < r1; ++r) {
    const Row<X, M> row{static_cast<const char*>(a.x) + r * a.x_row_stride * xs,
                        a.mask ? static_cast<const char*>(a.mask) + r * a.mask_row_stride * ms : nullptr, xt, mt,
                        _mm256_set1_ps(a.scale * kLog2e)};
    char* y = static_cast<char*>(a.y) + r * a.y_row_stride * ys;
    const std::int64_t window = r + a.causal_offset + 1;
    const std::int64_t visible = !a.causal || window > a.cols ? a.cols : window < 0 ? 0 : window;

    // Columns [0, whole) go 16 at a time as Pairs (Row::logits16), the rest
    // 8 at a time, in every pass alike: the exps buffer keeps each one's order.
    const std::int64_t whole = visible / 16 * 16;
    __m256 vmax = _mm256_set1_ps(neg_inf), nan = _mm256_setzero_ps();
    const auto see = [&](__m256 l) {
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(l, l, _CMP_UNORD_Q));
      vmax = _mm256_max_ps(vmax, l);
    };
    for (std::int64_t c = 0; c < whole; c += 16) {
      const Pair l = row.logits16(c);
      see(l.lo);
      see(l.hi);
    }
    for (std::int64_t c = whole; c < visible; c += 8) see(row.logits(c, visible - c));
    const bool has_nan = _mm256_movemask_ps(nan) != 0;
    const float max = hmax(vmax);
    const bool empty = max == neg_inf && !has_nan;
    const __m256 vm = _mm256_set1_ps(max);
    const bool buffered = !a.log && visible <= kBufferedCols;
    // The next row's logits into L2 while this one computes its exps: the
    // max pass, the row's first read, would wait on memory with the
    // arithmetic idle.
    const char* next = r + 1 < r1 ? row.x + a.x_row_stride * xs : nullptr;
    __m256 vsum = _mm256_setzero_ps();
    const auto add_exp = [&](__m256 l, std::int64_t c) {
      const __m256 e = exp_of_logit<out_type<Y>()>(_mm256_sub_ps(l, vm));
      if (buffered) _mm256_store_ps(exps + c, e);
      vsum = _mm256_add_ps(vsum, e);
    };
    for (std::int64_t c = 0; c < visible && !empty; c += c < whole ? 16 : 8) {
      if (next && (c * xs) % 64 == 0) _mm_prefetch(next + c * xs, _MM_HINT_T1);
      if (c < whole) {
        const Pair l = row.logits16(c);
        add_exp(l.lo, c);
        add_exp(l.hi, c + 8);
      } else {
        add_exp(row.logits(c, visible - c), c);
      }
    }
    const float sum = has_nan ? std::numeric_limits<float>::quiet_NaN() : hsum(vsum);
    const __m256 inv = _mm256_set1_ps(1.0f / sum);
    const __m256 log_sum = _mm256_set1_ps(a.log ? float(std::log(double(sum))) : 0.0f);
    // The output of logits l (unbuffered) or of the buffered exps at c.
    const auto out = [&](__m256 l, std::int64_t c) {
      if (buffered) return _mm256_mul_ps(_mm256_load_ps(exps + c), inv);
      const __m256 d = _mm256_sub_ps(l, vm);
      return a.log ? _mm256_fmsub_ps(d, _mm256_set1_ps(kLn2), log_sum) : _mm256_mul_ps(exp_of_logit<out_type<Y>()>(d), inv);
    };
    std::int64_t c = 0;
    if (!empty)
      for (; c < whole; c += 16) {
        const Pair l = buffered ? Pair{} : row.logits16(c);
        const Pair p{out(l.lo, c), out(l.hi, c + 8)};
        if constexpr (std::is_same_v<Y, std::integral_constant<DType, DType::bf16>>) {
          put16_unordered(y + c * ys, yt, p, false);  // bf16 y: arithmetic_bound, never streamed
        } else {
          put8_n(y + c * ys, yt, p.lo, 8, a.stream_y);
          put8_n(y + (c + 8) * ys, yt, p.hi, 8, a.stream_y);
        }
      }
    for (; c < a.cols; c += 8) {
      __m256 p = hidden;
      if (c < visible && !empty) {
        p = out(buffered ? _mm256_setzero_ps() : row.logits(c, visible - c), c);
        // A NaN row's sum would make the hidden lanes NaN too.
        if (visible - c < 8) p = _mm256_blendv_ps(hidden, p, lanes_below(visible - c));
      }
      put8_n(y + c * ys, yt, p, a.cols - c, a.stream_y);
    }
  }
  if (a.stream_y) _mm_sfence();
}

void softmax(const SoftmaxArgs& a, std::int64_t r0, std::int64_t r1) {
  if (a.x_dtype == a.y_dtype && (!a.mask || a.mask_dtype == a.x_dtype))
    dispatch_float(a.x_dtype, [&](auto t) { softmax_rows(a, t, t, t, r0, r1); });
  else
    softmax_rows(a, a.x_dtype, a.mask_dtype, a.y_dtype, r0, r1);
}

}  // namespace tessera::kernels::avx2
