#include "kernels/x86/avx512/gated_rows.hpp"

namespace tessera::kernels::avx512 {

void gated(const GatedArgs& a) {
  gated_rows(a, [&](auto f) { dispatch_float(a.y_dtype, f); });
}

}  // namespace tessera::kernels::avx512
