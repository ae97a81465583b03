#include "kernels/x86/avx512/binary_rows.hpp"

namespace tessera::kernels::avx512 {

void binary(const BinaryArgs& a) {
  binary_rows(a, [&](auto f) { dispatch_float(a.y_dtype, f); });
}

}  // namespace tessera::kernels::avx512
