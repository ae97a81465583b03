#include "kernels/x86/avx512/binary_rows.hpp"

namespace tessera::kernels::avx512_bf16 {

// bf16 outputs only (see the row's supports()).
void binary(const BinaryArgs& a) {
  avx512::binary_rows(a, [](auto f) { f(std::integral_constant<DType, DType::bf16>{}); });
}

}  // namespace tessera::kernels::avx512_bf16
