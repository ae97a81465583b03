#include "kernels/x86/avx512/norm_rows.hpp"

namespace tessera::kernels::avx512 {

void norm(const NormArgs& a, std::int64_t r0, std::int64_t r1) {
  with_norm_types(a, [&](auto xt, auto vt, auto yt) { norm_rows(a, xt, vt, yt, r0, r1); });
}

}  // namespace tessera::kernels::avx512
