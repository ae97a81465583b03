#include <algorithm>
#include <cstring>

#include "kernels/scratch.hpp"
#include "kernels/x86/avx2/epilogue.hpp"
#include "kernels/x86/avx2/matmul_pack.hpp"
#include "kernels/x86/epilogue_prefetch.hpp"

namespace tessera::kernels::avx2 {

namespace {

// Rows of C per micro-tile. 3 x 32 takes all 16 ymm (12 accumulators, 3 broadcasts of A, 1 vector of B) at 7 loads
// per 12 FMAs; the textbook 6 x 16 needs 8, and 4 x 32 would need 16 accumulators.
constexpr std::int64_t kMr = 3;

// part[0:MR, 0:32] = (first ? 0 : part) + A[0:MR, 0:kc] * B[0:kc, 0:32]. A is
// a packed k-major sliver ([k][3]), B a dense 32-wide panel: two sequential
// streams, one pointer each. The three broadcasts of A stay in registers and
// B passes through one, so every B vector loaded feeds MR FMAs.
template <int MR>
void micro_tile(std::int64_t kc, const float* a, const float* b, float* part, std::int64_t ldp, bool first) {
  __m256 acc[MR][4];
#pragma GCC unroll 3
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) acc[i][j] = first ? _mm256_setzero_ps() : _mm256_load_ps(part + i * ldp + 8 * j);
  // Two k per pass: with the loop's own uops a single k is 25 fused uops for 6 cycles of FMAs, over a 4-wide front end.
#pragma GCC unroll 2
  for (std::int64_t k = 0; k < kc; ++k) {
    const float* bk = b + k * kPanelCols;
    _mm_prefetch(reinterpret_cast<const char*>(bk + 8 * kPanelCols), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(bk + 8 * kPanelCols + 16), _MM_HINT_T0);
    __m256 av[MR];
#pragma GCC unroll 3
    for (int i = 0; i < MR; ++i) av[i] = _mm256_broadcast_ss(a + k * kMr + i);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m256 bv = _mm256_load_ps(bk + 8 * j);
#pragma GCC unroll 3
      for (int i = 0; i < MR; ++i) acc[i][j] = _mm256_fmadd_ps(av[i], bv, acc[i][j]);
    }
  }
#pragma GCC unroll 3
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) _mm256_store_ps(part + i * ldp + 8 * j, acc[i][j]);
}

using MicroTile = void (*)(std::int64_t, const float*, const float*, float*, std::int64_t, bool);
constexpr MicroTile kMicroTiles[kMr + 1] = {nullptr, micro_tile<1>, micro_tile<2>, micro_tile<3>};

// B of at most 8 columns (a conv to 3 or 4 channels, as SD's conv_out and its
// VAE decoder's): 32-column panels would leave 7/8 of every FMA idle, and
// packing A cost as much again, so C comes out of dot products along K
// instead: rows of A read in place, 8 k a step, against the transposed
// columns of B (bt: [N][k_pad], zeros past K), each (row, column) one vector
// of partial sums, added up across at the end.

// A's storage type, T a std::integral_constant.
template <class T>
constexpr bool kBf16A = T::value == DType::bf16;
using F32 = std::integral_constant<DType, DType::f32>;
using Bf16 = std::integral_constant<DType, DType::bf16>;

// Rows of a tile: R * N accumulators, R vectors of A (bf16: pairs) and B's
// (bf16: two) in the 16 registers.
template <int N, class T>
constexpr int kNarrowRows = kBf16A<T> ? 14 / (N + 2) : 15 / (N + 1);

// sums[r][0 : 8] = A[m + r, :] . bt[j, :] for j < N (0 past N), r < R.
template <int R, int N, class T>
void narrow_tile(const MatmulArgs& p, T at, std::int64_t m, const float* bt, std::int64_t k_pad, float* sums, std::int64_t ld) {
  const char* row[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) row[r] = static_cast<const char*>(advance(p.a, at, (m + r) * p.a_row_stride));
  __m256 acc[R][N];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int j = 0; j < N; ++j) acc[r][j] = _mm256_setzero_ps();
  std::int64_t k = 0;
  // bf16 A 16 k a step in load16_unordered's order (bt's whole 16-blocks
  // are stored in it): one load and two shifts or masks per 16 values
  // instead of two widening loads and two shifts.
  if constexpr (kBf16A<T>)
    for (; k + 16 <= p.k; k += 16) {
      Pair av[R];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) av[r] = load16_unordered(row[r] + 2 * k, at);
#pragma GCC unroll 8
      for (int j = 0; j < N; ++j) {
        const __m256 b_even = _mm256_load_ps(bt + j * k_pad + k), b_odd = _mm256_load_ps(bt + j * k_pad + k + 8);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) acc[r][j] = _mm256_fmadd_ps(av[r].hi, b_odd, _mm256_fmadd_ps(av[r].lo, b_even, acc[r][j]));
      }
    }
  for (; k < p.k; k += 8) {
    const std::int64_t n = std::min<std::int64_t>(8, p.k - k);
    __m256 av[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) av[r] = load8_n(row[r] + k * bytes_of(at), at, n);
#pragma GCC unroll 8
    for (int j = 0; j < N; ++j) {
      const __m256 bv = _mm256_load_ps(bt + j * k_pad + k);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][j] = _mm256_fmadd_ps(av[r], bv, acc[r][j]);
    }
  }
  for (int r = 0; r < R; ++r) {
    alignas(32) float out[8] = {};
    for (int j = 0; j < N; ++j) out[j] = hsum(acc[r][j]);
    _mm256_store_ps(sums + r * ld, _mm256_load_ps(out));
  }
}

// B's columns [n0, n1) (at most 8) as bt.
void transpose_narrow_b(const MatmulArgs& p, std::int64_t n0, std::int64_t n1, float* bt, std::int64_t k_pad) {
  const std::int64_t cols = n1 - n0;
  const bool in_place = p.packed && p.packed->dtype == DType::f32;
  const float* panel = in_place ? static_cast<const float*>(p.packed->values) + n0 / kPanelCols * p.packed->k * kPanelCols : nullptr;
  BRows32 rows(p, n0, n1);
  for (std::int64_t k = 0; k < p.k; ++k) {
    alignas(32) float r[kPanelCols];
    const float* src = panel ? panel + k * kPanelCols : r;
    if (!panel) {
      __m256 v[4];
      rows.row(k, v);
      _mm256_store_ps(r, v[0]);
    }
    for (std::int64_t j = 0; j < cols; ++j) bt[j * k_pad + k] = src[j];
  }
  for (std::int64_t j = 0; j < cols; ++j) {
    std::fill(bt + j * k_pad + p.k, bt + (j + 1) * k_pad, 0.0f);
    if (p.a_dtype == DType::bf16)
      for (std::int64_t k = 0; k + 16 <= p.k; k += 16) to_bf16_order16(bt + j * k_pad + k, bt + j * k_pad + k);
  }
}

template <int N, class T>
void narrow_rows(const MatmulArgs& p, T at, std::int64_t m0, std::int64_t m1, std::int64_t n0, std::int64_t n1, const float* bt,
                 std::int64_t k_pad, float* part) {
  constexpr int R = kNarrowRows<N, T>;
  std::int64_t m = m0;
  for (; m + R <= m1; m += R) {
    narrow_tile<R, N>(p, at, m, bt, k_pad, part, kPanelCols);
    epilogue_tile32(p, part, kPanelCols, R, m, n0, n1);
  }
  for (; m < m1; ++m) {
    narrow_tile<1, N>(p, at, m, bt, k_pad, part, kPanelCols);
    epilogue_tile32(p, part, kPanelCols, 1, m, n0, n1);
  }
}

// Whether matmul_f32 takes C by dot products (narrow_rows): few columns, A
// f32 or bf16 with unit column stride (read in place).
bool narrow(const MatmulArgs& p, std::int64_t n0, std::int64_t n1) {
  return n1 - n0 <= 8 && p.k > 0 && !p.a_q && p.a_col_stride == 1 && (p.a_dtype == DType::f32 || p.a_dtype == DType::bf16);
}

void matmul_narrow(const MatmulArgs& p, std::int64_t m0, std::int64_t m1, std::int64_t n0, std::int64_t n1) {
  const std::int64_t k_pad = round_up(p.k, 8), cols = n1 - n0;
  auto* bt = static_cast<float*>(thread_scratch(ScratchSlot::b_panel, std::size_t(cols * k_pad) * sizeof(float)));
  auto* part = static_cast<float*>(thread_scratch(ScratchSlot::partial, std::size_t(kNarrowRows<1, F32> * kPanelCols) * sizeof(float)));
  transpose_narrow_b(p, n0, n1, bt, k_pad);
  const auto by_type = [&](auto at) {
    switch (cols) {
      case 1: return narrow_rows<1>(p, at, m0, m1, n0, n1, bt, k_pad, part);
      case 2: return narrow_rows<2>(p, at, m0, m1, n0, n1, bt, k_pad, part);
      case 3: return narrow_rows<3>(p, at, m0, m1, n0, n1, bt, k_pad, part);
      case 4: return narrow_rows<4>(p, at, m0, m1, n0, n1, bt, k_pad, part);
      case 5: return narrow_rows<5>(p, at, m0, m1, n0, n1, bt, k_pad, part);
      case 6: return narrow_rows<6>(p, at, m0, m1, n0, n1, bt, k_pad, part);
      case 7: return narrow_rows<7>(p, at, m0, m1, n0, n1, bt, k_pad, part);
      default: return narrow_rows<8>(p, at, m0, m1, n0, n1, bt, k_pad, part);
    }
  };
  if (p.a_dtype == DType::bf16) by_type(Bf16());
  else by_type(F32());
}

}  // namespace

// Blocked GEMM for one tile of C, as the AVX-512 row: K in slices of
// t.k_block; per slice the task's rows of A are packed once (converted to
// f32, W8A8-rounded when asked) and each 32-column panel of B is either read
// in place (packed f32 weights) or converted once into an L1-resident panel,
// then reused by every 3-row micro-tile. Partial sums of the slices stay in
// an L2-resident tile; the epilogue runs on each micro-tile right after its
// last slice.
void matmul_f32(const MatmulArgs& p, const MatmulTiling& t, std::int64_t m0, std::int64_t m1, std::int64_t n0,
                std::int64_t n1) {
  if (narrow(p, n0, n1)) return matmul_narrow(p, m0, m1, n0, n1);
  const std::int64_t rows = m1 - m0, kb = std::max<std::int64_t>(1, std::min(t.k_block, p.k));
  const std::int64_t ldp = round_up(n1 - n0, kPanelCols);
  const std::size_t a_bytes = std::size_t(round_up(rows, kMr) * kb) * sizeof(float);
  auto* a_pack = static_cast<float*>(thread_scratch(ScratchSlot::a_panel, a_bytes));
  auto* b_buf = static_cast<float*>(thread_scratch(ScratchSlot::b_panel, std::size_t(kb * kPanelCols) * sizeof(float)));
  auto* part = static_cast<float*>(thread_scratch(ScratchSlot::partial, std::size_t(rows * ldp) * sizeof(float)));
  if (p.k == 0) std::memset(part, 0, std::size_t(rows * ldp) * sizeof(float));
  for (std::int64_t k0 = 0; k0 < p.k; k0 += kb) {
    const std::int64_t kc = std::min(kb, p.k - k0);
    pack_a_f32(p, m0, m1, k0, kc, a_pack, kMr);
    for (std::int64_t n = n0; n < n1; n += kPanelCols) {
      const float* panel = b_panel_f32(p, n, n1, k0, kc, b_buf);
      for (std::int64_t m = m0; m < m1; m += kMr) {
        const std::int64_t mr = std::min(kMr, m1 - m);
        float* tile = part + (m - m0) * ldp + (n - n0);
        if (k0 + kc == p.k) prefetch_epilogue(p, mr, m, n);
        kMicroTiles[mr](kc, a_pack + (m - m0) * kc, panel, tile, ldp, k0 == 0);
        if (k0 + kc == p.k) epilogue_tile32(p, tile, ldp, mr, m, n, n1);
      }
    }
  }
  if (p.k == 0)
    for (std::int64_t n = n0; n < n1; n += kPanelCols) epilogue_tile32(p, part + (n - n0), ldp, rows, m0, n, n1);
}

}  // namespace tessera::kernels::avx2
