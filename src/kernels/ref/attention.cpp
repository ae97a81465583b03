// The reference attention kernel: one row at a time, two passes over the
// keys (scores, then max-subtracted softmax and the weighted sum of V).
// Same unit contract and output state as the SIMD rows.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/element.hpp"
#include "kernels/attention.hpp"

namespace tessera::kernels::ref {

using tessera::detail::load;
using tessera::detail::store;

void attention(const AttentionArgs& a, std::int64_t t0, std::int64_t t1, const AttentionOutput& out) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const std::int64_t dim = a.head_dim;
  const KvSource& kv = a.kv;
  std::vector<float> logits, q(dim), sums(dim);
  for (std::int64_t r = 0; r < a.rows; ++r) {
    const std::int64_t pos = r / a.group, head = r % a.group;
    const std::int64_t end = a.causal ? std::clamp(pos + a.causal_offset + 1, t0, t1) : t1;
    const std::int64_t q_off = pos * a.q_pos_stride + head * a.q_head_stride;
    for (std::int64_t d = 0; d < dim; ++d) q[d] = load(a.q, a.q_dtype, q_off + d);
    logits.assign(std::size_t(end - t0), 0.0f);
    float m = kNegInf;
    for (std::int64_t t = t0; t < end; ++t) {
      const std::int64_t off = kv_token_offset(kv, t, kv.k_token_stride);
      const float k_scale = kv.dtype == DType::i8 ? kv.k_scale[kv_scale_offset(kv, t)] : 1.0f;
      float dot = 0.0f;
      for (std::int64_t d = 0; d < dim; ++d) dot += q[d] * load(kv.k, kv.dtype, off + d) * k_scale;
      float x = a.scale * dot;
      if (a.softcap > 0.0f) x = a.softcap * std::tanh(x / a.softcap);
      if (a.mask)
        x += load(a.mask, a.mask_dtype, pos * a.mask_pos_stride + head * a.mask_head_stride + t * a.mask_key_stride);
      logits[std::size_t(t - t0)] = x;
      if (x > m) m = x;
    }
    std::fill(sums.begin(), sums.end(), 0.0f);
    float l = 0.0f;
    if (m != kNegInf) {
      for (std::int64_t t = t0; t < end; ++t) {
        const float p = std::exp(logits[std::size_t(t - t0)] - m);
        if (p == 0.0f) continue;
        const std::int64_t off = kv_token_offset(kv, t, kv.v_token_stride);
        const float v_scale = kv.dtype == DType::i8 ? kv.v_scale[kv_scale_offset(kv, t)] : 1.0f;
        for (std::int64_t d = 0; d < dim; ++d) sums[d] += p * load(kv.v, kv.dtype, off + d) * v_scale;
        l += p;
      }
    }
    if (out.partial_o) {
      std::copy(sums.begin(), sums.end(), out.partial_o + r * dim);
      out.partial_m[r] = m;
      out.partial_l[r] = l;
      continue;
    }
    // l is NaN when a logit was: keep it, so the row reads NaN.
    const RowEnd row = row_end(m, l, out.sinks ? out.sinks + head : nullptr);
    const std::int64_t o_off = pos * out.o_pos_stride + head * out.o_head_stride;
    for (std::int64_t d = 0; d < dim; ++d) store(out.o, out.o_dtype, o_off + d, row.inv == 0.0f ? 0.0f : sums[d] * row.inv);
    if (out.lse) out.lse[pos * out.lse_pos_stride + head * out.lse_head_stride] = row.lse;
  }
}

}  // namespace tessera::kernels::ref
