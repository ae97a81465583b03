#include "kernels/gated.hpp"

namespace tessera::kernels {

namespace {
bool unit_or_broadcast(std::int64_t s) { return s == 0 || s == 1; }
bool vector_friendly(const GatedProblem& p) {
  return is_floating(p.a) && is_floating(p.b) && is_floating(p.c) && is_floating(p.y) && unit_or_broadcast(p.a_stride) &&
         unit_or_broadcast(p.b_stride) && unit_or_broadcast(p.c_stride) && p.y_stride == 1;
}
bool vector_friendly_to_bf16(const GatedProblem& p) { return vector_friendly(p) && p.y == DType::bf16; }
// The activation's work and a multiply and add, so that silu or gelu times
// a cached row plus another (silu_mul_add) keeps plain stores past the L3:
// streaming, it ran 1.07-1.22x the time (AMD EPYC Turin, bench membound
// large, f32 and bf16, 1 and 2 threads, alternating); swiglu, three streams,
// within 5 % either way.
ElementwiseTiling tiling(const GatedProblem& p, const hw::Info& hw) {
  return elementwise_tiling(p.n, p.bytes_per_element, hw, act_work(p.act) + 4);
}
}  // namespace

std::span<const KernelRow<GatedFamily>> rows(GatedFamily) {
  static const KernelRow<GatedFamily> kRows[] = {
      {"gated_avx512_bf16", hw::Isa::avx512_bf16, vector_friendly_to_bf16, tiling, avx512_bf16::gated},
      {"gated_avx512", hw::Isa::avx512, vector_friendly, tiling, avx512::gated},
      {"gated_avx2", hw::Isa::avx2, vector_friendly, tiling, avx2::gated},
      {"gated_ref", hw::Isa::scalar, supports_all, tiling, ref::gated},
  };
  return kRows;
}

}  // namespace tessera::kernels
