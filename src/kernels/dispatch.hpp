#pragma once
// Storage-type dispatch for kernel loops (no intrinsics: every ISA level uses
// it, as activation.hpp's dispatch_act).
#include <type_traits>

#include "tessera/core/dtype.hpp"

namespace tessera::kernels {

// Calls f(std::integral_constant<DType, T>{}) for a float storage type t, so
// a kernel's loop can be compiled per type, with no switch inside it.
template <class F>
inline void dispatch_float(DType t, F&& f) {
  switch (t) {
    case DType::bf16: return f(std::integral_constant<DType, DType::bf16>{});
    case DType::f16: return f(std::integral_constant<DType, DType::f16>{});
    default: return f(std::integral_constant<DType, DType::f32>{});
  }
}

}  // namespace tessera::kernels
