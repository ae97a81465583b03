#pragma once
// The AVX-512 GroupNorm passes (statistics of runs or of columns, then the
// apply), built at two levels: avx512 (every type) and avx512_bf16 (bf16
// y, whose roundings are one instruction there). Static functions only
// (see vec.hpp).
#include <algorithm>
#include <type_traits>

#include "kernels/group_norm.hpp"
#include "kernels/x86/avx512/math.hpp"

namespace tessera::kernels::avx512 {

// Deviations from a shift near the data (a value of the group) add up in f32
// over at most kFlush vectors (run_stats) or lines (column_stats), then move
// into f64: few enough terms that f32 loses nothing that shows, and the f64
// conversions are amortized over them.
static constexpr std::int64_t kFlush = 64;

// An operand as the loops use it: data, bytes between lines, and its dtype,
// a compile-time constant (std::integral_constant) in the common case of one
// dtype for all operands, so no switch on it runs per vector; see unary_rows.hpp.
template <class T>
struct Operand {
  char* data;
  std::int64_t line_bytes;
  T t;
  Operand(const GroupNormOperand& o, T type)
      : data(static_cast<char*>(o.data)), line_bytes(o.line_stride * bytes_of(type)), t(type) {}
  char* at(std::int64_t line, std::int64_t i) const { return data + line * line_bytes + i * bytes_of(t); }
  __m512 load(std::int64_t line, std::int64_t i, __mmask16 m) const { return load16(at(line, i), t, m); }
};

// The operands of a block: x, residual, mul, y, sum (absent ones have null data).
template <class T>
struct Block {
  Operand<T> x, residual, mul, y, sum;
  std::int64_t lines, len;

  // v as the statistics see it: x [+ residual] at elements i..i+15 of a
  // line, written to sum when there is one and read back rounded. The
  // operands present are compile-time (with_inputs), so the loops test for
  // none of them per vector.
  template <bool Residual, bool Sum>
  __m512 stats16(std::int64_t l, std::int64_t i, __mmask16 m) const {
    __m512 v = x.load(l, i, m);
    if constexpr (Residual) v = _mm512_add_ps(v, residual.load(l, i, m));
    if constexpr (Sum) v = store16_rounded(sum.at(l, i), sum.t, v, m);
    return v;
  }
};

// Calls f(residual, sum), each std::true_type or std::false_type: whether b
// has that operand.
template <class B, class F>
static void with_inputs(const B& b, F&& f) {
  dispatch_bool(b.residual.data, [&](auto residual) { dispatch_bool(b.sum.data, [&](auto sum) { f(residual, sum); }); });
}

// Calls f(Block) with compile-time dtypes when every operand present has x's
// dtype, else with the run-time ones.
template <class F>
static void with_block(const GroupNormLines& a, F&& f) {
  const DType t = a.x.dtype;
  bool one_type = true;
  for (const GroupNormOperand* o : {&a.residual, &a.mul, &a.y, &a.sum}) one_type = one_type && (!o->data || o->dtype == t);
  if (one_type)
    return dispatch_float(t, [&](auto c) {
      f(Block<decltype(c)>{{a.x, c}, {a.residual, c}, {a.mul, c}, {a.y, c}, {a.sum, c}, a.lines, a.len});
    });
  f(Block<DType>{{a.x, a.x.dtype}, {a.residual, a.residual.dtype}, {a.mul, a.mul.dtype}, {a.y, a.y.dtype},
                 {a.sum, a.sum.dtype}, a.lines, a.len});
}

static inline __m512d widen_sum(__m512 v) {
  return _mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(v)), _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)));
}

// sums[i] += p[i] in f64, then p[i] = 0, for i < n.
static inline void flush(float* p, double* sums, std::int64_t n) {
  for (std::int64_t i = 0; i < n; i += 8) {
    const __mmask8 m = n - i >= 8 ? __mmask8(0xff) : __mmask8((1u << (n - i)) - 1u);
    const __m512d v = _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, p + i));
    _mm512_mask_storeu_pd(sums + i, m, _mm512_add_pd(_mm512_maskz_loadu_pd(m, sums + i), v));
    _mm256_mask_storeu_ps(p + i, m, _mm256_setzero_ps());
  }
}

static void run_stats(const GroupNormLines& a, float shift, double* sums) {
  with_block(a, [&](const auto& b) {
    with_inputs(b, [&](auto residual, auto sum) {
      const __m512 s = _mm512_set1_ps(shift);
      __m512d t1 = _mm512_setzero_pd(), t2 = _mm512_setzero_pd();
      for (std::int64_t l = 0; l < b.lines; ++l)
        for (std::int64_t i = 0; i < b.len;) {
          __m512 p1 = _mm512_setzero_ps(), p2 = _mm512_setzero_ps();
          const std::int64_t end = b.len - i > kFlush * 16 ? i + kFlush * 16 : b.len;
          for_each16(end - i, [&](std::int64_t j, __mmask16 m) {  // whole vectors unmasked (vec.hpp)
            const __m512 d = _mm512_maskz_sub_ps(m, b.template stats16<residual(), sum()>(l, i + j, m), s);  // masked lanes add nothing
            p1 = _mm512_add_ps(p1, d);
            p2 = _mm512_fmadd_ps(d, d, p2);
          });
          i = end;
          t1 = _mm512_add_pd(t1, widen_sum(p1));
          t2 = _mm512_add_pd(t2, widen_sum(p2));
        }
      sums[0] += _mm512_reduce_add_pd(t1);
      sums[1] += _mm512_reduce_add_pd(t2);
    });
  });
}

// Per-channel partials live in scratch (L1-resident for any practical C).
// Lines go in tiles of kTileLines, which stay in L1 while each V vectors of
// channels sum down the tile in registers: scratch is read and written once
// per tile, not once per line (two stores and two loads per vector of x).
// Four vectors at a time give four independent add chains per line: with one,
// each vector waited on the previous line's add (~5 cycles per vector).
static constexpr std::int64_t kTileLines = 8;

// The lines ahead go to L2, this far ahead of the tile: 2 KiB ahead into L1
// (prefetch_ahead) is inside the tile, and the pass read memory at half the
// bandwidth; further ahead into L1 evicted the tile. NHWC [16, 64, 64, 320],
// 1 thread, alternating: f32 12.5 -> 19.5 GB/s, with a residual and SiLU
// 9.5 -> 12-13.5; bf16 10.5 -> 11-12 and 6.8 -> 8.1-8.6.
static constexpr std::int64_t kStatsPrefetchBytes = 16384;
__attribute__((always_inline)) static inline void prefetch_stats_lines(const char* p, std::int64_t bytes) {
  prefetch_lines<_MM_HINT_T1>(p + kStatsPrefetchBytes, bytes);
}

// Channels [i, i + 16 V) of the tile's lines [t0, t1) into p1 / p2.
template <int V, bool Residual, bool Sum, class B>
static inline void sum_down_tile(const B& b, std::int64_t t0, std::int64_t t1, std::int64_t i, __mmask16 last,
                                 const float* shift, float* p1, float* p2) {
  __m512 s[V], s1[V], s2[V];
  for (int v = 0; v < V; ++v) {
    const __mmask16 m = v == V - 1 ? last : __mmask16(0xffff);
    s[v] = _mm512_maskz_loadu_ps(m, shift + i + 16 * v);
    s1[v] = _mm512_maskz_loadu_ps(m, p1 + i + 16 * v);
    s2[v] = _mm512_maskz_loadu_ps(m, p2 + i + 16 * v);
  }
  for (std::int64_t l = t0; l < t1; ++l) {
    prefetch_stats_lines(b.x.at(l, i), 16 * V * bytes_of(b.x.t));
    if constexpr (Residual) prefetch_stats_lines(b.residual.at(l, i), 16 * V * bytes_of(b.residual.t));
    for (int v = 0; v < V; ++v) {
      const __mmask16 m = v == V - 1 ? last : __mmask16(0xffff);
      const __m512 d = _mm512_maskz_sub_ps(m, b.template stats16<Residual, Sum>(l, i + 16 * v, m), s[v]);
      s1[v] = _mm512_add_ps(s1[v], d);
      s2[v] = _mm512_fmadd_ps(d, d, s2[v]);
    }
  }
  for (int v = 0; v < V; ++v) {
    const __mmask16 m = v == V - 1 ? last : __mmask16(0xffff);
    _mm512_mask_storeu_ps(p1 + i + 16 * v, m, s1[v]);
    _mm512_mask_storeu_ps(p2 + i + 16 * v, m, s2[v]);
  }
}

static void column_stats(const GroupNormLines& a, const float* shift, double* sums, float* scratch) {
  float* p1 = scratch;
  float* p2 = scratch + a.len;
  for (std::int64_t i = 0; i < 2 * a.len; ++i) scratch[i] = 0.0f;
  with_block(a, [&](const auto& b_in) {
    with_inputs(b_in, [&](auto residual, auto sum) {
      const auto b = b_in;  // in registers: the stores to sum (char*) would reload the fields of a reference
      for (std::int64_t l0 = 0; l0 < b.lines; l0 += kFlush) {
        const std::int64_t l1 = b.lines - l0 > kFlush ? l0 + kFlush : b.lines;
        for (std::int64_t t0 = l0; t0 < l1; t0 += kTileLines) {
          const std::int64_t t1 = std::min(l1, t0 + kTileLines);
          std::int64_t i = 0;
          for (; i + 64 <= b.len; i += 64) sum_down_tile<4, residual(), sum()>(b, t0, t1, i, 0xffff, shift, p1, p2);
          for (; i < b.len; i += 16) sum_down_tile<1, residual(), sum()>(b, t0, t1, i, tail_mask(b.len - i), shift, p1, p2);
        }
        flush(p1, sums, b.len);
        flush(p2, sums + b.len, b.len);
      }
    });
  });
}

// The lines of [p, p + bytes) into cache for the next statistics pass, a
// pass later: to L2, which hands them to the L3 as this pass goes on.
__attribute__((always_inline)) static inline void prefetch_next(const char* p, std::int64_t bytes) {
  prefetch_lines<_MM_HINT_T2>(p, bytes);
}

// The apply loop for one shape of its operands: a residual to add or not
// (v is x, or the sum when the stats pass wrote one), one coefficient per
// channel (channels last) or one per line (channels first). `b` and `c` come
// by value, so their fields stay in registers: through references, every
// store of y (through char*) made the loop load them all again, and test
// for each operand per vector. 64 elements per step, as Vecs<4> through the
// SiLU (math.hpp: the four chains overlap), then 32 as Vecs<2>, go out in
// 64-byte vectors for 16-bit y (put32: one word permute narrows two halves;
// a vpmovdw store per 16 was most of the bf16 pass), the tail 16 at a time.
template <bool Residual, bool PerChannel, bool Silu, bool Mul, class B>
static void apply_lines(const B b, const GroupNormCoefs c) {
  // SiLU to the precision y keeps: for bf16 y (compile-time) exp16_bf16 and
  // rcp14 instead of the division (which bounded the bf16 pass on an AMD
  // EPYC, Zen 4: its divider takes ~5 cycles a vector).
  constexpr DType kSiluPrecision =
      std::is_same_v<std::remove_cvref_t<decltype(b.y.t)>, std::integral_constant<DType, DType::bf16>> ? DType::bf16 : DType::f32;
  const auto in = b.sum.data ? b.sum : b.x;  // once per call
  const bool stream = c.stream_y;
  // y at elements [i, i + 16 N) of line l, the last vector's lanes masked by m.
  const auto y_at = [&](auto vectors, std::int64_t l, std::int64_t i, __mmask16 m) __attribute__((always_inline)) {
    constexpr int N = decltype(vectors)::value;
    Vecs<N> t;
#pragma GCC unroll 4
    for (int k = 0; k < N; ++k) {
      const __mmask16 mk = lanes_of(k, N, m);
      const std::int64_t j = i + 16 * k;
      __m512 v = in.load(l, j, mk);
      if constexpr (Residual) v = _mm512_add_ps(v, b.residual.load(l, j, mk));
      const auto coef = [&](const float* p) { return PerChannel ? _mm512_maskz_loadu_ps(mk, p + j) : _mm512_set1_ps(*p); };
      t.v[k] = _mm512_fmadd_ps(_mm512_sub_ps(v, coef(c.mean)), coef(c.scale), coef(c.bias));
    }
    if constexpr (Silu) t = silu16<kSiluPrecision>(t);
    if constexpr (Mul)
#pragma GCC unroll 4
      for (int k = 0; k < N; ++k) t.v[k] = _mm512_mul_ps(t.v[k], b.mul.load(l, i + 16 * k, lanes_of(k, N, m)));
    return t;
  };
  for (std::int64_t l = 0; l < b.lines; ++l) {
    // n elements from i of line l: theirs ahead into L1, the next pass's into L2.
    const auto fetch = [&](std::int64_t i, std::int64_t n) {
      prefetch_ahead(in.at(l, i), n * bytes_of(in.t));
      if constexpr (Residual) prefetch_ahead(b.residual.at(l, i), n * bytes_of(b.residual.t));
      if (c.next_x) prefetch_next(b.x.at(l, i) + c.next_x, n * bytes_of(b.x.t));
      if (c.next_residual) prefetch_next(b.residual.at(l, i) + c.next_residual, n * bytes_of(b.residual.t));
    };
    std::int64_t i = 0;
    for (; i + 64 <= b.len; i += 64) {
      fetch(i, 64);
      put_vecs(b.y.at(l, i), b.y.t, y_at(std::integral_constant<int, 4>{}, l, i, 0xffff), stream);
    }
    if (i + 32 <= b.len) {
      fetch(i, 32);
      put_vecs(b.y.at(l, i), b.y.t, y_at(std::integral_constant<int, 2>{}, l, i, 0xffff), stream);
      i += 32;
    }
    for_each16(b.len - i, [&](std::int64_t j, __mmask16 m) {
      fetch(i + j, 16);
      put16(b.y.at(l, i + j), b.y.t, y_at(std::integral_constant<int, 1>{}, l, i + j, m).v[0], m, stream);
    });
  }
  if (stream) _mm_sfence();
}

static void apply(const GroupNormLines& a, const GroupNormCoefs& c) {
  with_block(a, [&](const auto& b) {
    with_inputs(b, [&](auto residual, auto sum) {
      dispatch_bool(c.stride != 0, [&](auto per_channel) {
        dispatch_bool(c.silu, [&](auto silu) {
          dispatch_bool(b.mul.data, [&](auto mul) {
            // With a sum, v is read back from it (the residual is in it).
            apply_lines<residual() && !sum(), per_channel(), silu(), mul()>(b, c);
          });
        });
      });
    });
  });
}

}  // namespace tessera::kernels::avx512
