#pragma once
// The AVX-512 row normalizations (RMSNorm, LayerNorm, with a residual or
// not), built at two levels: avx512 (every type) and avx512_bf16 (bf16 y,
// whose roundings are one instruction there). Static functions only (see
// vec.hpp).
#include <algorithm>
#include <type_traits>

#include "kernels/dispatch.hpp"
#include "kernels/norm.hpp"
#include "kernels/scratch.hpp"
#include "kernels/x86/avx512/vec.hpp"

namespace tessera::kernels::avx512 {

// Two passes over each row (its moments, then the output): a row of a
// transformer (<= 16 KiB in f32) stays in L1 between them, so each byte of
// memory is touched once. Moments add up in f64, so rows with |v| beyond
// 1.8e19 (whose f32 squares overflow) still work, and E[v^2] - mean^2 keeps
// the precision f32 inputs have.

// v as a store to dtype t and a load back would give it.
static inline __m512 rounded(__m512 v, DType t) {
  switch (t) {
    case DType::bf16: return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(to_bf16(v)), 16));
    case DType::f16: return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    default: return v;
  }
}

// Adds v squared into f64 accumulators (add_f64's counterpart).
static inline void add_square_f64(__m512 v, __m512d& lo, __m512d& hi) {
  const __m512d a = _mm512_cvtps_pd(_mm512_castps512_ps256(v)), b = _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1));
  lo = _mm512_fmadd_pd(a, a, lo);
  hi = _mm512_fmadd_pd(b, b, hi);
}

// The f64 sum and sum of squares of chunk(c, mask) over the row's 16-column
// chunks, two chunks per step so the adds' latency does not bound the pass.
// kSum false: the squares only. Masked-off lanes must be 0.
struct Moments {
  double sum, squares;
};
template <bool kSum, class Chunk>
static inline Moments row_moments(std::int64_t n, Chunk&& chunk) {
  __m512d s0 = _mm512_setzero_pd(), s1 = s0, s2 = s0, s3 = s0, q0 = s0, q1 = s0, q2 = s0, q3 = s0;
  std::int64_t c = 0;
  for (; c + 32 <= n; c += 32) {
    const __m512 u = chunk(c, __mmask16(0xffff)), w = chunk(c + 16, __mmask16(0xffff));
    if constexpr (kSum) add_f64(u, s0, s1), add_f64(w, s2, s3);
    add_square_f64(u, q0, q1);
    add_square_f64(w, q2, q3);
  }
  for (; c < n; c += 16) {
    const __m512 u = chunk(c, tail_mask(n - c));
    if constexpr (kSum) add_f64(u, s0, s1);
    add_square_f64(u, q0, q1);
  }
  const auto total = [](__m512d a, __m512d b, __m512d c, __m512d d) {
    return _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(a, b), _mm512_add_pd(c, d)));
  };
  return {kSum ? total(s0, s1, s2, s3) : 0.0, total(q0, q1, q2, q3)};
}

// The moments of d = chunk - shift, added up in f32 over blocks of 512
// columns (32 terms per lane) and then in f64: the conversions to f64, which
// cost more than the rest of the pass, happen once per block. The shift, a
// value of the row, keeps E[d^2] - E[d]^2 free of cancellation. Squares past
// the f32 range come out as Inf; the caller then takes row_moments. Whole
// steps of 32 columns come from pair(c, u, w) (columns c to c + 31, in any
// order of lanes), the tail from chunk. kSum false (RMS): the squares only,
// of chunk itself.
template <bool kSum, class Pair, class Chunk>
static inline Moments row_moments_f32(std::int64_t n, float shift, Pair&& pair, Chunk&& chunk) {
  const __m512 s16 = _mm512_set1_ps(shift);
  __m512d s0 = _mm512_setzero_pd(), s1 = s0, q0 = s0, q1 = s0;
  for (std::int64_t c = 0; c < n;) {
    __m512 ps = _mm512_setzero_ps(), ps2 = ps, pq = ps, pq2 = ps;
    const std::int64_t end = n - c > 512 ? c + 512 : n;
    for (; c + 32 <= end; c += 32) {
      __m512 u, w;
      pair(c, u, w);
      if constexpr (kSum) {
        u = _mm512_sub_ps(u, s16), w = _mm512_sub_ps(w, s16);
        ps = _mm512_add_ps(ps, u), ps2 = _mm512_add_ps(ps2, w);
      }
      pq = _mm512_fmadd_ps(u, u, pq);
      pq2 = _mm512_fmadd_ps(w, w, pq2);
    }
    for (; c < end; c += 16) {
      const __mmask16 m = tail_mask(end - c);
      const __m512 u = kSum ? _mm512_maskz_sub_ps(m, chunk(c, m), s16) : chunk(c, m);  // masked lanes add nothing
      if constexpr (kSum) ps = _mm512_add_ps(ps, u);
      pq = _mm512_fmadd_ps(u, u, pq);
    }
    if constexpr (kSum) add_f64(_mm512_add_ps(ps, ps2), s0, s1);
    add_f64(_mm512_add_ps(pq, pq2), q0, q1);
  }
  return {kSum ? _mm512_reduce_add_pd(_mm512_add_pd(s0, s1)) : 0.0, _mm512_reduce_add_pd(_mm512_add_pd(q0, q1))};
}

// 32 elements at p as f32, in an order fit for sums only (as
// store32_rounded_unordered returns them): bf16 in one load and two
// instructions (the even elements in r0, the odd in r1), not two widening
// loads and two shifts.
template <class T>
static inline void load32_unordered(const char* p, T t, __m512& r0, __m512& r1) {
  if (DType(t) == DType::bf16) {
    const __m512i h = _mm512_loadu_si512(p);
    r0 = bf16_even(h);
    r1 = bf16_odd(h);
  } else {
    r0 = load16(p, t, 0xffff);
    r1 = load16(p + 16 * bytes_of(t), t, 0xffff);
  }
}

// gamma or beta as n f32 values for a task's rows: in place when stored as
// f32, else converted once into this thread's scratch (absent: n copies of
// `absent`), so that the output loop has one load and no branch per vector.
static const float* affine_f32(const void* p, DType t, std::int64_t n, float absent, ScratchSlot slot) {
  if (p && t == DType::f32) return static_cast<const float*>(p);
  auto* out = static_cast<float*>(thread_scratch(slot, std::size_t(n) * sizeof(float)));
  for (std::int64_t c = 0; c < n; c += 16) {
    const __mmask16 m = tail_mask(n - c);
    _mm512_mask_storeu_ps(out + c, m, p ? load16(advance(p, t, c), t, m) : _mm512_set1_ps(absent));
  }
  return out;
}

// The rows for storage types known at compile time (X: x and the residual;
// V: the row normalized, sum's type with a residual; Y: y) or read from the
// arguments (run-time DType values), compiled per (residual or not,
// streaming stores or not), operands in locals: see unary_rows.hpp. One
// pass over memory computes v (and stores the sum) with its moments in f64;
// the output pass reads v back from L1: x's row or the sum's. Past the L3
// the sum is streamed, as y is, and also kept in a row buffer for the
// output pass (read back from memory, a streamed sum would cost a DRAM
// read): an unstreamed sum cost a read for ownership, which made AddRmsNorm
// no faster than its unfused parts.
template <class X, class V, class Y, bool kResidual, bool kStream>
static void norm_rows_with(const NormArgs& a, X xt, V vt, Y yt, std::int64_t r0, std::int64_t r1) {
  constexpr bool buffered = kResidual && kStream;
  const std::int64_t n = a.cols, xs = bytes_of(xt), vs = bytes_of(vt), ys = bytes_of(yt);
  // The residual's type: x's when known at compile time (with_norm_types).
  const auto rt = [&] {
    if constexpr (std::is_same_v<X, DType>) return a.residual_dtype;
    else return xt;
  }();
  const std::int64_t rs = bytes_of(rt);
  const bool layer = a.kind == NormKind::layer;
  const float* const gamma = affine_f32(a.gamma, a.gamma_dtype, n, 1.0f, ScratchSlot::a_panel);
  const float* const beta = a.beta ? affine_f32(a.beta, a.beta_dtype, n, 0.0f, ScratchSlot::b_panel) : nullptr;
  const float eps = a.eps;
  // The row buffer, v as stored. Row r's output reads each step's columns
  // before row r + 1's first pass writes them there.
  char* const vbuf = buffered ? static_cast<char*>(thread_scratch(ScratchSlot::partial, std::size_t(n * vs))) : nullptr;
  // A row's output: y = (v - mean) * inv * gamma (+ beta), v read from `v`.
  // Taken by value where a loop writes it (output, first_pass): through a
  // reference, every store to y might alias it, and each step loaded y,
  // mean and inv again (AMD EPYC Turin, [5120, 4096], 1 / 2 threads, in one
  // process, 21 rounds, time by value over by reference: rms_norm f32
  // 0.94-0.95 / 0.93-0.95, layer_norm f32 0.93-0.94 / 0.91-0.92, bf16
  // 0.88 / 0.86-0.87; rms_norm bf16 1.02-1.05).
  struct Pending {
    const char* v;
    char* y;
    __m512 mean16, inv;
  };
  // Compiled per (centred, beta): RMS has no mean to take off, only layer
  // norm has a beta.
  const auto rows_with = [&](auto centred, auto with_beta) {
    const auto out16 = [=](const Pending& o, std::int64_t c, __mmask16 m) {
      // v: the row buffer, the sum or x (V is x's type without a residual).
      const __m512 vc = load16(o.v + c * vs, vt, m);
      const __m512 d = _mm512_mul_ps(centred ? _mm512_sub_ps(vc, o.mean16) : vc, o.inv);
      const __m512 g = _mm512_maskz_loadu_ps(m, gamma + c);
      return with_beta ? _mm512_fmadd_ps(d, g, _mm512_maskz_loadu_ps(m, beta + c)) : _mm512_mul_ps(d, g);
    };
    // 32 columns: 16-bit y goes out as one 64-byte line (put32).
    const auto out32 = [=](const Pending& o, std::int64_t c) {
      put32(o.y + c * ys, yt, out16(o, c, 0xffff), out16(o, c + 16, 0xffff), kStream);
    };
    const auto out_masked = [=](const Pending& o, std::int64_t c, __mmask16 m) { put16(o.y + c * ys, yt, out16(o, c, m), m, kStream); };
    // The output pass on its own, over columns [c0, c1). The same columns
    // of a later row's x (and residual) are fetched meanwhile: rows are far
    // apart, and a row start is where the hardware prefetcher stalls. Into
    // L2 where L1 holds 32 KiB (AMD EPYC Zen 4: into L1 the next rows
    // evicted this one's, AddRmsNorm bf16, 4096 columns: 10 % slower), into
    // L1 where it holds 48 KiB (a.prefetch_l1; AMD EPYC Turin, [5120, 4096]
    // f32, the two alternating in one process, 13 rounds, time into L1 over
    // L2 at 1 / 2 threads: rms_norm 0.96-0.97 / 0.91-0.93, layer_norm 0.94
    // / 0.89-0.93, AddRmsNorm 0.92 / 0.90-0.91; bf16 even). The last rows
    // fetch themselves again (cached: cheap).
    const auto fetch = [l1 = a.prefetch_l1](const char* p, std::int64_t bytes) {
      if (l1) prefetch_lines<_MM_HINT_T0>(p, bytes);
      else prefetch_lines<_MM_HINT_T1>(p, bytes);
    };
    const auto output = [=](Pending o, std::int64_t c0, std::int64_t c1, std::int64_t next) {
      const char* const x_next = static_cast<const char*>(a.x) + next * a.x_row_stride * xs;
      const char* const res_next = kResidual ? static_cast<const char*>(a.residual) + next * a.residual_row_stride * rs : nullptr;
      std::int64_t c = c0;
      for (; c + 32 <= c1; c += 32) {
        fetch(x_next + c * xs, 32 * xs);
        if constexpr (kResidual) fetch(res_next + c * rs, 32 * rs);
        out32(o, c);
      }
      for (; c < c1; c += 16) out_masked(o, c, tail_mask(c1 - c));
    };
    // Row r's first pass (its sum stored, its moments), writing `pending`'s
    // output column by column alongside with_pending: past the L3 the reads
    // of one row and the writes of the one before then share each step
    // (AddRmsNorm 5120 x 4096, 1 thread, against a row's passes in turn:
    // f32 0.67-0.71 -> 0.61-0.67 ns an element, bf16 0.37 -> 0.34-0.35).
    // Returns the row's own output, pending.
    const auto first_pass = [=](std::int64_t r, auto with_pending, Pending pending) {
      const char* const x = static_cast<const char*>(a.x) + r * a.x_row_stride * xs;
      const char* const res = kResidual ? static_cast<const char*>(a.residual) + r * a.residual_row_stride * rs : nullptr;
      char* const sum = kResidual ? static_cast<char*>(a.sum) + r * a.sum_row_stride * vs : nullptr;
      // The row normalized: x + residual, rounded to sum's dtype and stored
      // there (sum may be the very view of x or residual), or x.
      const auto added = [=](std::int64_t c, __mmask16 m) {
        return _mm512_add_ps(load16(x + c * xs, xt, m), load16(res + c * rs, rt, m));
      };
      const auto chunk = [=](std::int64_t c, __mmask16 m) {
        if constexpr (with_pending) out_masked(pending, c, m);
        if constexpr (!kResidual) {
          return load16(x + c * xs, xt, m);
        } else {
          const __m512 s = store16_rounded(sum + c * vs, vt, added(c, m), m, kStream);
          if constexpr (buffered) store16(vbuf + c * vs, vt, s, m);
          return s;
        }
      };
      // 32 columns: a 16-bit sum goes out as one 64-byte line (a streamed
      // half line stalled the write-combining buffers: AddRmsNorm was slower
      // than its unfused parts). Alongside the pending output, the next
      // row is fetched, as by `output`.
      const char* const x_next = r + 1 < r1 ? x + a.x_row_stride * xs : x;
      const char* const res_next = kResidual && r + 1 < r1 ? res + a.residual_row_stride * rs : res;
      const auto pair = [=](std::int64_t c, __m512& u, __m512& w) {
        if constexpr (with_pending) {
          out32(pending, c);
          fetch(x_next + c * xs, 32 * xs);
          fetch(res_next + c * rs, 32 * rs);
        }
        if constexpr (!kResidual) {
          load32_unordered(x + c * xs, xt, u, w);
        } else {
          store32_rounded_unordered(sum + c * vs, vt, added(c, 0xffff), added(c + 16, 0xffff), kStream, u, w, buffered ? vbuf + c * vs : nullptr);
        }
      };
      // v as stored (the row buffer, the sum or x).
      const auto stored = [=](std::int64_t c, __mmask16 m) {
        if constexpr (kResidual) return load16((buffered ? vbuf : sum) + c * vs, vt, m);
        else return load16(x + c * xs, xt, m);
      };
      // Layer norm centres on the row's first value; RMS needs the raw squares.
      const float shift = centred ? _mm512_cvtss_f32(kResidual ? rounded(added(0, 1), vt) : load16(x, xt, 1)) : 0.0f;
      Moments mo = row_moments_f32<centred()>(n, shift, pair, chunk);
      double offset = shift;
      if (!std::isfinite(mo.squares)) {  // squares past the f32 range (|v| > 1.8e19): again in f64, from v as stored
        mo = row_moments<centred()>(n, stored);
        offset = 0.0;
      }
      const double d_mean = centred ? mo.sum / double(n) : 0.0;
      const double mean = centred ? offset + d_mean : 0.0;
      // E[d^2] - E[d]^2 in f64, clamped at 0.
      const double var = std::max(0.0, mo.squares / double(n) - d_mean * d_mean);
      const char* const v = buffered ? vbuf : kResidual ? sum : x;
      return Pending{v, static_cast<char*>(a.y) + r * a.y_row_stride * ys, _mm512_set1_ps(float(mean)),
                     _mm512_set1_ps(float(inv_std(var, eps)))};
    };
    if constexpr (buffered) {
      Pending pending = first_pass(r0, std::false_type(), Pending{});
      for (std::int64_t r = r0 + 1; r < r1; ++r) pending = first_pass(r, std::true_type(), pending);
      output(pending, 0, n, r1 - 1);
    } else {
      // Blocks of a.output.rows rows: their first passes, then their
      // outputs a.output.cols columns at a time (one row: all of them), each
      // row fetching the same row of the next block.
      const std::int64_t block = std::clamp<std::int64_t>(a.output.rows, 1, kNormOutputRows);
      const std::int64_t step = block == 1 ? n : a.output.cols;
      Pending pending[kNormOutputRows];
      for (std::int64_t rb = r0; rb < r1; rb += block) {
        const std::int64_t rows = std::min(block, r1 - rb);
        for (std::int64_t i = 0; i < rows; ++i) pending[i] = first_pass(rb + i, std::false_type(), Pending{});
        for (std::int64_t c0 = 0; c0 < n; c0 += step)
          for (std::int64_t i = 0; i < rows; ++i) output(pending[i], c0, std::min(n, c0 + step), std::min(rb + rows + i, r1 - 1));
      }
    }
  };
  if (!layer) rows_with(std::false_type(), std::false_type());
  else if (beta) rows_with(std::true_type(), std::true_type());
  else rows_with(std::true_type(), std::false_type());
  if (kStream) _mm_sfence();
}

template <class X, class V, class Y>
static void norm_rows(const NormArgs& a, X xt, V vt, Y yt, std::int64_t r0, std::int64_t r1) {
  dispatch_bool(a.residual != nullptr, [&](auto residual) {
    dispatch_bool(a.stream_y, [&](auto stream) { norm_rows_with<X, V, Y, residual(), stream()>(a, xt, vt, yt, r0, r1); });
  });
}

}  // namespace tessera::kernels::avx512
