// The reference top-k: every element of a row read into f32, the first k
// of the row's indices in the family's order (a partial sort), then their
// elements' own bytes and indices stored.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/element.hpp"
#include "kernels/topk.hpp"

namespace tessera::kernels::ref {

namespace {
// Whether element (a, ia) ranks before (b, ib).
bool ranks_before(float a, std::int64_t ia, float b, std::int64_t ib, bool largest) {
  const bool an = std::isnan(a), bn = std::isnan(b);
  if (an || bn) return an && bn ? ia < ib : an == largest;
  if (a != b) return largest ? a > b : a < b;
  return ia < ib;
}
}  // namespace

void top_k(const TopKArgs& a) {
  const std::int64_t es = bytes_of(a.x_dtype);
  std::vector<float> v(std::size_t(a.length));
  std::vector<std::int64_t> order(std::size_t(a.length));
  for (std::int64_t j = 0; j < a.n; ++j) {
    const auto* x = static_cast<const char*>(a.x) + j * a.x_stride * es;
    for (std::int64_t r = 0; r < a.length; ++r) v[std::size_t(r)] = tessera::detail::load(x, a.x_dtype, r * a.x_step);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + a.k, order.end(), [&](std::int64_t p, std::int64_t q) {
      return ranks_before(v[std::size_t(p)], p, v[std::size_t(q)], q, a.largest);
    });
    auto* values = static_cast<char*>(a.values) + j * a.v_stride * es;
    for (std::int64_t i = 0; i < a.k; ++i) {
      const std::int64_t r = order[std::size_t(i)];
      std::memcpy(values + i * a.v_step * es, x + r * a.x_step * es, std::size_t(es));
      tessera::detail::store_int(a.indices, a.index_dtype, j * a.i_stride + i * a.i_step, r);
    }
  }
}

}  // namespace tessera::kernels::ref
