#include "kernels/im2col.hpp"

#include <cstring>

namespace tessera::kernels {

void im2col_rows(const Im2colGeometry& g, const void* x, std::int64_t p0, std::int64_t rows, void* out, std::int64_t ld) {
  const auto* src = static_cast<const char*>(x);
  auto* dst = static_cast<char*>(out);
  const std::size_t eb = g.element_bytes, run = std::size_t(g.channels) * eb;
  const int shift = g.upsample2x ? 1 : 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t p = p0 + r, oh = p / g.out_w, ow = p % g.out_w;
    char* row = dst + std::size_t(r * ld) * eb;
    for (std::int64_t kh = 0; kh < g.kernel_h; ++kh) {
      const std::int64_t ih = oh * g.stride_h - g.pad_h + kh * g.dilation_h;
      const bool row_inside = ih >= 0 && ih < g.in_h;
      for (std::int64_t kw = 0; kw < g.kernel_w; ++kw, row += run) {
        const std::int64_t iw = ow * g.stride_w - g.pad_w + kw * g.dilation_w;
        if (!row_inside || iw < 0 || iw >= g.in_w) {
          std::memset(row, 0, run);
          continue;
        }
        const std::int64_t at = (ih >> shift) * g.x_row_stride + (iw >> shift) * g.x_col_stride;
        std::memcpy(row, src + at * std::int64_t(eb), run);
      }
    }
  }
}

}  // namespace tessera::kernels
