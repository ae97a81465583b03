#include "kernels/im2col.hpp"

#include <cstring>

namespace tessera::kernels {

void im2col_rows(const Im2colGeometry& g, const void* x, std::int64_t p0, std::int64_t rows, void* out, std::int64_t ld) {
  const auto* src = static_cast<const char*>(x);
  auto* dst = static_cast<char*>(out);
  const std::size_t eb = g.element_bytes, run = std::size_t(g.channels) * eb;
  const int shift = g.upsample2x ? 1 : 0;
  // A kernel row's taps are one run of memory when the pixels hold just the
  // group's channels (groups == 1, dense NHWC) and the taps are adjacent
  // pixels: one copy for the row instead of one per tap.
  const bool taps_adjacent = !g.upsample2x && g.dilation_w == 1 && g.x_col_stride == g.channels;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t p = p0 + r, oh = p / g.out_w, ow = p % g.out_w;
    char* row = dst + std::size_t(r * ld) * eb;
    for (std::int64_t kh = 0; kh < g.kernel_h; ++kh) {
      const std::int64_t ih = oh * g.stride_h - g.pad_h + kh * g.dilation_h;
      const bool row_inside = ih >= 0 && ih < g.in_h;
      const std::int64_t iw0 = ow * g.stride_w - g.pad_w;
      if (row_inside && taps_adjacent && iw0 >= 0 && iw0 + g.kernel_w <= g.in_w) {
        std::memcpy(row, src + (ih * g.x_row_stride + iw0 * g.x_col_stride) * std::int64_t(eb), run * std::size_t(g.kernel_w));
        row += run * std::size_t(g.kernel_w);
        continue;
      }
      for (std::int64_t kw = 0; kw < g.kernel_w; ++kw, row += run) {
        const std::int64_t iw = iw0 + kw * g.dilation_w;
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
