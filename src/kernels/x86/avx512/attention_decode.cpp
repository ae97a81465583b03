// Decode attention on AVX-512: a few query rows (positions × the query heads
// of one kv head, at most 16) against a long run of keys, where the kernel
// must keep up with memory. Per block of 16 keys, in three passes over the
// rows (each a run of independent work the core can overlap):
//   1. scores (score_keys16, attention_common.hpp): q stays in registers;
//      each score is a dot product with a key row (one FMA chain per row
//      and key, two rows at a time), a row's 16 partial vectors summed into
//      one vector of 16 scores by a shuffle tree;
//   2. online softmax on that vector (int8: times the keys' scales first);
//   3. O_row = alpha · O_row + Σ p_t V_t with O_row in registers (int8: p
//      times the values' scales).
// The block's K and V rows come from memory once and from L1 after. bf16
// rows of whole 64-byte steps are read in place (Bf16Split); others (int8,
// and bf16 at D = 80) are converted to f32 once per block. A block ahead
// (Prefetcher::add_block_ahead) is prefetched a few rows at a time between the
// keys' arithmetic.
#include "kernels/scratch.hpp"
#include "kernels/x86/avx512/attention_common.hpp"

namespace tessera::kernels::avx512 {

namespace {

// How the scores and pv_rows read vector v (features 16v ..) of a K or V
// row. F32Rows: f32 rows as stored (f32 caches, and the f32 copies of bf16
// rows of an odd number of vectors and of int8 rows). Bf16Split: bf16 rows in
// place, each 64 bytes (32 features) giving two vectors, the even features
// (shifted up) then the odd ones (masked), one instruction each where the
// copy took three and a store; q and the row sums keep the same order
// (to_split_order).
struct F32Rows {
  static __m512 load(const void* row, int v) { return _mm512_loadu_ps(static_cast<const float*>(row) + 16 * v); }
};
struct Bf16Split {
  static __m512 load(const void* row, int v) {
    const __m512i x = _mm512_loadu_si512(static_cast<const char*>(row) + 64 * (v / 2));
    return v % 2 == 0 ? bf16_even(x) : bf16_odd(x);
  }
};
// A row's 32 features at p into Bf16Split's order (the evens, then the odds), and back.
static inline void to_split_order(float* p) {
  const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512 a = _mm512_loadu_ps(p), b = _mm512_loadu_ps(p + 16);
  _mm512_storeu_ps(p, _mm512_permutex2var_ps(a, evens, b));
  _mm512_storeu_ps(p + 16, _mm512_permutex2var_ps(a, _mm512_add_epi32(evens, _mm512_set1_epi32(1)), b));
}
static inline void from_split_order(float* p) {
  const __m512i low = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512 e = _mm512_loadu_ps(p), o = _mm512_loadu_ps(p + 16);
  _mm512_storeu_ps(p, _mm512_permutex2var_ps(e, low, o));
  _mm512_storeu_ps(p + 16, _mm512_permutex2var_ps(e, _mm512_add_epi32(low, _mm512_set1_epi32(8)), o));
}

// q . k as score_keys16 wants it: q rows of f32, key rows read by Rows,
// 16 features a vector, one FMA chain per row and key.
template <class Rows>
struct F32Dot {
  using Vec = __m512;
  static __m512 q(const char* row, int v) { return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + 16 * v); }
  static __m512 k(const void* row, int v) { return Rows::load(row, v); }
  static __m512 dot(__m512 acc, __m512 k, __m512 q) { return _mm512_fmadd_ps(q, k, acc); }
  static __m512 sums(__m512 acc) { return acc; }
};

// o[R][16 NV] = alpha o + p[R][0 : keys] V, o in registers, each V vector
// loaded once for the R rows. Keys past a row's visible count have p = 0.
template <int NV, int R, class Rows, class Prefetch>
static void pv_rows(const float* p, const float* alpha, float* o, const void* const* vrow, std::int64_t keys, Prefetch& pf) {
  constexpr std::int64_t dim = 16 * NV;
  __m512 acc[R][NV];
  for (int i = 0; i < R; ++i) {
    const __m512 av = _mm512_set1_ps(alpha[i]);
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_mul_ps(av, _mm512_loadu_ps(o + i * dim + 16 * v));
  }
  for (std::int64_t t = 0; t < keys; ++t) {
    pf.tick();
    __m512 b[R];
    for (int i = 0; i < R; ++i) b[i] = _mm512_set1_ps(p[i * kDecodeKeys + t]);
    for (int v = 0; v < NV; ++v) {
      __m512 x = Rows::load(vrow[t], v);
      if (R > 1) keep_in_register(x);
      for (int i = 0; i < R; ++i) acc[i][v] = _mm512_fmadd_ps(b[i], x, acc[i][v]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(o + i * dim + 16 * v, acc[i][v]);
}

// Rows per pass of the scores and P V: two while q for two fits in registers (D <= 128).
template <int NV>
constexpr int kPairRows = NV <= 8 ? 2 : 1;

// One block of n <= 16 keys from tb for every row, in three passes — scores,
// softmax, P V — so that each pass is a run of independent rows the core can
// overlap, instead of one long dependent chain per row. Rows go in pairs
// while q for two fits in registers (D <= 128).
template <int NV, class Rows, class Prefetch>
static void attend_block(const AttentionArgs& a, const RowView* view, const float* q, float* o, float* m, float* l,
                         const void* const* krow, const void* const* vrow, std::int64_t tb, std::int64_t n,
                         const float* k_scale, const float* v_scale, Prefetch& pf) {
  constexpr std::int64_t dim = 16 * NV;
  constexpr int kPair = kPairRows<NV>;
  const std::int64_t rows = a.rows;
  std::int64_t valid[kMaxRows];
  alignas(64) float s[kMaxRows * kDecodeKeys];
  alignas(64) float p[kMaxRows * kDecodeKeys];
  float alpha[kMaxRows];
  for (std::int64_t r = 0; r < rows; ++r) valid[r] = std::clamp<std::int64_t>(view[r].limit - tb, 0, n);

  std::int64_t r = 0;
  for (; r + kPair <= rows; r += kPair)
    if (valid[r] > 0 || valid[r + kPair - 1] > 0)
      score_keys16<NV, kPair, F32Dot<Rows>>(reinterpret_cast<const char*>(q + r * dim), 4 * dim, krow, s + r * kDecodeKeys, kDecodeKeys, pf);
  for (; r < rows; ++r)
    if (valid[r] > 0) score_keys16<NV, 1, F32Dot<Rows>>(reinterpret_cast<const char*>(q + r * dim), 4 * dim, krow, s + r * kDecodeKeys, kDecodeKeys, pf);

  for (r = 0; r < rows; ++r) {
    __m512 x = _mm512_load_ps(s + r * kDecodeKeys);
    if (k_scale) x = _mm512_mul_ps(x, _mm512_load_ps(k_scale));
    softmax_step<1>(a, view[r], tb, valid[r], &x, m[r], l[r], alpha[r]);
    _mm512_store_ps(p + r * kDecodeKeys, v_scale ? _mm512_mul_ps(x, _mm512_load_ps(v_scale)) : x);
  }

  for (r = 0; r + kPair <= rows; r += kPair) {
    const std::int64_t keys = std::max(valid[r], valid[r + kPair - 1]);
    if (keys > 0) pv_rows<NV, kPair, Rows>(p + r * kDecodeKeys, alpha + r, o + r * dim, vrow, keys, pf);
  }
  for (; r < rows; ++r)
    if (valid[r] > 0) pv_rows<NV, 1, Rows>(p + r * kDecodeKeys, alpha + r, o + r * dim, vrow, valid[r], pf);
}

// 16 features of a key or value row of storage type T as f32 (int8: unscaled;
// the scales apply to whole scores and probabilities, once per key).
template <DType T>
static inline __m512 load_row16(const void* row, std::int64_t d) {
  if constexpr (T == DType::i8) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const std::int8_t*>(row) + d));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const std::uint16_t*>(row) + d));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

template <int NV, DType T>
static void decode(const AttentionArgs& a, std::int64_t t0, std::int64_t t1, const AttentionOutput& out) {
  constexpr std::int64_t dim = 16 * NV, row_bytes = dim * (T == DType::f32 ? 4 : T == DType::bf16 ? 2 : 1);
  constexpr bool split = T == DType::bf16 && NV % 2 == 0;  // bf16 rows read in place
  const std::int64_t rows = a.rows;
  RowView view[kMaxRows];
  const std::int64_t t_end = decode_views(a, t1, view);

  // Row state, then f32 copies of a block's K and V rows and one zero row.
  const std::int64_t state = (rows * (2 * dim + 2) + 15) / 16 * 16;  // kb and vb start on cache lines
  float* q = static_cast<float*>(thread_scratch(ScratchSlot::a_panel, sizeof(float) * (state + (2 * kDecodeKeys + 1) * dim)));
  float* o = q + rows * dim;
  float* m = o + rows * dim;
  float* l = m + rows;
  float* kb = q + state;
  float* vb = kb + kDecodeKeys * dim;
  float* zero = vb + kDecodeKeys * dim;
  std::fill(zero, zero + dim, 0.0f);
  const __m512 scale = _mm512_set1_ps(a.scale);
  for (std::int64_t r = 0; r < rows; ++r) {
    const void* qr = q_row(a, r);
    for (std::int64_t d = 0; d < dim; d += 16) {
      _mm512_storeu_ps(q + r * dim + d, _mm512_mul_ps(scale, load16(advance(qr, a.q_dtype, d), a.q_dtype, 0xffff)));
      _mm512_storeu_ps(o + r * dim + d, _mm512_setzero_ps());
    }
    if constexpr (split)
      for (std::int64_t d = 0; d < dim; d += 32) to_split_order(q + r * dim + d);
    m[r] = kNegInf;
    l[r] = 0.0f;
  }

  // Prefetch ticks per block: a key of the conversion, four keys of the
  // scores and a key of P V per pass over the rows.
  const int passes = int(rows / kPairRows<NV> + rows % kPairRows<NV>);
  const int ticks = (T == DType::f32 || split ? 0 : int(kDecodeKeys)) + passes * int(4 + kDecodeKeys);
  const KvSource& kv = a.kv;
  KvRows<kDecodeKeys> block;
  Prefetcher<row_bytes, kDecodeKeys> pf(a.prefetch_l1);
  const void* krow[kDecodeKeys];
  const void* vrow[kDecodeKeys];
  for (std::int64_t tb = t0; tb < t_end; tb += kDecodeKeys) {
    const std::int64_t n = std::min(kDecodeKeys, t_end - tb);
    gather_rows(kv, tb, n, block);
    pf.add_block_ahead(kv, tb, t_end);
    pf.pace(ticks);
    for (std::int64_t i = n; i < kDecodeKeys; ++i) krow[i] = vrow[i] = zero;
    if constexpr (T == DType::f32 || split) {
      std::copy(block.k, block.k + n, krow);
      std::copy(block.v, block.v + n, vrow);
      attend_block<NV, std::conditional_t<split, Bf16Split, F32Rows>>(a, view, q, o, m, l, krow, vrow, tb, n, nullptr, nullptr, pf);
    } else {
      // Converted once per block; the first half of the prefetches go out meanwhile.
      for (std::int64_t i = 0; i < n; ++i) {
        for (int v = 0; v < NV; ++v) {
          _mm512_storeu_ps(kb + i * dim + 16 * v, load_row16<T>(block.k[i], 16 * v));
          _mm512_storeu_ps(vb + i * dim + 16 * v, load_row16<T>(block.v[i], 16 * v));
        }
        krow[i] = kb + i * dim;
        vrow[i] = vb + i * dim;
        pf.tick();
      }
      alignas(64) float ks[kDecodeKeys] = {}, vs[kDecodeKeys] = {};
      if constexpr (T == DType::i8) std::copy(block.k_scale, block.k_scale + n, ks), std::copy(block.v_scale, block.v_scale + n, vs);
      attend_block<NV, F32Rows>(a, view, q, o, m, l, krow, vrow, tb, n, T == DType::i8 ? ks : nullptr, T == DType::i8 ? vs : nullptr, pf);
    }
    pf.issue(0, 1);  // whatever is left
  }
  if constexpr (split)  // the sums back in order
    for (std::int64_t d = 0; d < rows * dim; d += 32) from_split_order(o + d);
  finish_rows(a, out, o, a.head_dim, m, l);
}

}  // namespace

void attention_decode(const AttentionArgs& a, std::int64_t t0, std::int64_t t1, const AttentionOutput& out) {
  dispatch_decode(a.head_dim, a.kv.dtype, [&](auto units, auto type) { decode<units(), type()>(a, t0, t1, out); });
}

}  // namespace tessera::kernels::avx512
