#pragma once
// The AVX-512 gated loop, compiled by avx512/gated.cpp for every output type
// and by avx512_bf16/gated.cpp for bf16 outputs, whose conversions that
// level does in one instruction (vec.hpp, to_bf16).
#include "kernels/gated.hpp"
#include "kernels/x86/avx512/activation.hpp"

namespace tessera::kernels::avx512 {

// The next 16 values of an operand with stride 0 (broadcast) or 1.
template <class T>
static inline __m512 operand16(const char* p, T t, std::int64_t stride, std::int64_t i, __m512 broadcast, __mmask16 m) {
  return stride ? load16(p + i * bytes_of(t), t, m) : broadcast;
}

template <class T>
static inline __m512 first(const void* p, T t) { return _mm512_set1_ps(_mm512_cvtss_f32(load16(p, t, 1))); }

// The loop for storage types known at compile time (T) or read from the
// arguments (run-time DType values), its operands in locals: see unary_rows.hpp.
template <class Act_, class A, class B, class C, class Y>
static void run(const GatedArgs& a, Act_ act, A at, B bt, C ct, Y yt) {
  const char *pa = static_cast<const char*>(a.a), *pb = static_cast<const char*>(a.b), *pc = static_cast<const char*>(a.c);
  char* py = static_cast<char*>(a.y);
  const std::int64_t n = a.n, sa = a.a_stride, sb = a.b_stride, sc = a.c_stride;
  const bool stream = a.stream_y;
  const __m512 a0 = first(pa, at), b0 = first(pb, bt), c0 = pc ? first(pc, ct) : _mm512_setzero_ps();
  // y at elements [i, i + 16 N), the last vector's lanes masked by m; N
  // vectors through the activation at once (math.hpp).
  const auto values = [&](auto vectors, std::int64_t i, __mmask16 m) __attribute__((always_inline)) {
    constexpr int N = decltype(vectors)::value;
    const auto mask = [&](int k) { return lanes_of(k, N, m); };
    Vecs<N> g = activate16<Y::value>(vecs_of<N>([&](int k) { return operand16(pa, at, sa, i + 16 * k, a0, mask(k)); }), act);
#pragma GCC unroll 4
    for (int k = 0; k < N; ++k) {
      const __m512 u = operand16(pb, bt, sb, i + 16 * k, b0, mask(k));
      g.v[k] = pc ? _mm512_fmadd_ps(g.v[k], u, operand16(pc, ct, sc, i + 16 * k, c0, mask(k))) : _mm512_mul_ps(g.v[k], u);
    }
    return g;
  };
  std::int64_t i = 0;
  const auto fetch = [&](std::int64_t elements) {
    if (sa) prefetch_ahead(pa + i * bytes_of(at), elements * bytes_of(at));
    if (sb) prefetch_ahead(pb + i * bytes_of(bt), elements * bytes_of(bt));
    if (pc && sc) prefetch_ahead(pc + i * bytes_of(ct), elements * bytes_of(ct));
  };
  // 16-bit y (known at compile time): four vectors through the activation
  // at once (math.hpp); f32 y: two per step, one after the other (see
  // unary_rows.hpp; four measured 1.08-1.15x slower here at 2 threads).
  if constexpr (!std::is_same_v<Y, DType> && bytes_of(Y::value) == 2)
    for (; i + 64 <= n; i += 64) {
      fetch(64);
      put_vecs(py + i * bytes_of(yt), yt, values(std::integral_constant<int, 4>{}, i, 0xffff), stream);
    }
  for (; i + 32 <= n; i += 32) {
    fetch(32);
    put32(py + i * bytes_of(yt), yt, values(std::integral_constant<int, 1>{}, i, 0xffff).v[0],
          values(std::integral_constant<int, 1>{}, i + 16, 0xffff).v[0], stream);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    put16(py + i * bytes_of(yt), yt, values(std::integral_constant<int, 1>{}, i, m).v[0], m, stream);
  }
  if (stream) _mm_sfence();
}

// Operand strides are 0 or 1; y's is 1 (see supports()). The common case, a,
// b, c (when present) and y of one type, is compiled per type; mixed types
// take the generic loop. `y_types` calls its argument with y's storage type.
template <class YTypes>
static void gated_rows(const GatedArgs& a, YTypes y_types) {
  dispatch_act(a.act, [&](auto act) {
    y_types([&](auto yt) {
      if (a.a_dtype == yt && a.b_dtype == yt && (!a.c || a.c_dtype == yt))
        run(a, act, yt, yt, yt, yt);
      else
        run(a, act, a.a_dtype, a.b_dtype, a.c_dtype, yt);
    });
  });
}

}  // namespace tessera::kernels::avx512
