#pragma once
// The matmul epilogue on 16 outputs while they are in a register: scale,
// bias, activation, residual, rounding to C's dtype. Shared by the AVX-512
// and AMX matmul kernels and the AVX-512 depthwise conv (static: see vec.hpp).
#include "kernels/matmul.hpp"
#include "kernels/x86/avx512/activation.hpp"
#include "kernels/x86/epilogue_prefetch.hpp"

namespace tessera::kernels::avx512 {

// The epilogue's value for 16 outputs of columns [n, n + 16) (masked):
// scale, bias, activation, then the residual at `residual` (null: none).
// Shared by the GEMM kernels and the depthwise conv.
static inline __m512 epilogue_value16(const EpilogueArgs& e, __m512 acc, std::int64_t n, const void* residual,
                                      __mmask16 mask) {
  __m512 v = _mm512_mul_ps(acc, _mm512_set1_ps(e.scale));
  if (e.bias) v = _mm512_add_ps(v, load16(advance(e.bias, e.bias_dtype, n), e.bias_dtype, mask));
  v = activate16(v, e.act);
  if (residual) v = _mm512_add_ps(v, load16(residual, e.residual_dtype, mask));
  return v;
}

// C[m, n : n+16] (masked) = epilogue(acc).
static inline void epilogue16(const MatmulArgs& a, __m512 acc, std::int64_t m, std::int64_t n, __mmask16 mask) {
  const EpilogueArgs& e = a.ep;
  const void* residual = e.residual ? advance(e.residual, e.residual_dtype, residual_row_offset(a, m) + n) : nullptr;
  store16(advance(a.c, a.c_dtype, c_row_offset(a, m) + n), a.c_dtype, epilogue_value16(e, acc, n, residual, mask), mask);
}

// Rows [m, m + rows) x columns [n, n + 32) of C (masked past n_end) from
// their f32 accumulators: acc(i, h) for row i, columns n + 16 h on. With C
// f32 or bf16 and a residual of C's type (the common cases) the loop is
// compiled per C type and activation and reads the arguments from locals;
// epilogue16 switches on every dtype and the activation per vector and,
// since a store to C may alias the arguments, reloads them each time (a
// tenth of a bf16 1x1 conv, K 320, on an AMD EPYC Zen 4).
template <class Acc>
static inline void epilogue_rows32(const MatmulArgs& a, std::int64_t rows, std::int64_t m, std::int64_t n,
                                   std::int64_t n_end, Acc&& acc) {
  const __mmask16 mask[2] = {tail_mask(n_end - n), tail_mask(std::max<std::int64_t>(0, n_end - n - 16))};
  const int halves = mask[1] ? 2 : 1;
  const EpilogueArgs e = a.ep;
  const bool compiled = (a.c_dtype == DType::f32 || a.c_dtype == DType::bf16) && (!e.residual || e.residual_dtype == a.c_dtype);
  if (!compiled) {
    for (std::int64_t i = 0; i < rows; ++i)
      for (int h = 0; h < halves; ++h) epilogue16(a, acc(i, h), m + i, n + 16 * h, mask[h]);
    return;
  }
  const __m512 scale = _mm512_set1_ps(e.scale);
  __m512 bias[2];
  for (int h = 0; h < 2; ++h)
    bias[h] = e.bias ? load16(advance(e.bias, e.bias_dtype, n + 16 * h), e.bias_dtype, mask[h]) : _mm512_setzero_ps();
  const auto rows_of = [&](auto ct) {
    const std::int64_t cs = bytes_of(ct);
    char* c = static_cast<char*>(a.c) + n * cs;
    const char* r = e.residual ? static_cast<const char*>(e.residual) + n * cs : nullptr;
    dispatch_act(e.act, [&](auto act) {
      for (std::int64_t i = 0; i < rows; ++i) {
        char* c_row = c + c_row_offset(a, m + i) * cs;
        const char* r_row = r ? r + residual_row_offset(a, m + i) * cs : nullptr;
        for (int h = 0; h < halves; ++h) {
          __m512 v = _mm512_mul_ps(acc(i, h), scale);  // then the bias: the rounding epilogue_value16 does
          if (e.bias) v = _mm512_add_ps(v, bias[h]);
          v = activate16(v, act);
          if (r_row) v = _mm512_add_ps(v, load16(r_row + 16 * h * cs, ct, mask[h]));
          put16(c_row + 16 * h * cs, ct, v, mask[h], a.stream_c);
        }
      }
    });
  };
  if (a.c_dtype == DType::f32) rows_of(std::integral_constant<DType, DType::f32>());
  else rows_of(std::integral_constant<DType, DType::bf16>());
}

// From an f32 tile with row stride `ld`.
static inline void epilogue_tile32(const MatmulArgs& a, const float* tile, std::int64_t ld, std::int64_t rows,
                                   std::int64_t m, std::int64_t n, std::int64_t n_end) {
  epilogue_rows32(a, rows, m, n, n_end, [&](std::int64_t i, int h) { return _mm512_loadu_ps(tile + i * ld + 16 * h); });
}

// From an i32 tile of int8 x int8 sums (row stride `ld`): each times its row's
// scale (W8A8: A's per-token scale) and its column's weight scale.
static inline void epilogue_i32_tile32(const MatmulArgs& a, const std::int32_t* tile, std::int64_t ld, std::int64_t rows,
                                       std::int64_t m, std::int64_t n, std::int64_t n_end) {
  const PackedB& b = *a.packed;
  const __m512 w[2] = {load16(advance(b.scales, b.scale_dtype, n), b.scale_dtype, 0xffff),
                       load16(advance(b.scales, b.scale_dtype, n + 16), b.scale_dtype, 0xffff)};
  epilogue_rows32(a, rows, m, n, n_end, [&](std::int64_t i, int h) {
    const __m512 exact = _mm512_cvtepi32_ps(_mm512_loadu_si512(tile + i * ld + 16 * h));
    return _mm512_mul_ps(exact, _mm512_mul_ps(_mm512_set1_ps(a.a_scales[m + i]), w[h]));
  });
}

}  // namespace tessera::kernels::avx512
