#include "kernels/x86/avx512/norm_rows.hpp"

namespace tessera::kernels::avx512_bf16 {

// bf16 y only (see the row's supports()).
void norm(const NormArgs& a, std::int64_t r0, std::int64_t r1) {
  with_norm_types(a, [&](auto xt, auto vt, auto yt) { avx512::norm_rows(a, xt, vt, yt, r0, r1); });
}

}  // namespace tessera::kernels::avx512_bf16
