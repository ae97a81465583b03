#pragma once
// Gated elementwise family: y = act(a) * b (+ c) over one run of n elements,
// an operand with stride 0 broadcast along the run. SwiGLU / GeGLU are
// silu / gelu(gate) * up; the seeds' silu(a)·w + bias is the form with c.
// One pass: act(a) never goes to memory.
#include <cstdint>
#include <span>

#include "kernels/activation.hpp"
#include "kernels/tiling.hpp"

namespace tessera::kernels {

struct GatedProblem {
  Act act;
  DType a, b, c, y;                                // c: f32 when there is none
  std::int64_t a_stride, b_stride, c_stride, y_stride;  // inner-run strides; c_stride 0 when there is no c
  std::int64_t n;                                  // elements in the whole op
  // Bytes moved per element of y: an operand that repeats one row for every
  // outer index (silu_mul_add's weight and bias) stays cached and counts none.
  std::int64_t bytes_per_element;
};

struct GatedArgs {
  Act act;
  DType a_dtype, b_dtype, c_dtype, y_dtype;
  std::int64_t n;
  const void* a;
  std::int64_t a_stride;
  const void* b;
  std::int64_t b_stride;
  const void* c;  // nullptr: no c
  std::int64_t c_stride;
  void* y;
  std::int64_t y_stride;
  bool stream_y;  // streaming stores for y (ElementwiseTiling::stream_output)
};

struct GatedFamily {
  using Problem = GatedProblem;
  using Tiling = ElementwiseTiling;
  using Run = void (*)(const GatedArgs&);
};

std::span<const KernelRow<GatedFamily>> rows(GatedFamily);

namespace ref { void gated(const GatedArgs& a); }
namespace avx2 { void gated(const GatedArgs& a); }
namespace avx512 { void gated(const GatedArgs& a); }
namespace avx512_bf16 { void gated(const GatedArgs& a); }

}  // namespace tessera::kernels
