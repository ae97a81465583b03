#pragma once
// One element of a float storage type as f32, for strided (gathered) access
// in the ISA kernels, and pointers n elements on. _cvtsh_ss needs F16C, which every x86 level here has.
// Static (see avx512/vec.hpp): each ISA translation unit keeps its own copy.
#include <immintrin.h>

#include <cstdint>

#include "tessera/core/dtype.hpp"

namespace tessera::kernels {

static inline float load1(const void* base, DType t, std::int64_t i) {
  switch (t) {
    case DType::bf16: {
      const std::uint32_t bits = std::uint32_t(static_cast<const std::uint16_t*>(base)[i]) << 16;
      float f;
      __builtin_memcpy(&f, &bits, 4);
      return f;
    }
    case DType::f16: return _cvtsh_ss(static_cast<const std::uint16_t*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}

static inline const void* advance(const void* p, DType t, std::int64_t n) {
  return static_cast<const char*>(p) + n * bytes_of(t);
}
static inline void* advance(void* p, DType t, std::int64_t n) { return static_cast<char*>(p) + n * bytes_of(t); }

}  // namespace tessera::kernels
