#include "kernels/x86/avx512/resize_rows.hpp"

namespace tessera::kernels::avx512_bf16 {

// bf16 only (see the row's supports()).
void resize(const ResizeArgs& a, std::int64_t r0, std::int64_t r1) {
  avx512::resize_planes(a, r0, r1, [](DType, auto&& f) { f(std::integral_constant<DType, DType::bf16>{}); });
}

}  // namespace tessera::kernels::avx512_bf16
