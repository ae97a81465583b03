#pragma once
// The AVX-512 binary loop, compiled by avx512/binary.cpp for every output
// type and by avx512_bf16/binary.cpp for bf16 outputs, whose conversions
// that level does in one instruction (vec.hpp, to_bf16).
#include <type_traits>

#include "kernels/binary.hpp"
#include "kernels/x86/avx512/vec.hpp"

namespace tessera::kernels::avx512 {

template <BinaryKind K>
static inline __m512 apply(__m512 x, __m512 y) {
  if constexpr (K == BinaryKind::add) return _mm512_add_ps(x, y);
  if constexpr (K == BinaryKind::sub) return _mm512_sub_ps(x, y);
  if constexpr (K == BinaryKind::mul) return _mm512_mul_ps(x, y);
  if constexpr (K == BinaryKind::div) return _mm512_div_ps(x, y);
  // max/min return their second operand when either is NaN: x + y puts the NaN back.
  const __m512 r = K == BinaryKind::max ? _mm512_max_ps(x, y) : _mm512_min_ps(x, y);
  return _mm512_mask_add_ps(r, _mm512_cmp_ps_mask(x, y, _CMP_UNORD_Q), x, y);
}

// The loop for storage types known at compile time (T) or read from the
// arguments (run-time DType values), its operands in locals: see unary_rows.hpp.
template <BinaryKind K, class A, class B, class Y>
static void run(const BinaryArgs& a, A at, B bt, Y yt) {
  const char* pa = static_cast<const char*>(a.a);
  const char* pb = static_cast<const char*>(a.b);
  char* py = static_cast<char*>(a.y);
  const std::int64_t n = a.n, as = a.a_stride * bytes_of(at), bs = a.b_stride * bytes_of(bt), ys = bytes_of(yt);
  const bool stream = a.stream_y;
  const __m512 av0 = _mm512_set1_ps(_mm512_cvtss_f32(load16(pa, at, 1)));
  const __m512 bv0 = _mm512_set1_ps(_mm512_cvtss_f32(load16(pb, bt, 1)));
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32) {  // two vectors per step, no masks
    const __m512 x0 = as ? load16(pa + i * as, at, 0xffff) : av0, x1 = as ? load16(pa + (i + 16) * as, at, 0xffff) : av0;
    const __m512 y0 = bs ? load16(pb + i * bs, bt, 0xffff) : bv0, y1 = bs ? load16(pb + (i + 16) * bs, bt, 0xffff) : bv0;
    put32(py + i * ys, yt, apply<K>(x0, y0), apply<K>(x1, y1), stream);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 x = as ? load16(pa + i * as, at, m) : av0;
    const __m512 y = bs ? load16(pb + i * bs, bt, m) : bv0;
    put16(py + i * ys, yt, apply<K>(x, y), m, stream);
  }
  if (stream) _mm_sfence();
}

// The common case, a, b and y of one type, is compiled per type; mixed types
// take the generic loop. `y_types` calls its argument with y's storage type.
template <BinaryKind K, class YTypes>
static void run(const BinaryArgs& a, YTypes y_types) {
  y_types([&](auto yt) {
    if (a.a_dtype == yt && a.b_dtype == yt)
      run<K>(a, yt, yt, yt);
    else
      run<K>(a, a.a_dtype, a.b_dtype, yt);
  });
}

// Operand strides are 0 (broadcast scalar) or 1; y's is 1 (see supports()).
template <class YTypes>
static void binary_rows(const BinaryArgs& a, YTypes y_types) {
  switch (a.kind) {
    case BinaryKind::add: return run<BinaryKind::add>(a, y_types);
    case BinaryKind::sub: return run<BinaryKind::sub>(a, y_types);
    case BinaryKind::mul: return run<BinaryKind::mul>(a, y_types);
    case BinaryKind::div: return run<BinaryKind::div>(a, y_types);
    case BinaryKind::max: return run<BinaryKind::max>(a, y_types);
    case BinaryKind::min: return run<BinaryKind::min>(a, y_types);
  }
}

}  // namespace tessera::kernels::avx512
