#include "kernels/x86/avx512/softmax_rows.hpp"

namespace tessera::kernels::avx512 {

void softmax(const SoftmaxArgs& a, std::int64_t r0, std::int64_t r1) {
  softmax_any(a, r0, r1, [&](auto f) { dispatch_float(a.x_dtype, f); });
}

}  // namespace tessera::kernels::avx512
