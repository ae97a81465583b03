#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/norm.hpp"
#include "kernels/scratch.hpp"
#include "kernels/x86/avx2/vec.hpp"

namespace tessera::kernels::avx2 {

// The passes of the AVX-512 row (the moments in f32 blocks, then f64; the
// output), 8 columns at a time; unit column strides only.

// v as a store to dtype t and a load back would give it.
static inline __m256 rounded(__m256 v, DType t) {
  switch (t) {
    case DType::bf16: return _mm256_castsi256_ps(_mm256_and_si256(bf16_in_high_half(v), _mm256_set1_epi32(int(0xffff0000u))));
    case DType::f16: return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    default: return v;
  }
}

template <bool kSquare>
static inline void accumulate(__m256 v, __m256d& lo, __m256d& hi) {
  if constexpr (kSquare) {
    const __m256d a = _mm256_cvtps_pd(_mm256_castps256_ps128(v)), b = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    lo = _mm256_fmadd_pd(a, a, lo);
    hi = _mm256_fmadd_pd(b, b, hi);
  } else {
    add_f64(v, lo, hi);
  }
}

// The f64 sum of the row's values (squared when kSquare): chunk16(c) gives
// columns c .. c + 15 as a Pair, chunk(c, k) the k <= 8 of the tail (lanes
// past k must be 0). Four chains, so that the adds' latency does not bound
// the pass.
template <bool kSquare, class Chunk16, class Chunk>
static inline double row_sum(std::int64_t n, Chunk16&& chunk16, Chunk&& chunk) {
  __m256d s0 = _mm256_setzero_pd(), s1 = s0, s2 = s0, s3 = s0;
  std::int64_t c = 0;
  for (; c + 16 <= n; c += 16) {
    const Pair p = chunk16(c);
    accumulate<kSquare>(p.lo, s0, s1);
    accumulate<kSquare>(p.hi, s2, s3);
  }
  for (; c < n; c += 8) accumulate<kSquare>(chunk(c, std::min<std::int64_t>(8, n - c)), s0, s1);
  return hsum_pd(_mm256_add_pd(_mm256_add_pd(s0, s1), _mm256_add_pd(s2, s3)));
}

// The moments of d = v - shift over the row, added up in f32 over blocks of
// 512 columns (32 terms per lane) and then in f64, as the AVX-512 row does
// (avx512/norm_rows.hpp, row_moments_f32): per vector, the conversions to
// f64 cost more than the rest of a pass, and the centred sums and squares
// come in one pass instead of two. The shift, a value of the row, keeps
// E[d^2] - E[d]^2 free of cancellation. Squares past the f32 range come out
// as Inf; the caller then takes row_sum's f64 passes. chunk16 and chunk as
// for row_sum, each column read once. kSum false (RMS): the squares of v.
// AMD EPYC Turin, TESSERA_ISA=avx2, 1 thread, [8, 4096] in L2 / [5120, 4096]
// past the L3, against per-vector f64 sums (medians of 5 alternating runs,
// ps a byte): layer_norm f32 42.7 -> 25.7 / 66.6 -> 44.9, bf16 118 -> 79 /
// 123 -> 82; rms_norm f32 29.2 -> 21.8 / 59.4 -> 52.0, bf16 78.0 -> 63.4 /
// 94.8 -> 83.2.
struct Moments {
  double sum, squares;
};
template <bool kSum, class Chunk16, class Chunk>
static inline Moments row_moments_f32(std::int64_t n, float shift, Chunk16&& chunk16, Chunk&& chunk) {
  const __m256 s8 = _mm256_set1_ps(shift);
  __m256d s0 = _mm256_setzero_pd(), s1 = s0, q0 = s0, q1 = s0;
  for (std::int64_t c = 0; c < n;) {
    __m256 ps0 = _mm256_setzero_ps(), ps1 = ps0, pq0 = ps0, pq1 = ps0;
    const std::int64_t end = n - c > 512 ? c + 512 : n;
    for (; c + 16 <= end; c += 16) {
      Pair p = chunk16(c);
      if constexpr (kSum) {
        p.lo = _mm256_sub_ps(p.lo, s8), p.hi = _mm256_sub_ps(p.hi, s8);
        ps0 = _mm256_add_ps(ps0, p.lo), ps1 = _mm256_add_ps(ps1, p.hi);
      }
      pq0 = _mm256_fmadd_ps(p.lo, p.lo, pq0);
      pq1 = _mm256_fmadd_ps(p.hi, p.hi, pq1);
    }
    for (; c < end; c += 8) {
      const std::int64_t k = std::min<std::int64_t>(8, end - c);
      __m256 d = chunk(c, k);
      if constexpr (kSum) {
        d = _mm256_and_ps(_mm256_sub_ps(d, s8), lanes_below(k));  // lanes past k add nothing
        ps0 = _mm256_add_ps(ps0, d);
      }
      pq0 = _mm256_fmadd_ps(d, d, pq0);
    }
    if constexpr (kSum) add_f64(_mm256_add_ps(ps0, ps1), s0, s1);
    add_f64(_mm256_add_ps(pq0, pq1), q0, q1);
  }
  return {kSum ? hsum_pd(_mm256_add_pd(s0, s1)) : 0.0, hsum_pd(_mm256_add_pd(q0, q1))};
}

// gamma or beta as n f32 values for a task's rows: in place when stored as
// f32 in order, else converted once (absent: n copies of `absent`, for
// gamma), so that the output loop has plain loads and no dtype switch per
// vector. bf16_order: each whole 16 in load16_unordered's bf16 order.
static const float* affine_f32(const void* p, DType t, std::int64_t n, float absent, ScratchSlot slot, bool bf16_order) {
  if (p && t == DType::f32 && !bf16_order) return static_cast<const float*>(p);
  auto* out = static_cast<float*>(thread_scratch(slot, std::size_t(n) * sizeof(float)));
  dispatch_float(t, [&](auto tt) {  // the type fixed for the loop: no switch per vector
    std::int64_t c = 0;
    for (; c + 8 <= n; c += 8) _mm256_storeu_ps(out + c, p ? load8(advance(p, tt, c), tt) : _mm256_set1_ps(absent));
    if (c < n) store8_n(out + c, DType::f32, p ? load8_n(advance(p, tt, c), tt, n - c) : _mm256_set1_ps(absent), n - c);
  });
  if (bf16_order)
    for (std::int64_t c = 0; c + 16 <= n; c += 16) to_bf16_order16(out + c, out + c);
  return out;
}

// The output pass over one row: y = (v - mean) * inv * gamma + beta, v read
// from src (type S), gamma and beta (none: 0) of type G by the same loads,
// so in the same order. A function of values: as a lambda of norm_rows that
// captured them by reference, GCC reloaded n, beta and the stream flag from
// the closure after every store to y (a vector store may alias anything) and
// tested them again. [16, 4096] f32 rms_norm in L2, 1 thread: 21 -> 12.5 us.
template <class S, class Y, class G, class Load16, class Put16>
static inline void normalize_row(const char* src, S st, char* y, Y yt, const char* gamma, const char* beta, G gt,
                                 std::int64_t n, float mean, float inv, bool stream, Load16 load16, Put16 put16) {
  const std::int64_t ss = bytes_of(st), ys = bytes_of(yt), gs = bytes_of(gt);
  const __m256 mean8 = _mm256_set1_ps(mean), inv8 = _mm256_set1_ps(inv), zero = _mm256_setzero_ps();
  const auto out8 = [=](__m256 v, __m256 g, __m256 b) { return _mm256_fmadd_ps(_mm256_mul_ps(_mm256_sub_ps(v, mean8), inv8), g, b); };
  std::int64_t c = 0;
  for (; c + 16 <= n; c += 16) {
    const Pair v = load16(src + c * ss, st), g = load16(gamma + c * gs, gt);
    const Pair b = beta ? load16(beta + c * gs, gt) : Pair{zero, zero};
    put16(y + c * ys, yt, {out8(v.lo, g.lo, b.lo), out8(v.hi, g.hi, b.hi)}, stream);
  }
  for (; c < n; c += 8) {
    const std::int64_t k = std::min<std::int64_t>(8, n - c);
    const __m256 b = beta ? load8_n(beta + c * gs, gt, k) : zero;
    put8_n(y + c * ys, yt, out8(load8_n(src + c * ss, st, k), load8_n(gamma + c * gs, gt, k), b), k, stream);
  }
}

// The rows for storage types known at compile time (X: x; V: the row
// normalized, sum's type with a residual; Y: y) or read from the arguments,
// the arguments in a local copy (a store through y or sum may alias them).
// Past the L3, y and the sum are streamed and the sum is kept in a row buffer
// as f32 for the later passes, as in the AVX-512 row. Whole 16 columns go
// as Pairs: in bf16's own order (vec.hpp, load16_unordered) when every
// operand is bf16, gamma and beta permuted to match; else in order.
template <class X, class V, class Y>
static void norm_rows(const NormArgs& args, X xt, V vt, Y yt, std::int64_t r0, std::int64_t r1) {
  const NormArgs a = args;
  constexpr bool kBf16Order = std::is_same_v<X, std::integral_constant<DType, DType::bf16>>;  // then V, Y and the residual too
  const auto load16 = [](const void* p, auto t) {
    if constexpr (kBf16Order) return load16_unordered(p, t);
    else return Pair{load8(p, t), load8(advance(p, t, 8), t)};
  };
  const auto put16 = [](void* p, auto t, Pair v, bool stream) {
    if constexpr (kBf16Order) {
      put16_unordered(p, t, v, stream);
    } else {
      put8_n(p, t, v.lo, 8, stream);
      put8_n(advance(p, t, 8), t, v.hi, 8, stream);
    }
  };
  const std::int64_t n = a.cols;
  const std::int64_t xs = bytes_of(xt), rs = bytes_of(a.residual_dtype), vs = bytes_of(vt), ys = bytes_of(yt);
  const DType rt = a.residual_dtype;
  const bool layer = a.kind == NormKind::layer, stream = a.stream_y, buffered = a.residual && stream;
  // gamma and beta stored as x is: read in place by x's loads. Else as f32,
  // converted per task: at a few rows a task (decode) that doubled the
  // work of bf16 rows ([16, 4096] rms_norm, 2 rows a task: 25 % of the time).
  const bool affine_as_x = a.gamma && a.gamma_dtype == DType(xt) && (!a.beta || a.beta_dtype == DType(xt));
  const float* gamma = affine_as_x ? nullptr : affine_f32(a.gamma, a.gamma_dtype, n, 1.0f, ScratchSlot::a_panel, kBf16Order);
  const float* beta = !affine_as_x && a.beta ? affine_f32(a.beta, a.beta_dtype, n, 0.0f, ScratchSlot::b_panel, kBf16Order) : nullptr;
  float* const vbuf = buffered ? static_cast<float*>(thread_scratch(ScratchSlot::partial, std::size_t(n) * sizeof(float))) : nullptr;
  for (std::int64_t r = r0; r < r1; ++r) {
    const char* x = static_cast<const char*>(a.x) + r * a.x_row_stride * xs;
    char* y = static_cast<char*>(a.y) + r * a.y_row_stride * ys;
    const char* v = x;
    const auto moments = [&](float shift, auto&& chunk16, auto&& chunk) {
      return layer ? row_moments_f32<true>(n, shift, chunk16, chunk) : row_moments_f32<false>(n, shift, chunk16, chunk);
    };
    // Layer norm centres on the row's first value (v as stored: a sum is rounded to its type).
    float shift = 0.0f;
    Moments mo;
    if (a.residual) {
      const char* res = static_cast<const char*>(a.residual) + r * a.residual_row_stride * rs;
      char* sum = static_cast<char*>(a.sum) + r * a.sum_row_stride * vs;
      if (layer) shift = _mm256_cvtss_f32(rounded(_mm256_add_ps(load8_n(x, xt, 1), load8_n(res, rt, 1)), vt));
      mo = moments(
          shift,
          [&](std::int64_t c) {
            const Pair xv = load16(x + c * xs, xt), rv = load16(res + c * rs, rt);
            const Pair added{_mm256_add_ps(xv.lo, rv.lo), _mm256_add_ps(xv.hi, rv.hi)};
            Pair t;
            if constexpr (kBf16Order) {
              t = store16_bf16_rounded_unordered(sum + c * vs, added, buffered);
            } else {
              t = {rounded(added.lo, vt), rounded(added.hi, vt)};
              put16(sum + c * vs, vt, t, buffered);
            }
            if (buffered) {
              _mm256_storeu_ps(vbuf + c, t.lo);
              _mm256_storeu_ps(vbuf + c + 8, t.hi);
            }
            return t;
          },
          [&](std::int64_t c, std::int64_t k) {
            const __m256 t = rounded(_mm256_add_ps(load8_n(x + c * xs, xt, k), load8_n(res + c * rs, rt, k)), vt);
            put8_n(sum + c * vs, vt, t, k, buffered);
            if (buffered) store8_n(vbuf + c, DType::f32, t, k);
            return t;
          });
      v = sum;
    } else {
      if (layer) shift = _mm256_cvtss_f32(load8_n(x, xt, 1));
      mo = moments(
          shift, [&](std::int64_t c) { return load16(x + c * xs, xt); },
          [&](std::int64_t c, std::int64_t k) { return load8_n(x + c * xs, xt, k); });
    }
    // The output pass (and, for squares past the f32 range, the f64 passes)
    // read v from src (type st).
    const auto finish = [&](const char* src, auto st) {
      const std::int64_t ss = bytes_of(st);
      double mean = 0.0, var = 0.0;
      if (std::isfinite(mo.squares)) {
        const double d_mean = layer ? mo.sum / double(n) : 0.0;
        mean = layer ? shift + d_mean : 0.0;
        var = std::max(0.0, mo.squares / double(n) - d_mean * d_mean);
      } else {  // |v| beyond 1.8e19 (or Inf, NaN): the mean, then the centred squares, in f64
        if (layer)
          mean = row_sum<false>(
                     n, [&](std::int64_t c) { return load16(src + c * ss, st); },
                     [&](std::int64_t c, std::int64_t k) { return load8_n(src + c * ss, st, k); }) /
                 double(n);
        const __m256 mean8 = _mm256_set1_ps(float(mean));
        var = row_sum<true>(
                  n,
                  [&](std::int64_t c) {
                    const Pair p = load16(src + c * ss, st);
                    return Pair{_mm256_sub_ps(p.lo, mean8), _mm256_sub_ps(p.hi, mean8)};
                  },
                  [&](std::int64_t c, std::int64_t k) {
                    const __m256 d = _mm256_sub_ps(load8_n(src + c * ss, st, k), mean8);
                    return k == 8 ? d : _mm256_and_ps(d, lanes_below(k));
                  }) /
              double(n);
      }
      const float inv = float(inv_std(var, a.eps));
      if (affine_as_x)
        normalize_row(src, st, y, yt, static_cast<const char*>(a.gamma), static_cast<const char*>(a.beta), xt, n, float(mean),
                      inv, stream, load16, put16);
      else
        normalize_row(src, st, y, yt, reinterpret_cast<const char*>(gamma), reinterpret_cast<const char*>(beta),
                      std::integral_constant<DType, DType::f32>{}, n, float(mean), inv, stream, load16, put16);
    };
    if (buffered) finish(reinterpret_cast<const char*>(vbuf), std::integral_constant<DType, DType::f32>{});
    else finish(v, vt);
  }
  if (stream) _mm_sfence();
}

void norm(const NormArgs& a, std::int64_t r0, std::int64_t r1) {
  with_norm_types(a, [&](auto xt, auto vt, auto yt) { norm_rows(a, xt, vt, yt, r0, r1); });
}

}  // namespace tessera::kernels::avx2
