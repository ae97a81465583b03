#include "kernels/x86/avx512/resize_rows.hpp"

namespace tessera::kernels::avx512 {

void resize(const ResizeArgs& a, std::int64_t r0, std::int64_t r1) {
  resize_planes(a, r0, r1, [](DType t, auto&& f) { dispatch_float(t, f); });
}

}  // namespace tessera::kernels::avx512
