#include "kernels/matmul.hpp"

#include <algorithm>

namespace tessera::kernels {

namespace {
bool f32_unit_n(const MatmulProblem& p) {
  return p.a == DType::f32 && p.b == DType::f32 && p.c == DType::f32 && p.b_col_stride == 1 && p.c_col_stride == 1;
}
// Tiles of C big enough to reuse each B panel across many rows, small
// enough that a batch-1 projection still splits over every core.
MatmulTiling tiling(const MatmulProblem& p, const hw::Info& hw) {
  std::int64_t m_block = std::min<std::int64_t>(96, std::max<std::int64_t>(p.m, 1));
  std::int64_t n_block = 256;
  const auto tiles = [&] { return ((p.m + m_block - 1) / m_block) * ((p.n + n_block - 1) / n_block); };
  while (tiles() < 2 * hw.cores && n_block > 32) n_block /= 2;
  return {m_block, n_block};
}
}  // namespace

std::span<const KernelRow<MatmulFamily>> rows(MatmulFamily) {
  static const KernelRow<MatmulFamily> kRows[] = {
      {"matmul_f32_avx512", hw::Isa::avx512, f32_unit_n, tiling, avx512::matmul_f32},
      {"matmul_ref", hw::Isa::scalar, supports_all, tiling, ref::matmul},
  };
  return kRows;
}

}  // namespace tessera::kernels
