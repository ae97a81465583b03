// Top-k over contiguous rows. Long rows (sampling's top 50 of a 128k-token
// vocabulary): the k best elements seen so far in a heap whose front is the
// worst of them, and a filter that compares 16 elements at a time with that
// worst one, so that only the few elements that could enter (about k
// ln(length / k) of a row in random order) leave the vector loop. Short
// rows with small k (MoE routing): k passes of a vector max.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "kernels/topk.hpp"
#include "kernels/x86/avx2/vec.hpp"
#include "kernels/x86/load1.hpp"

namespace tessera::kernels::avx2 {

namespace {

// An element's rank as one integer, larger ranking first: its value's bits
// made monotonic (negative floats' bits reversed, -0 taken as +0, NaN above
// +inf: at 0xffffffff where largest, at 0 where smallest, whose order the
// value's bits take reversed) over the complement of its index, so that a
// tie goes to the lower index: one integer compare per test and heap step,
// no NaN branches. Rows up to 2^32 elements (longer ones take the
// reference row).
using Rank = std::uint64_t;
template <bool Largest>
__attribute__((always_inline)) inline Rank rank_of(float v, std::int64_t index) {
  std::uint32_t bits;
  if (std::isnan(v)) {
    bits = Largest ? 0xffffffffu : 0;
  } else {
    std::memcpy(&bits, &v, sizeof(bits));
    if (v == 0.0f) bits = 0;
    bits = bits >> 31 ? ~bits : bits | 0x80000000u;  // monotonic, as unsigned
    if (!Largest) bits = ~bits;
  }
  return Rank(bits) << 32 | (0xffffffffu - std::uint32_t(index));
}
inline std::int64_t index_of(Rank r) { return 0xffffffffu - std::uint32_t(r); }

// The filter's test, true where v may rank before the heap's worst: greater
// (less) or unordered, so a NaN on either side goes to the exact test.
template <bool Largest>
__attribute__((always_inline)) inline __m256 may_enter(__m256 v, __m256 worst) {
  return _mm256_cmp_ps(v, worst, Largest ? _CMP_NLE_UQ : _CMP_NGE_UQ);
}

// The ranks of the k best of a row of `length` elements of type T into
// heap[0, k), best first: the k best so far in a heap whose front is the
// worst of them (lowest rank), and the filter against that one.
template <bool Largest, class T>
void filter_top_k(const char* x, T t, std::int64_t length, std::int64_t k, Rank* heap) {
  const std::int64_t es = bytes_of(t);
  const auto value = [&](std::int64_t i) { return load1(x, t, i); };
  for (std::int64_t i = 0; i < k; ++i) heap[i] = rank_of<Largest>(value(i), i);
  std::make_heap(heap, heap + k, std::greater<Rank>());
  __m256 worst = _mm256_set1_ps(value(index_of(heap[0])));
  const auto offer = [&](std::int64_t c, __m256 v, int lanes) {
    alignas(32) float e[8];
    _mm256_store_ps(e, v);
    for (; lanes; lanes &= lanes - 1) {
      const int i = __builtin_ctz(unsigned(lanes));
      const Rank r = rank_of<Largest>(e[i], c + i);
      if (r <= heap[0]) continue;
      std::pop_heap(heap, heap + k, std::greater<Rank>());
      heap[k - 1] = r;
      std::push_heap(heap, heap + k, std::greater<Rank>());
      worst = _mm256_set1_ps(value(index_of(heap[0])));
    }
  };
  std::int64_t c = k;
  for (; c + 16 <= length; c += 16) {
    const __m256 v0 = load8(x + c * es, t), v1 = load8(x + (c + 8) * es, t);
    const __m256 m0 = may_enter<Largest>(v0, worst), m1 = may_enter<Largest>(v1, worst);
    if (_mm256_testz_ps(_mm256_or_ps(m0, m1), _mm256_or_ps(m0, m1))) continue;
    offer(c, v0, _mm256_movemask_ps(m0));
    offer(c + 8, v1, _mm256_movemask_ps(m1));
  }
  for (; c < length; c += 8) {
    const std::int64_t n = std::min<std::int64_t>(8, length - c);
    const __m256 v = load8_n(x + c * es, t, n);
    offer(c, v, _mm256_movemask_ps(may_enter<Largest>(v, worst)) & ((1 << n) - 1));
  }
  std::sort_heap(heap, heap + k, std::greater<Rank>());  // highest rank first
}

// Short rows and small k (MoE routing: the top 2-8 of 8-256 experts): k
// passes of a vector max over the row, held as f32 in L1 (negated for the
// smallest), each taking the first untaken element equal to the max. The
// filter's branches depend on the data (whether an element passes, where it
// goes in the heap), and their mispredictions took most of its time on
// such rows (a driver, [4096, 64] f32, 1 thread, ns a row, filter ->
// passes: top 8 777 -> 275-303, top 1 180 -> 36-52). Taken where the k
// passes read at most kShortWork vectors: at 32 of 2048 (8192 vectors) the
// two measured alike, within this machine's noise. Returns false, having
// written nothing, for a row with a NaN: the filter's ranks order NaNs.
constexpr std::int64_t kShortRow = 2048, kShortWork = 2048;
template <bool Largest, class T>
bool short_row_top_k(const char* x, T t, std::int64_t length, std::int64_t k, Rank* ranks) {
  constexpr std::int64_t es = bytes_of(t);
  const std::int64_t vectors = (length + 7) / 8;
  alignas(32) float row[kShortRow];
  // A bit per lane. Lanes past the row hold -inf and come last, so an
  // element of the row, whose -inf ties with them, is found first.
  std::uint8_t taken[kShortRow / 8] = {};
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 nan = _mm256_setzero_ps();
  for (std::int64_t v = 0; v < vectors; ++v) {
    const std::int64_t n = std::min<std::int64_t>(8, length - 8 * v);
    __m256 e = load8_n(x + 8 * v * es, t, n);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(e, e, _CMP_UNORD_Q));
    if (!Largest) e = _mm256_xor_ps(e, _mm256_set1_ps(-0.0f));
    _mm256_store_ps(row + 8 * v, _mm256_blendv_ps(neg_inf, e, lanes_below(n)));
  }
  if (!_mm256_testz_ps(nan, nan)) return false;
  for (std::int64_t i = 0; i < k; ++i) {
    __m256 m0 = neg_inf, m1 = neg_inf;  // two chains: max_ps's latency, not its rate, bounds one
    std::int64_t v = 0;
    for (; v + 2 <= vectors; v += 2) m0 = _mm256_max_ps(m0, _mm256_load_ps(row + 8 * v)), m1 = _mm256_max_ps(m1, _mm256_load_ps(row + 8 * v + 8));
    if (v < vectors) m0 = _mm256_max_ps(m0, _mm256_load_ps(row + 8 * v));
    const __m256 m = _mm256_max_ps(m0, m1);
    // The max is an untaken element's (taken ones hold -inf; if the max is
    // -inf, an untaken -inf matches it), so the scan finds one.
    const __m256 best = _mm256_set1_ps(hmax(m));
    v = 0;
    unsigned lanes = 0;
    while (!(lanes = unsigned(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_load_ps(row + 8 * v), best, _CMP_EQ_OQ))) & ~unsigned(taken[v]) & 0xffu)) ++v;
    const int lane = __builtin_ctz(lanes);
    const std::int64_t index = 8 * v + lane;
    taken[v] = std::uint8_t(taken[v] | (1u << lane));
    row[index] = -std::numeric_limits<float>::infinity();
    ranks[i] = rank_of<Largest>(load1(x, t, index), index);
  }
  return true;
}

}  // namespace

void top_k_rows(const TopKArgs& a) {
  if (a.k == 0) return;
  std::vector<Rank> ranks(std::size_t(a.k));
  // The element type and the index type fixed at compile time: a library
  // memcpy and a type switch per element written cost more than the search
  // of a short row.
  dispatch_float(a.x_dtype, [&](auto t) {
    constexpr std::int64_t es = bytes_of(t);
    const bool short_row = a.length <= kShortRow && a.k * ((a.length + 7) / 8) <= kShortWork;
    const auto rows = [&]<class Index>() {
      for (std::int64_t j = 0; j < a.n; ++j) {
        const char* x = static_cast<const char*>(a.x) + j * a.x_stride * es;
        const auto top = [&]<bool Largest>() {
          if (short_row && short_row_top_k<Largest>(x, t, a.length, a.k, ranks.data())) return;
          filter_top_k<Largest>(x, t, a.length, a.k, ranks.data());
        };
        if (a.largest) top.template operator()<true>();
        else top.template operator()<false>();
        auto* values = static_cast<char*>(a.values) + j * a.v_stride * es;
        auto* indices = static_cast<Index*>(a.indices) + j * a.i_stride;
        for (std::int64_t i = 0; i < a.k; ++i) {
          const std::int64_t r = index_of(ranks[std::size_t(i)]);
          std::memcpy(values + i * a.v_step * es, x + r * es, es);
          indices[i * a.i_step] = Index(r);
        }
      }
    };
    if (a.index_dtype == DType::i32) rows.template operator()<std::int32_t>();
    else rows.template operator()<std::int64_t>();
  });
}

}  // namespace tessera::kernels::avx2
