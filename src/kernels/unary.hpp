#pragma once
// Unary elementwise family: y = f(x) over one contiguous-or-strided run of
// n elements, converting storage types on the way (f32, f16, bf16; compute in
// f32). identity with x.dtype != y.dtype is the cast.
#include <cstdint>
#include <span>

#include "kernels/registry.hpp"
#include "tessera/core/dtype.hpp"

namespace tessera::kernels {

enum class UnaryKind { identity, silu };

struct UnaryProblem {
  UnaryKind kind;
  DType x, y;
  std::int64_t x_stride, y_stride;  // inner-run strides, elements
  std::int64_t n;                   // elements in the whole op
};

struct UnaryArgs {
  UnaryKind kind;
  DType x_dtype, y_dtype;
  std::int64_t n;
  const void* x;
  std::int64_t x_stride;
  void* y;
  std::int64_t y_stride;
};

struct ElementwiseTiling {
  std::int64_t grain;  // elements per task
};

struct UnaryFamily {
  using Problem = UnaryProblem;
  using Tiling = ElementwiseTiling;
  using Run = void (*)(const UnaryArgs&);
};

std::span<const KernelRow<UnaryFamily>> rows(UnaryFamily);
// Elements per task for an op over n elements moving bytes_per_element each.
ElementwiseTiling elementwise_tiling(std::int64_t n, std::int64_t bytes_per_element, const hw::Info& hw);

namespace ref { void unary(const UnaryArgs& a); }
namespace avx2 { void unary(const UnaryArgs& a); }
namespace avx512 { void unary(const UnaryArgs& a); }

}  // namespace tessera::kernels
