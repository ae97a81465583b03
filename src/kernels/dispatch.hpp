#pragma once
// Storage-type and flag dispatch for kernel loops (no intrinsics: every ISA level uses
// it, as activation.hpp's dispatch_act).
#include <cstdint>
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

// Calls f(std::true_type{}) or f(std::false_type{}) as b is true or false,
// so a loop can be compiled with and without an optional operand or step
// instead of testing for it per vector.
template <class F>
inline void dispatch_bool(bool b, F&& f) {
  if (b) return f(std::true_type{});
  return f(std::false_type{});
}

// Calls f(std::integral_constant<int, n>{}) for 1 <= n <= Max, so a kernel
// can take a run-time count (the rows of a last, short tile) as a
// compile-time one.
template <int Max, class F>
inline void dispatch_count(std::int64_t n, F&& f) {
  if constexpr (Max > 1)
    if (n < Max) return dispatch_count<Max - 1>(n, f);
  f(std::integral_constant<int, Max>{});
}

}  // namespace tessera::kernels
