#include "kernels/x86/avx512/group_norm_passes.hpp"

namespace tessera::kernels::avx512_bf16 {

// bf16 y only (see the row's supports()).
void group_norm_run_stats(const GroupNormLines& a, float shift, double* sums) { avx512::run_stats(a, shift, sums); }
void group_norm_column_stats(const GroupNormLines& a, const float* shift, double* sums, float* scratch) {
  avx512::column_stats(a, shift, sums, scratch);
}
void group_norm_apply(const GroupNormLines& a, const GroupNormCoefs& c) { avx512::apply(a, c); }

}  // namespace tessera::kernels::avx512_bf16
