#include "kernels/group_norm.hpp"

#include "kernels/activation.hpp"

namespace tessera::kernels {

namespace {
bool unit_stride(const GroupNormProblem& p) { return p.unit_stride; }
bool bf16_output(const GroupNormProblem& p) { return p.unit_stride && p.y == DType::bf16; }
// Vector instructions per 16 elements (tiling.hpp, arithmetic_bound): the
// statistics' load, subtract, add and FMA, the apply's load, subtract, FMA
// and store, and the conversions; the SiLU on top.
constexpr int kGroupNormWork = 10;
ElementwiseTiling group_norm_tiling(const GroupNormProblem& p, const hw::Info& hw) {
  return elementwise_tiling(p.numel, p.bytes_per_element, hw, kGroupNormWork + (p.silu ? act_work(Act::silu) : 0));
}
}  // namespace

std::span<const KernelRow<GroupNormFamily>> rows(GroupNormFamily) {
  static const KernelRow<GroupNormFamily> kRows[] = {
      {"group_norm_avx512_bf16", hw::Isa::avx512_bf16, bf16_output, group_norm_tiling,
       {avx512_bf16::group_norm_run_stats, avx512_bf16::group_norm_column_stats, avx512_bf16::group_norm_apply}},
      {"group_norm_avx512", hw::Isa::avx512, unit_stride, group_norm_tiling,
       {avx512::group_norm_run_stats, avx512::group_norm_column_stats, avx512::group_norm_apply}},
      {"group_norm_avx2", hw::Isa::avx2, unit_stride, group_norm_tiling,
       {avx2::group_norm_run_stats, avx2::group_norm_column_stats, avx2::group_norm_apply}},
      {"group_norm_ref", hw::Isa::scalar, supports_all, group_norm_tiling,
       {ref::group_norm_run_stats, ref::group_norm_column_stats, ref::group_norm_apply}},
  };
  return kRows;
}

}  // namespace tessera::kernels
