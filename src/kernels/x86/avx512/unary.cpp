#include "kernels/x86/avx512/unary_rows.hpp"

namespace tessera::kernels::avx512 {

void unary(const UnaryArgs& a) {
  dispatch_float(a.y_dtype, [&](auto yt) { unary_rows(a, yt); });
}

}  // namespace tessera::kernels::avx512
