// Winograd transforms on AVX-512 (kernels/winograd.hpp): 16 channels a
// vector, a tile's values in registers, per variant (Tile 2: F(2x2, 3x3),
// 3: F(3x3, 2x2), 4: F(4x4, 3x3)); the same operations in the same order as
// the reference row.
#include "kernels/winograd.hpp"
#include "kernels/x86/avx512/epilogue.hpp"
#include "kernels/x86/avx512/gemm_blocked.hpp"

namespace tessera::kernels::avx512 {

namespace {

// B^T v of the vectors of a column (or row) of a patch.
template <int Tile>
void input_rows(const __m512* v, int step, __m512* out) {
  if constexpr (Tile == 4) {
    const __m512 four = _mm512_set1_ps(4.0f), five = _mm512_set1_ps(5.0f);
    const __m512 t1 = _mm512_fnmadd_ps(four, v[2 * step], v[4 * step]), t2 = _mm512_fnmadd_ps(four, v[step], v[3 * step]);
    const __m512 t3 = _mm512_sub_ps(v[4 * step], v[2 * step]);
    const __m512 t4 = _mm512_add_ps(_mm512_sub_ps(v[3 * step], v[step]), _mm512_sub_ps(v[3 * step], v[step]));
    out[0] = _mm512_fmadd_ps(four, v[0], _mm512_fnmadd_ps(five, v[2 * step], v[4 * step]));
    out[1] = _mm512_add_ps(t1, t2), out[2] = _mm512_sub_ps(t1, t2);
    out[3] = _mm512_add_ps(t3, t4), out[4] = _mm512_sub_ps(t3, t4);
    out[5] = _mm512_fmadd_ps(four, v[step], _mm512_fnmadd_ps(five, v[3 * step], v[5 * step]));
  } else {
    out[0] = _mm512_sub_ps(v[0], v[2 * step]);
    out[1] = _mm512_add_ps(v[step], v[2 * step]);
    out[2] = _mm512_sub_ps(v[2 * step], v[step]);
    out[3] = Tile == 2 ? _mm512_sub_ps(v[step], v[3 * step]) : _mm512_sub_ps(v[3 * step], v[step]);
  }
}

// A^T v: a tile's outputs from the vectors of a column (or row) of M.
template <int Tile>
void output_rows(const __m512* v, int step, __m512* out) {
  if constexpr (Tile == 4) {
    const __m512 a = _mm512_add_ps(v[step], v[2 * step]), b = _mm512_sub_ps(v[step], v[2 * step]);
    const __m512 c = _mm512_add_ps(v[3 * step], v[4 * step]), d = _mm512_sub_ps(v[3 * step], v[4 * step]);
    out[0] = _mm512_add_ps(_mm512_add_ps(v[0], a), c);
    out[1] = _mm512_fmadd_ps(_mm512_set1_ps(2.0f), d, b);
    out[2] = _mm512_fmadd_ps(_mm512_set1_ps(4.0f), c, a);
    out[3] = _mm512_add_ps(_mm512_fmadd_ps(_mm512_set1_ps(8.0f), d, b), v[5 * step]);
  } else if constexpr (Tile == 2) {
    out[0] = _mm512_add_ps(_mm512_add_ps(v[0], v[step]), v[2 * step]);
    out[1] = _mm512_sub_ps(_mm512_sub_ps(v[step], v[2 * step]), v[3 * step]);
  } else {
    out[0] = _mm512_add_ps(_mm512_add_ps(v[0], v[step]), v[2 * step]);
    out[1] = _mm512_sub_ps(v[step], v[2 * step]);
    out[2] = _mm512_add_ps(_mm512_add_ps(v[step], v[2 * step]), v[3 * step]);
  }
}

template <int Tile>
void input(const WinogradGeometry& g, const void* x, std::int64_t t0, std::int64_t count, float* v, std::int64_t ld,
           std::int64_t plane) {
  constexpr int P = int(winograd_patch(Tile));
  for (std::int64_t r = 0; r < count; ++r) {
    const std::int64_t t = t0 + r, ih0 = Tile * (t / g.tiles_w) - g.pad_h, iw0 = Tile * (t % g.tiles_w) - g.pad_w;
    bool row_in[P], col_in[P];
    for (int i = 0; i < P; ++i) row_in[i] = ih0 + i >= 0 && ih0 + i < g.in_h, col_in[i] = iw0 + i >= 0 && iw0 + i < g.in_w;
    const void* at = advance(x, g.x_dtype, ih0 * g.x_row_stride + iw0 * g.x_col_stride);
    for (std::int64_t c = 0; c < g.channels; c += 16) {
      const __mmask16 mask = tail_mask(g.channels - c);
      __m512 d[P * P], u[P * P];
      for (int i = 0; i < P; ++i)
        for (int j = 0; j < P; ++j)
          d[P * i + j] = row_in[i] && col_in[j]
                             ? load16(advance(at, g.x_dtype, i * g.x_row_stride + j * g.x_col_stride + c), g.x_dtype, mask)
                             : _mm512_setzero_ps();
      for (int j = 0; j < P; ++j) {  // B^T d, column j
        __m512 w[P];
        input_rows<Tile>(d + j, P, w);
        for (int i = 0; i < P; ++i) u[P * i + j] = w[i];
      }
      float* out = v + r * ld + c;
      for (int i = 0; i < P; ++i) {  // (B^T d) B, row i
        __m512 w[P];
        input_rows<Tile>(u + P * i, 1, w);
        for (int j = 0; j < P; ++j) _mm512_mask_storeu_ps(out + (P * i + j) * plane, mask, w[j]);
      }
    }
  }
}

template <int Tile>
void output(const WinogradGeometry& g, const float* m, std::int64_t ld, std::int64_t plane, std::int64_t t0,
            std::int64_t count, std::int64_t n0, std::int64_t n1, const WinogradOutput& out) {
  constexpr int P = int(winograd_patch(Tile));
  const EpilogueArgs& ep = out.ep;
  for (std::int64_t r = 0; r < count; ++r) {
    const std::int64_t t = t0 + r, oh0 = Tile * (t / g.tiles_w), ow0 = Tile * (t % g.tiles_w);
    const int rows = int(std::min<std::int64_t>(Tile, g.out_h - oh0)), cols = int(std::min<std::int64_t>(Tile, g.out_w - ow0));
    for (std::int64_t n = n0; n < n1; n += 16) {
      const __mmask16 mask = tail_mask(n1 - n);
      const float* s = m + r * ld + n;
      __m512 v[P * P], w[P * Tile];
      for (int i = 0; i < P * P; ++i) v[i] = _mm512_maskz_loadu_ps(mask, s + i * plane);
      for (int j = 0; j < P; ++j) {  // A^T M, column j
        __m512 col[Tile];
        output_rows<Tile>(v + j, P, col);
        for (int i = 0; i < Tile; ++i) w[P * i + j] = col[i];
      }
      for (int i = 0; i < rows; ++i) {  // (A^T M) A, row i
        __m512 y[Tile];
        output_rows<Tile>(w + P * i, 1, y);
        for (int j = 0; j < cols; ++j) {
          const std::int64_t oh = oh0 + i, ow = ow0 + j;
          const void* residual =
              ep.residual ? advance(ep.residual, ep.residual_dtype, oh * out.residual_h_stride + ow * ep.residual_row_stride + n) : nullptr;
          store16(advance(out.y, out.y_dtype, oh * out.y_row_stride + ow * out.y_col_stride + n), out.y_dtype,
                  epilogue_value16(ep, y[j], n, residual, mask), mask);
        }
      }
    }
  }
}

// F(4x4, 3x3)'s G times three vectors: a column of g, or a row of G g.
void weight_rows(const __m512* g, int step, __m512* out) {
  const __m512 a = _mm512_add_ps(g[0], g[2 * step]), sixth = _mm512_set1_ps(-1.0f / 6);
  const __m512 b = _mm512_fmadd_ps(g[0], _mm512_set1_ps(1.0f / 24), _mm512_mul_ps(g[2 * step], _mm512_set1_ps(1.0f / 6)));
  const __m512 d = _mm512_mul_ps(g[step], _mm512_set1_ps(1.0f / 12));
  out[0] = _mm512_mul_ps(g[0], _mm512_set1_ps(0.25f));
  out[1] = _mm512_mul_ps(_mm512_add_ps(a, g[step]), sixth);
  out[2] = _mm512_mul_ps(_mm512_sub_ps(a, g[step]), sixth);
  out[3] = _mm512_add_ps(b, d), out[4] = _mm512_sub_ps(b, d);
  out[5] = g[2 * step];
}

// Rows of packed weights as f32, 16 columns from n: f32 panels' rows, or
// bf16 tiles' pair rows (k even in the low words).
struct WeightRows {
  const PackedB& w;
  const void* base;  // the panel's first row, at column n
  WeightRows(const PackedB& w, std::int64_t n) : w(w) {
    const std::int64_t k_pad = padded_k(w.dtype, w.k);
    base = w.dtype == DType::f32 ? static_cast<const void*>(static_cast<const float*>(w.values) + n / kPanelCols * k_pad * kPanelCols + n % kPanelCols)
                                 : static_cast<const std::uint16_t*>(w.values) + tile_packed_index(DType::bf16, k_pad, 0, n);
  }
  const void* at(std::int64_t k) const {
    if (w.dtype == DType::f32) return static_cast<const float*>(base) + k * kPanelCols;
    return static_cast<const std::uint16_t*>(base) + (k >> 5) * 1024 + (k & 31) / 2 * 32;  // tile k / 32, pair row k % 32 / 2
  }
  __m512 operator()(std::int64_t k) const {
    if (w.dtype == DType::f32) return _mm512_load_ps(at(k));
    const __m512i pairs = _mm512_load_si512(at(k));
    return _mm512_castsi512_ps(k & 1 ? _mm512_and_si512(pairs, _mm512_set1_epi32(int(0xffff0000u))) : _mm512_slli_epi32(pairs, 16));
  }
};

// U's 36 planes for input channels [c0, c0 + kc) and the 32 output channels
// of panel n: row c - c0 of plane s at u + s * slab, a panel of f32 rows.
void f43_weights(const PackedB& w, std::int64_t cig, std::int64_t c0, std::int64_t kc, std::int64_t n, float* u,
                 std::int64_t slab) {
  for (std::int64_t h = 0; h < 2; ++h) {
    const WeightRows rows(w, n + 16 * h);
    for (std::int64_t c = c0; c < c0 + kc; ++c) {
      __m512 g[9], gg[18];
      // The nine taps are nine streams through memory: fetched a tile ahead.
      if (w.dtype == DType::f32 || c % 2 == 0)
        for (int t = 0; t < 9; ++t) _mm_prefetch(static_cast<const char*>(rows.at(t * cig + c + 32)), _MM_HINT_T0);
      for (int t = 0; t < 9; ++t) g[t] = rows(t * cig + c);
      for (int j = 0; j < 3; ++j) {  // G g, column j
        __m512 col[6];
        weight_rows(g + j, 3, col);
        for (int i = 0; i < 6; ++i) gg[3 * i + j] = col[i];
      }
      for (int i = 0; i < 6; ++i) {  // (G g) G^T, row i
        __m512 row[6];
        weight_rows(gg + 3 * i, 1, row);
        for (int j = 0; j < 6; ++j) _mm512_store_ps(u + (6 * i + j) * slab + (c - c0) * kPanelCols + 16 * h, row[j]);
      }
    }
  }
}

}  // namespace

// Per panel of 32 output channels, per slice of 64 input channels: U's
// slab for them (36 planes of 8 KiB, in L2), then each plane's GEMM over
// it, V's rows read in place by the f32 matmul's micro-tiles, the sums of
// the panel's slices accumulated in M. U costs 144 vector operations per
// input channel and 16 output channels against 36 FMAs per tile there: a
// quarter more arithmetic at 16 tiles a block.
void winograd_f43_kernel_gemm(const PackedB& w, std::int64_t cig, const float* v, std::int64_t ld_v, std::int64_t v_plane,
                              std::int64_t count, float* m, std::int64_t ld_m, std::int64_t m_plane, std::int64_t n0,
                              std::int64_t n1) {
  static constexpr auto kMicroTiles = blocked_micro_tiles<F32Traits, true>(std::make_integer_sequence<int, kBlockedMr + 1>());
  constexpr std::int64_t kSlice = 64, kSlab = kSlice * kPanelCols + 16, kPlanes = winograd_planes(4);
  auto* u = static_cast<float*>(thread_scratch(ScratchSlot::b_panel, std::size_t(kPlanes * kSlab) * sizeof(float)));
  const std::int64_t slivers = (count + kBlockedMr - 1) / kBlockedMr, mr = (count + slivers - 1) / slivers;
  const F32Traits traits;
  for (std::int64_t n = n0; n < n1; n += kPanelCols)
    for (std::int64_t c0 = 0; c0 < cig; c0 += kSlice) {
      const std::int64_t kc = std::min(kSlice, cig - c0);
      f43_weights(w, cig, c0, kc, n, u, kSlab);
      for (std::int64_t s = 0; s < kPlanes; ++s)
        for (std::int64_t r = 0; r < count; r += mr)
          kMicroTiles[std::size_t(std::min(mr, count - r))](traits, kc, v + s * v_plane + r * ld_v + c0, ld_v,
                                                           reinterpret_cast<const char*>(u + s * kSlab),
                                                           m + s * m_plane + r * ld_m + n, ld_m, c0 == 0, nullptr, 0);
    }
}

void winograd_input(const WinogradGeometry& g, const void* x, std::int64_t t0, std::int64_t count, float* v, std::int64_t ld,
                    std::int64_t plane) {
  (g.tile == 2 ? input<2> : g.tile == 3 ? input<3> : input<4>)(g, x, t0, count, v, ld, plane);
}

void winograd_output(const WinogradGeometry& g, const float* m, std::int64_t ld, std::int64_t plane, std::int64_t t0,
                     std::int64_t count, std::int64_t n0, std::int64_t n1, const WinogradOutput& out) {
  (g.tile == 2 ? output<2> : g.tile == 3 ? output<3> : output<4>)(g, m, ld, plane, t0, count, n0, n1, out);
}

}  // namespace tessera::kernels::avx512
