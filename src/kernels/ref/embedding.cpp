#include "kernels/embedding.hpp"
#include "core/element.hpp"

namespace tessera::kernels::ref {

using namespace tessera::detail;  // load / store / load_index

void embedding(const EmbeddingArgs& a, std::int64_t i0, std::int64_t i1) {
  for (std::int64_t i = i0; i < i1; ++i) {
    const std::int64_t row = load_index(a.ids, a.ids_dtype, i * a.ids_stride);
    for (std::int64_t c = 0; c < a.cols; ++c)
      store(a.out, a.table_dtype, i * a.out_row_stride + c * a.out_col_stride,
            load(a.table, a.table_dtype, row * a.table_row_stride + c * a.table_col_stride));
  }
}

}  // namespace tessera::kernels::ref
