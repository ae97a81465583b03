#pragma once
// Unary elementwise family: y = act(x) over one contiguous-or-strided run of
// n elements, converting storage types on the way (f32, f16, bf16; compute in
// f32). Act::none with x.dtype != y.dtype is the cast.
#include <cstdint>
#include <span>

#include "kernels/activation.hpp"
#include "kernels/tiling.hpp"

namespace tessera::kernels {

struct UnaryProblem {
  Act act;
  DType x, y;
  std::int64_t x_stride, y_stride;  // inner-run strides, elements
  std::int64_t n;                   // elements in the whole op
};

struct UnaryArgs {
  Act act;
  DType x_dtype, y_dtype;
  std::int64_t n;
  const void* x;
  std::int64_t x_stride;
  void* y;
  std::int64_t y_stride;
  bool stream_y;  // streaming stores for y (ElementwiseTiling::stream_output)
};

struct UnaryFamily {
  using Problem = UnaryProblem;
  using Tiling = ElementwiseTiling;
  using Run = void (*)(const UnaryArgs&);
};

std::span<const KernelRow<UnaryFamily>> rows(UnaryFamily);

namespace ref { void unary(const UnaryArgs& a); }
namespace avx2 { void unary(const UnaryArgs& a); }
namespace avx512 { void unary(const UnaryArgs& a); }
namespace avx512_bf16 { void unary(const UnaryArgs& a); }

}  // namespace tessera::kernels
