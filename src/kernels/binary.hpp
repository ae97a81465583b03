#pragma once
// Binary elementwise family: y = a (op) b over one run of n elements; an
// operand with stride 0 is broadcast along the run.
#include <cstdint>
#include <span>

#include "kernels/unary.hpp"

namespace tessera::kernels {

// max and min propagate NaN (as torch.maximum does), unlike the SIMD max/min instructions.
enum class BinaryKind { add, sub, mul, div, max, min };

struct BinaryProblem {
  BinaryKind kind;
  DType a, b, y;
  std::int64_t a_stride, b_stride, y_stride;
  std::int64_t n;  // elements in the whole op
};

struct BinaryArgs {
  BinaryKind kind;
  DType a_dtype, b_dtype, y_dtype;
  std::int64_t n;
  const void* a;
  std::int64_t a_stride;
  const void* b;
  std::int64_t b_stride;
  void* y;
  std::int64_t y_stride;
  bool stream_y;  // streaming stores for y (ElementwiseTiling::stream_output)
};

struct BinaryFamily {
  using Problem = BinaryProblem;
  using Tiling = ElementwiseTiling;
  using Run = void (*)(const BinaryArgs&);
};

std::span<const KernelRow<BinaryFamily>> rows(BinaryFamily);

namespace ref { void binary(const BinaryArgs& a); }
namespace avx2 { void binary(const BinaryArgs& a); }
namespace avx512 { void binary(const BinaryArgs& a); }
namespace avx512_bf16 { void binary(const BinaryArgs& a); }

}  // namespace tessera::kernels
