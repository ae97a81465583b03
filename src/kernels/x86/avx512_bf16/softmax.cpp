#include "kernels/x86/avx512/softmax_rows.hpp"

namespace tessera::kernels::avx512_bf16 {

// bf16 rows only (see the row's supports()).
void softmax(const SoftmaxArgs& a, std::int64_t r0, std::int64_t r1) {
  avx512::softmax_any(a, r0, r1, [](auto f) { f(std::integral_constant<DType, DType::bf16>{}); });
}

}  // namespace tessera::kernels::avx512_bf16
