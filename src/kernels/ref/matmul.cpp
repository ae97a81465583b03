#include <vector>

#include "kernels/matmul.hpp"
#include "core/element.hpp"

namespace tessera::kernels::ref {

using namespace tessera::detail;  // load / store / load_index

// f64 accumulation, i-k-j order so the inner loop walks a row of B and C.
void matmul(const MatmulArgs& a, std::int64_t m0, std::int64_t m1, std::int64_t n0, std::int64_t n1) {
  std::vector<double> acc(std::size_t(n1 - n0));
  for (std::int64_t m = m0; m < m1; ++m) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (std::int64_t k = 0; k < a.k; ++k) {
      const double av = load(a.a, a.a_dtype, m * a.a_row_stride + k * a.a_col_stride);
      const std::int64_t bo = k * a.b_row_stride;
      for (std::int64_t n = n0; n < n1; ++n) acc[std::size_t(n - n0)] += av * load(a.b, a.b_dtype, bo + n * a.b_col_stride);
    }
    for (std::int64_t n = n0; n < n1; ++n)
      store(a.c, a.c_dtype, m * a.c_row_stride + n * a.c_col_stride, float(acc[std::size_t(n - n0)]));
  }
}

}  // namespace tessera::kernels::ref
