#pragma once
// One element at a time, any dtype, as f32: for the reference kernels and
// the comparison of results, where clarity beats speed; and rows of float
// elements with the dtype switched once (load_floats, store_floats).
#include <cstdint>
#include <cstring>

#include "tessera/core/dtype.hpp"

namespace tessera::detail {

inline float load(const void* base, DType t, std::int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(base)[i];
    case DType::bf16: return bf16_to_f32(static_cast<const bf16_t*>(base)[i]);
    case DType::f16: return f16_to_f32(static_cast<const f16_t*>(base)[i]);
    case DType::i8: return static_cast<const std::int8_t*>(base)[i];
    case DType::u8: return static_cast<const std::uint8_t*>(base)[i];
    case DType::i32: return float(static_cast<const std::int32_t*>(base)[i]);
    case DType::i64: return float(static_cast<const std::int64_t*>(base)[i]);
    case DType::i4: {
      const std::uint8_t byte = static_cast<const std::uint8_t*>(base)[i >> 1];
      const int nibble = (i & 1) ? byte >> 4 : byte & 0xf;
      return float(nibble >= 8 ? nibble - 16 : nibble);
    }
  }
  return 0.0f;
}

// Float types only: the ops that store through this check dtypes in plan().
inline void store(void* base, DType t, std::int64_t i, float v) {
  switch (t) {
    case DType::f32: static_cast<float*>(base)[i] = v; break;
    case DType::bf16: static_cast<bf16_t*>(base)[i] = f32_to_bf16(v); break;
    case DType::f16: static_cast<f16_t*>(base)[i] = f32_to_f16(v); break;
    default: break;
  }
}

// `count` elements from i, `step` apart, as f32: the dtype switched once,
// not per element as load() does (for one-time work on whole tensors, such
// as packing weights, where that switch cost several times the rest).
inline void load_floats(const void* base, DType t, std::int64_t i, std::int64_t step, std::int64_t count, float* out) {
  switch (t) {
    case DType::f32: {
      const float* x = static_cast<const float*>(base) + i;
      for (std::int64_t j = 0; j < count; ++j) out[j] = x[j * step];
      return;
    }
    case DType::bf16: {
      const bf16_t* x = static_cast<const bf16_t*>(base) + i;
      for (std::int64_t j = 0; j < count; ++j) out[j] = bf16_to_f32(x[j * step]);
      return;
    }
    default:
      for (std::int64_t j = 0; j < count; ++j) out[j] = load(base, t, i + j * step);
  }
}

// `count` f32 values into consecutive elements from i, the dtype switched once.
inline void store_floats(void* base, DType t, std::int64_t i, const float* in, std::int64_t count) {
  switch (t) {
    case DType::f32: std::memcpy(static_cast<float*>(base) + i, in, std::size_t(count) * sizeof(float)); return;
    case DType::bf16: {
      bf16_t* y = static_cast<bf16_t*>(base) + i;
      for (std::int64_t j = 0; j < count; ++j) y[j] = f32_to_bf16(in[j]);
      return;
    }
    default:
      for (std::int64_t j = 0; j < count; ++j) store(base, t, i + j, in[j]);
  }
}

// An integer element (i8, u8, i32 or i64), exactly: indices (i32 or i64,
// checked in plan()) and the integer side of casts.
inline std::int64_t load_index(const void* base, DType t, std::int64_t i) {
  switch (t) {
    case DType::i8: return static_cast<const std::int8_t*>(base)[i];
    case DType::u8: return static_cast<const std::uint8_t*>(base)[i];
    case DType::i32: return static_cast<const std::int32_t*>(base)[i];
    default: return static_cast<const std::int64_t*>(base)[i];
  }
}

// v into an integer element (i8, u8, i32 or i64) modulo 2^bits, two's
// complement, as C++ converts.
inline void store_int(void* base, DType t, std::int64_t i, std::int64_t v) {
  switch (t) {
    case DType::i8: static_cast<std::int8_t*>(base)[i] = static_cast<std::int8_t>(v); break;
    case DType::u8: static_cast<std::uint8_t*>(base)[i] = static_cast<std::uint8_t>(v); break;
    case DType::i32: static_cast<std::int32_t*>(base)[i] = static_cast<std::int32_t>(v); break;
    default: static_cast<std::int64_t*>(base)[i] = v; break;
  }
}

}  // namespace tessera::detail
