#include "kernels/quantize.hpp"

namespace tessera::kernels {

namespace {
bool is_small_int(DType t) { return t == DType::i8 || t == DType::u8 || t == DType::i4; }
// The SIMD rows: unit strides along the run, i4 runs starting on a byte, and
// 8- or 4-bit integers (i32 dequantization stays on the reference).
bool quantize_vectorizable(const QuantProblem& p) { return p.unit_stride && p.byte_aligned && is_small_int(p.y); }
bool dequantize_vectorizable(const QuantProblem& p) { return p.unit_stride && p.byte_aligned && is_small_int(p.x); }
// Vector instructions per 16 elements (tiling.hpp, arithmetic_bound):
// scaling, rounding, saturating and packing, or unpacking and scaling.
constexpr int kQuantizeWork = 12, kDequantizeWork = 8;
ElementwiseTiling tiling(const QuantProblem& p, const hw::Info& hw) {
  return elementwise_tiling(p.n, bytes_of(p.x) + bytes_of(p.y), hw, is_small_int(p.y) ? kQuantizeWork : kDequantizeWork);
}
}  // namespace

std::span<const KernelRow<QuantizeFamily>> rows(QuantizeFamily) {
  static const KernelRow<QuantizeFamily> kRows[] = {
      {"quantize_avx512", hw::Isa::avx512, quantize_vectorizable, tiling, avx512::quantize},
      {"quantize_avx2", hw::Isa::avx2, quantize_vectorizable, tiling, avx2::quantize},
      {"quantize_ref", hw::Isa::scalar, supports_all, tiling, ref::quantize},
  };
  return kRows;
}

std::span<const KernelRow<DequantizeFamily>> rows(DequantizeFamily) {
  static const KernelRow<DequantizeFamily> kRows[] = {
      {"dequantize_avx512", hw::Isa::avx512, dequantize_vectorizable, tiling, avx512::dequantize},
      {"dequantize_avx2", hw::Isa::avx2, dequantize_vectorizable, tiling, avx2::dequantize},
      {"dequantize_ref", hw::Isa::scalar, supports_all, tiling, ref::dequantize},
  };
  return kRows;
}

}  // namespace tessera::kernels
