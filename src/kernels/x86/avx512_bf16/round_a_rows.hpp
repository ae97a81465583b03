#pragma once
// The bf16 GEMMs' pre-pass: A's rows rounded to bf16 once for every task
// (kernels/matmul.hpp, round_a_rows), and the row rounding the AMX kernel
// also does per task. Static: compiled by the AMX and AVX512-BF16 levels'
// translation units, each with its own flags (see vec.hpp).
#include <cstring>

#include "kernels/x86/avx512/matmul_pack.hpp"

namespace tessera::kernels {

// kc elements of row m of A from column k0, rounded to bf16 into out, zero
// from kc up to kc_pad.
static inline void round_a_row(const MatmulArgs& p, std::int64_t m, std::int64_t k0, std::int64_t kc, std::int64_t kc_pad,
                               std::uint16_t* out) {
  if (p.a_dtype == DType::bf16 && p.a_col_stride == 1) {
    std::memcpy(out, static_cast<const std::uint16_t*>(p.a) + m * p.a_row_stride + k0, std::size_t(kc) * 2);
  } else {
    avx512::with_a_row(p, m, [&](auto load) {
      std::int64_t k = 0;
      for (; k + 16 <= kc; k += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k), avx512::to_bf16(load(k0 + k, 0xffff)));
      if (k < kc) _mm256_mask_storeu_epi16(out + k, avx512::tail_mask(kc - k), avx512::to_bf16(load(k0 + k, avx512::tail_mask(kc - k))));
    });
  }
  std::memset(out + kc, 0, std::size_t(kc_pad - kc) * 2);
}

// Rows [m0, m1) of A in blocks of `slice` columns, each `rows` rows of
// `slice` elements (MatmulArgs::a_bf16's layout), zero past K up to a
// multiple of kBf16KStep.
static inline void round_a_rows_in_slices(const MatmulArgs& p, std::int64_t m0, std::int64_t m1, std::uint16_t* dst,
                                          std::int64_t rows, std::int64_t slice) {
  for (std::int64_t m = m0; m < m1; ++m)
    for (std::int64_t k0 = 0; k0 < p.k; k0 += slice) {
      const std::int64_t kc = std::min(slice, p.k - k0);
      round_a_row(p, m, k0, kc, round_up(kc, kBf16KStep), dst + (k0 / slice * rows + m) * slice);
    }
}

}  // namespace tessera::kernels
