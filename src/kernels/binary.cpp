#include "kernels/binary.hpp"

namespace tessera::kernels {

namespace {
bool unit_or_broadcast(std::int64_t s) { return s == 0 || s == 1; }
bool vector_friendly(const BinaryProblem& p) {
  return is_floating(p.a) && is_floating(p.b) && is_floating(p.y) && unit_or_broadcast(p.a_stride) &&
         unit_or_broadcast(p.b_stride) && p.y_stride == 1;
}
bool vector_friendly_to_bf16(const BinaryProblem& p) { return vector_friendly(p) && p.y == DType::bf16; }
ElementwiseTiling tiling(const BinaryProblem& p, const hw::Info& hw) {
  return elementwise_tiling(p.n, bytes_of(p.a) + bytes_of(p.b) + bytes_of(p.y), hw);
}
}  // namespace

std::span<const KernelRow<BinaryFamily>> rows(BinaryFamily) {
  static const KernelRow<BinaryFamily> kRows[] = {
      {"binary_avx512_bf16", hw::Isa::avx512_bf16, vector_friendly_to_bf16, tiling, avx512_bf16::binary},
      {"binary_avx512", hw::Isa::avx512, vector_friendly, tiling, avx512::binary},
      {"binary_avx2", hw::Isa::avx2, vector_friendly, tiling, avx2::binary},
      {"binary_ref", hw::Isa::scalar, supports_all, tiling, ref::binary},
  };
  return kRows;
}

}  // namespace tessera::kernels
