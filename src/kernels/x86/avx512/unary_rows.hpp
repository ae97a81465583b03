#pragma once
// The AVX-512 unary loop, compiled by avx512/unary.cpp for every output type
// and by avx512_bf16/unary.cpp for bf16 outputs, whose conversions that
// level does in one instruction (vec.hpp, to_bf16).
#include "kernels/unary.hpp"
#include "kernels/x86/avx512/activation.hpp"

namespace tessera::kernels::avx512 {

// Unit strides only (see the row's supports()). The loop is compiled per
// activation and per pair of storage types, its operands in locals: a switch
// on the dtype per vector, and reloading the arguments past the stores to y
// (which could alias them), cost as much as the work.
template <class YT>
static void unary_rows(const UnaryArgs& a, YT yt) {
  const char* x = static_cast<const char*>(a.x);
  char* y = static_cast<char*>(a.y);
  const std::int64_t n = a.n;
  const bool stream = a.stream_y;
  dispatch_act(a.act, [&](auto act) {
    dispatch_float(a.x_dtype, [&](auto xt) {
      constexpr std::int64_t xs = bytes_of(xt), ys = bytes_of(yt);
      constexpr __mmask16 all = 0xffff;
      std::int64_t i = 0;
      // x is fetched ahead (prefetch.hpp) but where it is f32 and y goes out
      // by plain stores (the arithmetic-bound activations past the L3):
      // there the hardware prefetcher keeps up, and the requests only took
      // miss buffers from the loop's own. AMD EPYC Turin, 80 MiB f32 in and
      // out, the two alternating in one process (9 rounds, each order once),
      // time without / with at 1 and 2 threads: silu 0.79-0.95, 0.89 and
      // 1.13; gelu (erf) 0.85-0.92, 0.95; gelu_tanh 0.93-1.01, 0.89-0.91;
      // tanh 0.86-0.98, 0.89-0.95; sigmoid 0.87-0.94, 0.87-0.91. With
      // streaming stores (relu, exp) or 16-bit x, even or slower without
      // (exp f32 1.07, relu f32 1.10 at 2 threads, sigmoid bf16 1.07 at 1).
      const bool fetch = xs < 4 || stream;
      // No masks but in the tail. 16-bit y: four vectors through the
      // activation at once (math.hpp). f32 y: two per step, one after the
      // other; there, at twice the bytes, four measured mixed and mostly
      // slower at 2 threads (gelu, silu, tanh past the L3), the loop waiting
      // on memory more than on the arithmetic.
      if constexpr (ys == 2)
        for (; i + 64 <= n; i += 64) {
          if (fetch) prefetch_ahead(x + i * xs, 64 * xs);
          const Vecs<4> v = vecs_of<4>([&](int k) { return load16(x + (i + 16 * k) * xs, xt, all); });
          put_vecs(y + i * ys, yt, activate16<YT::value>(v, act), stream);
        }
      for (; i + 32 <= n; i += 32) {
        if (fetch) prefetch_ahead(x + i * xs, 32 * xs);
        const __m512 a0 = activate16<YT::value>(load16(x + i * xs, xt, all), act);
        const __m512 a1 = activate16<YT::value>(load16(x + (i + 16) * xs, xt, all), act);
        put32(y + i * ys, yt, a0, a1, stream);
      }
      for (; i < n; i += 16) {
        const __mmask16 m = tail_mask(n - i);
        put16(y + i * ys, yt, activate16<YT::value>(load16(x + i * xs, xt, m), act), m, stream);
      }
    });
  });
  if (stream) _mm_sfence();
}

}  // namespace tessera::kernels::avx512
