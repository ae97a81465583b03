#pragma once
// The AVX-512 softmax, compiled by avx512/softmax.cpp for every storage type
// and by avx512_bf16/softmax.cpp for bf16 rows, whose conversions that level
// does in one instruction (vec.hpp, to_bf16). Static (the helper types in
// an unnamed namespace), like unary_rows.hpp.
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/softmax.hpp"
#include "kernels/x86/avx512/math.hpp"

namespace tessera::kernels::avx512 {

namespace {

// Rows up to this many columns keep their exps in an L1 buffer between the
// sum and the output pass, so each logit's exp is computed once.
constexpr std::int64_t kBufferedCols = 4096;

// One row's logits, scale * x [+ mask], for x and mask storage types known
// at compile time (std::integral_constant) or read from the arguments, and
// the mask's presence and a scale other than 1 known at compile time.
template <class X, class M, bool Masked, bool Scaled>
struct Row {
  const char* x;
  const char* mask;
  X xt;
  M mt;
  __m512 scale;
  // The same bits in every pass: the max pass compares them, and the sum
  // and output passes subtract that max from them (a product fused into
  // the subtraction would not be the one the max saw: log_softmax of one
  // column gave 1e-8, not 0).
  __m512 logits(std::int64_t c, __mmask16 m) const {
    __m512 l = load16(x + c * bytes_of(xt), xt, m);
    if constexpr (Scaled) l = _mm512_mul_ps(l, scale);
    if constexpr (Masked) l = _mm512_add_ps(l, load16(mask + c * bytes_of(mt), mt, m));
    keep_in_register(l);
    return l;
  }
};

// y's storage type for exp16_for when it is known at compile time; f32 (full
// precision) when read from the arguments.
template <class Y>
constexpr DType out_type() {
  if constexpr (std::is_same_v<Y, DType>) return DType::f32;
  else return Y::value;
}

// exp(d) for d = logit - max <= 0, in lanes m; 0 in the others and below
// exp_floor(normal), where the result would be subnormal (see ExpTiny: rows
// with -inf in their mask ran 7x slower). A NaN d gives NaN, so a NaN
// logit makes the row's sum NaN.
template <DType Out>
static inline __m512 exp_of_logit(__m512 d, __mmask16 m) {
  const __mmask16 normal = _mm512_mask_cmp_ps_mask(m, d, _mm512_set1_ps(exp_floor(ExpTiny::normal)), _CMP_NLT_UQ);
  return _mm512_maskz_mov_ps(normal, exp16_for<Out, ExpArg::nonpositive, ExpTiny::normal>(d));
}

template <bool Masked, bool Scaled, class X, class M, class Y>
void softmax_rows(const SoftmaxArgs& a, X xt, M mt, Y yt, std::int64_t r0, std::int64_t r1) {
  const std::int64_t xs = bytes_of(xt), ys = bytes_of(yt), ms = bytes_of(mt), cols = a.cols;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const bool log = a.log;
  alignas(64) float exps[kBufferedCols];
  for (std::int64_t r = r0; r < r1; ++r) {
    const Row<X, M, Masked, Scaled> row{static_cast<const char*>(a.x) + r * a.x_row_stride * xs,
                                Masked ? static_cast<const char*>(a.mask) + r * a.mask_row_stride * ms : nullptr, xt, mt,
                                _mm512_set1_ps(a.scale)};
    char* y = static_cast<char*>(a.y) + r * a.y_row_stride * ys;
    const std::int64_t visible = a.causal ? std::min(cols, std::max<std::int64_t>(0, r + a.causal_offset + 1)) : cols;

    // Two of each chain, 32 columns per step (the tail 16 at a time), so
    // neither the max's nor the sum's latency bounds a pass. A NaN logit
    // shows in the sum (exp_of_logit); only a row whose max is -inf is
    // searched for one, as it would be empty (all 0) without.
    __m512 vmax0 = _mm512_set1_ps(neg_inf), vmax1 = vmax0;
    const auto max16 = [&](std::int64_t c, __mmask16 m, __m512& vmax) {
      vmax = _mm512_max_ps(vmax, _mm512_mask_mov_ps(_mm512_set1_ps(neg_inf), m, row.logits(c, m)));
    };
    std::int64_t c = 0;
    for (; c + 32 <= visible; c += 32) max16(c, 0xffff, vmax0), max16(c + 16, 0xffff, vmax1);
    for (; c < visible; c += 16) max16(c, tail_mask(visible - c), vmax0);
    const float max = _mm512_reduce_max_ps(_mm512_max_ps(vmax0, vmax1));
    bool nan = false;
    if (max == neg_inf)
      for (c = 0; c < visible && !nan; c += 16) nan = _mm512_mask_fpclass_ps_mask(tail_mask(visible - c), row.logits(c, tail_mask(visible - c)), 0x81);  // QNaN | SNaN
    const bool empty = max == neg_inf && !nan;
    const bool buffered = !log && visible <= kBufferedCols;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0;
    const __m512 vm = _mm512_set1_ps(max);
    // The next row's x is fetched while this one's exps are computed: the
    // first pass would otherwise wait on memory with the core idle, since
    // the hardware prefetcher restarts at every page.
    const char* x_next = r + 1 < r1 ? row.x + a.x_row_stride * xs : nullptr;
    const std::int64_t next_bytes = x_next ? cols * xs : 0;
    std::int64_t fetched = 0;
    // Compiled with and without the exps' buffer, so the loop tests nothing.
    const auto sum_pass = [&](auto to_buffer) {
      const auto sum16 = [&](std::int64_t c, __mmask16 m, __m512& sum) {
        const __m512 e = exp_of_logit<out_type<Y>()>(_mm512_sub_ps(row.logits(c, m), vm), m);
        if constexpr (to_buffer) _mm512_store_ps(exps + c, e);
        sum = _mm512_add_ps(sum, e);
      };
      for (c = 0; c + 32 <= visible; c += 32) {
        for (const std::int64_t end = std::min(next_bytes, fetched + 32 * xs); fetched < end; fetched += 64)
          _mm_prefetch(x_next + fetched, _MM_HINT_T0);
        sum16(c, 0xffff, s0), sum16(c + 16, 0xffff, s1);
      }
      for (; c < visible; c += 16) sum16(c, tail_mask(visible - c), s0);
    };
    if (!empty) {
      if (buffered) sum_pass(std::true_type());
      else sum_pass(std::false_type());
    }
    const float sum = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
    const __m512 inv = _mm512_set1_ps(1.0f / sum);
    const __m512 log_sum = _mm512_set1_ps(log ? float(std::log(double(sum))) : 0.0f);
    const __m512 hidden = _mm512_set1_ps(log ? neg_inf : 0.0f);
    const auto out16 = [&](std::int64_t c) {
      __m512 p = hidden;
      if (c < visible && !empty) {
        const __mmask16 vis = tail_mask(visible - c);
        if (buffered) {
          p = _mm512_mask_mul_ps(hidden, vis, _mm512_load_ps(exps + c), inv);
        } else {
          const __m512 d = _mm512_sub_ps(row.logits(c, vis), vm);
          p = log ? _mm512_mask_sub_ps(hidden, vis, d, log_sum) : _mm512_mask_mul_ps(hidden, vis, exp_of_logit<out_type<Y>()>(d, vis), inv);
        }
      }
      return p;
    };
    // 32 per step: 16-bit y goes out as one 64-byte vector (put32), a whole
    // line per streaming store. Every column visible (the common case):
    // loops with no tests, from the buffer or, for log-softmax, the logits;
    // the general loop's tests were half the instructions of a bf16 row
    // (AMD EPYC, Zen 4).
    c = 0;
    const bool all_visible = visible == cols && !empty;
    if (buffered && all_visible)
      for (; c + 32 <= cols; c += 32)
        put32(y + c * ys, yt, _mm512_mul_ps(_mm512_load_ps(exps + c), inv), _mm512_mul_ps(_mm512_load_ps(exps + c + 16), inv), a.stream_y);
    if (log && all_visible) {
      const auto log_p = [&](std::int64_t c) { return _mm512_sub_ps(_mm512_sub_ps(row.logits(c, 0xffff), vm), log_sum); };
      for (; c + 32 <= cols; c += 32) put32(y + c * ys, yt, log_p(c), log_p(c + 16), a.stream_y);
    }
    for (; c + 32 <= cols; c += 32) put32(y + c * ys, yt, out16(c), out16(c + 16), a.stream_y);
    for (; c < cols; c += 16) {
      const __mmask16 m = tail_mask(cols - c);
      put16(y + c * ys, yt, out16(c), m, a.stream_y);
    }
  }
  if (a.stream_y) _mm_sfence();
}

}  // namespace

// Three passes over an L1-resident row: max (and NaN check), sum of exps
// (kept in a buffer for the next pass), normalized exps (log: logit - max -
// log(sum)); columns past the causal window are written as 0 (log: -inf).
// Unit column strides only (see supports()). The loops are compiled per
// storage type when x, y (and the mask) share one, for the types that
// `each_type(f)` passes to f as std::integral_constant; see unary_rows.hpp.
template <class EachType>
static void softmax_any(const SoftmaxArgs& a, std::int64_t r0, std::int64_t r1, EachType each_type) {
  const auto with_mask = [&](auto... types) {
    dispatch_bool(a.mask, [&](auto masked) {
      dispatch_bool(a.scale != 1.0f, [&](auto scaled) { softmax_rows<masked(), scaled()>(a, types..., r0, r1); });
    });
  };
  if (a.x_dtype == a.y_dtype && (!a.mask || a.mask_dtype == a.x_dtype))
    each_type([&](auto t) { with_mask(t, t, t); });
  else
    with_mask(a.x_dtype, a.mask_dtype, a.y_dtype);
}

}  // namespace tessera::kernels::avx512
