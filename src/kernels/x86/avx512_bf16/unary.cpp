#include "kernels/x86/avx512/unary_rows.hpp"

namespace tessera::kernels::avx512_bf16 {

// bf16 outputs only (see the row's supports()).
void unary(const UnaryArgs& a) { avx512::unary_rows(a, std::integral_constant<DType, DType::bf16>{}); }

}  // namespace tessera::kernels::avx512_bf16
