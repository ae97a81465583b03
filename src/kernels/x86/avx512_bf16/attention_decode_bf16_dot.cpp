// Decode attention over a bf16 KV cache with bf16 dot products (vdpbf16ps),
// for bf16 q: the f32 kernel (avx512/attention_decode.cpp) widens every K
// and V vector to f32 and multiplies 16 features per FMA, about twice what
// memory takes at 1 thread; one vdpbf16ps multiplies 32 as stored. Blocks
// of 64 keys, as the int8 kernel's (attention_decode_vnni.cpp), whose
// passes this one follows:
//   1. scores, 16 keys at a time: q scaled and rounded to bf16 once per
//      call; one vdpbf16ps per 32 features of a key and row, a row's 16
//      partial vectors of a key summed into one score by the shuffle tree;
//   2. the online softmax (shared with the f32 kernel);
//   3. P V: each row's probabilities rounded to bf16, a pair of keys per
//      32-bit broadcast, against V rows interleaved two keys to a 32-bit
//      lane (one word unpack per 32 features and pair of keys, once per
//      block for all rows).
// The row sums live in the interleaved order of features (interleave_v) and
// are put back in order once, at the end. Numerics: q and P rounded to bf16,
// as the bf16 flash kernels do: within the bf16 attention tolerance.
#include <cstring>

#include "kernels/scratch.hpp"
#include "kernels/x86/avx512/attention_common.hpp"

namespace tessera::kernels::avx512_bf16 {

namespace {

using namespace avx512;  // this level extends AVX-512: its helpers apply as they are

constexpr std::int64_t kBlock = 4 * kDecodeKeys;  // keys per block
constexpr int kGroups = int(kBlock / kDecodeKeys);

// Row r of q times a.scale, rounded to bf16.
static void q_bf16(const AttentionArgs& a, std::int64_t r, std::uint16_t* out) {
  const void* src = q_row(a, r);
  const __m512 scale = _mm512_set1_ps(a.scale);
  for (std::int64_t d = 0; d < a.head_dim; d += 32) {
    const __m512 lo = _mm512_mul_ps(scale, load16(advance(src, a.q_dtype, d), a.q_dtype, 0xffff));
    const __m512 hi = _mm512_mul_ps(scale, load16(advance(src, a.q_dtype, d + 16), a.q_dtype, 0xffff));
    _mm512_storeu_si512(out + d, to_bf16x2(lo, hi));
  }
}

// q . k as score_keys16 wants it: 32 bf16 features a vector, pairs summed in f32 lanes.
struct Bf16Dot {
  using Vec = __m512;
  static __m512 q(const char* row, int v) { return _mm512_loadu_ps(row + 64 * v); }
  static __m512 k(const void* row, int v) { return _mm512_loadu_ps(static_cast<const char*>(row) + 64 * v); }
  static __m512 dot(__m512 acc, __m512 k, __m512 q) { return _mm512_dpbf16_ps(acc, (__m512bh)k, (__m512bh)q); }
  static __m512 sums(__m512 acc) { return acc; }
};

// The block's V rows for vdpbf16ps: for key pair t (keys 2t, 2t + 1) and
// 32-feature chunk c, vectors out[(t DQ + c) 2 + h] whose 32-bit lane
// 4i + e holds feature 32c + 8i + 4h + e of both keys (a word unpack within
// 128-bit lanes).
template <int DQ>
static void interleave_v(const void* const* vrow, __m512i* out) {
  const auto row = [&](std::int64_t i, int c) { return _mm512_loadu_si512(static_cast<const char*>(vrow[i]) + 64 * c); };
  for (std::int64_t t = 0; t < kBlock / 2; ++t)
    for (int c = 0; c < DQ; ++c) {
      const __m512i v0 = row(2 * t, c), v1 = row(2 * t + 1, c);
      out[(t * DQ + c) * 2] = _mm512_unpacklo_epi16(v0, v1);
      out[(t * DQ + c) * 2 + 1] = _mm512_unpackhi_epi16(v0, v1);
    }
}
// Where interleave_v's order puts feature d.
static inline std::int64_t interleaved_at(std::int64_t d) {
  const std::int64_t c = d / 32, i = d % 32 / 8, h = d % 8 / 4, e = d % 4;
  return 32 * c + 16 * h + 4 * i + e;
}

// o[PR rows] = alpha o + P V over `pairs` pairs of keys: p the rows' bf16
// probabilities (kBlock apart, zero past the visible keys), o in
// interleave_v's order.
template <int DQ, int PR>
static void pv_rows(const std::uint16_t* p, std::int64_t pairs, const __m512i* vi, const float* alpha, float* o) {
  constexpr std::int64_t dim = 32 * DQ;
  __m512 acc[PR][2 * DQ];
  for (int r = 0; r < PR; ++r)
    for (int i = 0; i < 2 * DQ; ++i) acc[r][i] = _mm512_mul_ps(_mm512_set1_ps(alpha[r]), _mm512_loadu_ps(o + r * dim + 16 * i));
  for (std::int64_t t = 0; t < pairs; ++t) {
    __m512i pair[PR];
    for (int r = 0; r < PR; ++r) {
      std::int32_t bits;
      std::memcpy(&bits, p + r * kBlock + 2 * t, sizeof(bits));
      pair[r] = _mm512_set1_epi32(bits);
    }
    for (int i = 0; i < 2 * DQ; ++i) {
      const __m512i v = _mm512_load_si512(vi + t * 2 * DQ + i);
      for (int r = 0; r < PR; ++r) acc[r][i] = _mm512_dpbf16_ps(acc[r][i], (__m512bh)v, (__m512bh)pair[r]);
    }
  }
  for (int r = 0; r < PR; ++r)
    for (int i = 0; i < 2 * DQ; ++i) _mm512_storeu_ps(o + r * dim + 16 * i, acc[r][i]);
}

template <int DQ>
static void decode(const AttentionArgs& a, std::int64_t t0, std::int64_t t1, const AttentionOutput& out) {
  constexpr std::int64_t dim = 32 * DQ, row_bytes = 2 * dim;
  constexpr int R = DQ <= 2 ? 4 : 2;   // rows per score pass: q, the sums and a key's vectors in registers
  constexpr int PR = DQ <= 4 ? 2 : 1;  // rows per P V pass: their sums in registers
  const std::int64_t rows = a.rows;
  RowView view[kMaxRows];
  const std::int64_t t_end = decode_views(a, t1, view);

  // Scratch: row sums (interleaved features), then in order; m, l; q rows,
  // the rows' probabilities and a zero row in bf16.
  const std::size_t floats = std::size_t(2 * rows * dim + 2 * rows);
  const std::size_t halves = std::size_t((rows + 1) * dim + rows * kBlock);
  auto* o = static_cast<float*>(thread_scratch(ScratchSlot::a_panel, floats * sizeof(float) + halves * 2));
  float* ordered = o + rows * dim;
  float* m = ordered + rows * dim;
  float* l = m + rows;
  auto* qb = reinterpret_cast<std::uint16_t*>(l + rows);
  std::uint16_t* zero = qb + rows * dim;
  std::uint16_t* pb = zero + dim;
  std::memset(zero, 0, dim * 2);
  for (std::int64_t r = 0; r < rows; ++r) {
    q_bf16(a, r, qb + r * dim);
    std::fill(o + r * dim, o + (r + 1) * dim, 0.0f);
    m[r] = kNegInf;
    l[r] = 0.0f;
  }

  KvRows<kBlock> block;
  Prefetcher<row_bytes, kBlock> pf;
  alignas(64) float s[kMaxRows * kBlock];
  alignas(64) __m512i vi[kBlock * DQ];  // per pair of keys, 2 DQ vectors
  float alpha[kMaxRows];
  const int chunks = int((rows + R - 1) / R), shares = kGroups * chunks + 1 + int((rows + PR - 1) / PR);
  for (std::int64_t tb = t0; tb < t_end; tb += kBlock) {
    std::int64_t valid[kMaxRows];
    const std::int64_t n = start_block(a, view, tb, t_end, zero, block, pf, valid);
    int share = 0;
    score_block<DQ, R, Bf16Dot>(reinterpret_cast<const char*>(qb), 2 * dim, rows, block, n, s, pf, share, shares);
    interleave_v<DQ>(block.v, vi);
    pf.issue(share++, shares);

    const int groups = int((n + kDecodeKeys - 1) / kDecodeKeys);
    for (std::int64_t r = 0; r < rows; ++r) {
      __m512 x[kGroups];
      for (int g = 0; g < kGroups; ++g) x[g] = g < groups ? _mm512_load_ps(s + r * kBlock + 16 * g) : _mm512_set1_ps(kNegInf);
      softmax_step<kGroups>(a, view[r], tb, valid[r], x, m[r], l[r], alpha[r]);
      for (int g = 0; g < kGroups; g += 2) _mm512_storeu_si512(pb + r * kBlock + 16 * g, to_bf16x2(x[g], x[g + 1]));
    }
    std::int64_t r = 0;
    for (; r + PR <= rows; r += PR) {
      pf.issue(share++, shares);
      const std::int64_t keys = PR == 2 ? std::max(valid[r], valid[r + PR - 1]) : valid[r];
      if (keys > 0) pv_rows<DQ, PR>(pb + r * kBlock, (keys + 1) / 2, vi, alpha + r, o + r * dim);  // else alpha is 1
    }
    for (; r < rows; ++r) pv_rows<DQ, 1>(pb + r * kBlock, (valid[r] + 1) / 2, vi, alpha + r, o + r * dim);
    pf.issue(0, 1);  // whatever is left
  }

  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t d = 0; d < dim; ++d) ordered[r * dim + d] = o[r * dim + interleaved_at(d)];
  finish_rows(a, out, ordered, dim, m, l);
}

}  // namespace

void attention_decode_bf16_dot(const AttentionArgs& a, std::int64_t t0, std::int64_t t1, const AttentionOutput& out) {
  switch (a.head_dim) {  // the head dims the row admits (kernels/attention.cpp)
    case 64: return decode<2>(a, t0, t1, out);
    case 96: return decode<3>(a, t0, t1, out);
    case 128: return decode<4>(a, t0, t1, out);
    default: return decode<8>(a, t0, t1, out);
  }
}

}  // namespace tessera::kernels::avx512_bf16
