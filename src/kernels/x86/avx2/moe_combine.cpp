// MoE combine over whole rows: per token, its k slots' rows of y and
// weights, then 32 features at a time, each a chain of k FMAs in f32 (four
// chains in flight), stored in out's type.
#include <algorithm>
#include <vector>

#include "core/element.hpp"
#include "kernels/moe.hpp"
#include "kernels/x86/avx2/vec.hpp"

namespace tessera::kernels::avx2 {

void moe_combine(const MoeCombineArgs& a, std::int64_t t0, std::int64_t t1) {
  std::vector<const char*> rows(std::size_t(a.k));
  std::vector<float> weights(std::size_t(a.k));
  dispatch_float(a.y_dtype, [&](auto yt) {
    dispatch_float(a.out_dtype, [&](auto ot) {
      constexpr std::int64_t ys = bytes_of(yt), os = bytes_of(ot);
      for (std::int64_t t = t0; t < t1; ++t) {
        for (std::int64_t j = 0; j < a.k; ++j) {
          const std::int64_t row =
              tessera::detail::load_index(a.positions, a.positions_dtype, t * a.p_token_stride + j * a.p_slot_stride);
          rows[std::size_t(j)] = static_cast<const char*>(a.y) + row * a.y_row_stride * ys;
          weights[std::size_t(j)] = tessera::detail::load(a.weights, a.weights_dtype, t * a.w_token_stride + j * a.w_slot_stride);
        }
        char* out = static_cast<char*>(a.out) + t * a.out_row_stride * os;
        std::int64_t c = 0;
        for (; c + 32 <= a.hidden; c += 32) {
          __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
          for (std::int64_t j = 0; j < a.k; ++j) {
            const __m256 w = _mm256_broadcast_ss(&weights[std::size_t(j)]);
            for (int v = 0; v < 4; ++v) acc[v] = _mm256_fmadd_ps(w, load8(rows[std::size_t(j)] + (c + 8 * v) * ys, yt), acc[v]);
          }
          for (int v = 0; v < 4; ++v) store8(out + (c + 8 * v) * os, ot, acc[v]);
        }
        for (; c < a.hidden; c += 8) {
          const std::int64_t n = std::min<std::int64_t>(8, a.hidden - c);
          __m256 acc = _mm256_setzero_ps();
          for (std::int64_t j = 0; j < a.k; ++j)
            acc = _mm256_fmadd_ps(_mm256_broadcast_ss(&weights[std::size_t(j)]), load8_n(rows[std::size_t(j)] + c * ys, yt, n), acc);
          store8_n(out + c * os, ot, acc, n);
        }
      }
    });
  });
}

}  // namespace tessera::kernels::avx2
