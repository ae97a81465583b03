#include <cstring>

#include "core/element.hpp"
#include "kernels/reorder.hpp"

namespace tessera::kernels::ref {

void reorder(const ReorderArgs& a) {
  const auto* x = static_cast<const char*>(a.x);
  auto* y = static_cast<char*>(a.y);
  if (a.x_dtype == a.y_dtype) {
    // One dtype: its bytes, unchanged (exact for integers and NaN payloads alike).
    const std::int64_t size = bytes_of(a.x_dtype);
    for (std::int64_t r = 0; r < a.rows; ++r)
      for (std::int64_t c = 0; c < a.cols; ++c)
        std::memcpy(y + (r * a.y_row_stride + c * a.y_col_stride) * size,
                    x + (r * a.x_row_stride + c * a.x_col_stride) * size, std::size_t(size));
    return;
  }
  for (std::int64_t r = 0; r < a.rows; ++r)
    for (std::int64_t c = 0; c < a.cols; ++c)
      tessera::detail::store(y, a.y_dtype, r * a.y_row_stride + c * a.y_col_stride,
                             tessera::detail::load(x, a.x_dtype, r * a.x_row_stride + c * a.x_col_stride));
}

}  // namespace tessera::kernels::ref
