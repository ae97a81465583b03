#include "kernels/winograd.hpp"

#include <algorithm>

namespace tessera::kernels {

namespace {

bool float_operands(const WinogradProblem& p) { return is_floating(p.x) && is_floating(p.y) && is_floating(p.residual); }

// A block's planes of V and of M within half of L2, so
// that they are still there when the GEMMs and the output transform come to
// them; at least 28 tiles (two micro-tiles of rows: the GEMMs' efficiency)
// and at most 112. But each block reads all planes of the weights: when
// they outgrow half of L3 they come from memory, and 112 tiles a block
// read them 4x less often than 28 (AMD EPYC, 32 MiB L3, 1 thread, C 1280
// at 32 x 32: 143-154 -> 135 ms; C 320, whose weights stay in L3: 28
// tiles 9.1-9.6 ms, 112 11.5-12.6).
WinogradTiling winograd_tiling(const WinogradProblem& p, const hw::Info& hw) {
  const std::int64_t planes = winograd_planes(p.tile);
  const std::int64_t weight_bytes = planes * p.in_channels * p.out_channels * 4;
  if (weight_bytes > hw.l3_bytes / 2) return {112};
  const std::int64_t per_tile = planes * 4 * (p.in_channels + p.out_channels);
  return {std::clamp<std::int64_t>(hw.l2_bytes / 2 / std::max<std::int64_t>(1, per_tile) / 14 * 14, 28, 112)};
}

// G of each variant (kernels/winograd.hpp), row-major p x r.
constexpr double kG2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
constexpr double kG3[4][2] = {{1, 0}, {0.5, 0.5}, {0.5, -0.5}, {0, 1}};
constexpr double kG4[6][3] = {{0.25, 0, 0},
                              {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                              {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                              {1.0 / 24, 1.0 / 12, 1.0 / 6},
                              {1.0 / 24, -1.0 / 12, 1.0 / 6},
                              {0, 0, 1}};

}  // namespace

void winograd_weights(const float* g, std::int64_t tile, float* u) {
  const std::int64_t p = winograd_patch(tile), r = tile == 3 ? 2 : 3;
  const auto G = [tile](std::int64_t i, std::int64_t k) { return tile == 2 ? kG2[i][k] : tile == 3 ? kG3[i][k] : kG4[i][k]; };
  double gg[6][3] = {};  // G g
  for (std::int64_t i = 0; i < p; ++i)
    for (std::int64_t c = 0; c < r; ++c)
      for (std::int64_t k = 0; k < r; ++k) gg[i][c] += G(i, k) * g[k * r + c];
  for (std::int64_t i = 0; i < p; ++i)
    for (std::int64_t j = 0; j < p; ++j) {
      double sum = 0.0;
      for (std::int64_t k = 0; k < r; ++k) sum += gg[i][k] * G(j, k);
      u[i * p + j] = float(sum);
    }
}

std::span<const KernelRow<WinogradFamily>> rows(WinogradFamily) {
  static const KernelRow<WinogradFamily> kRows[] = {
      {"winograd_avx512", hw::Isa::avx512, float_operands, winograd_tiling, {avx512::winograd_input, avx512::winograd_output, avx512::winograd_f43_kernel_gemm}},
      {"winograd_avx2", hw::Isa::avx2, float_operands, winograd_tiling, {avx2::winograd_input, avx2::winograd_output, nullptr}},
      {"winograd_ref", hw::Isa::scalar, supports_all, winograd_tiling, {ref::winograd_input, ref::winograd_output, nullptr}},
  };
  return kRows;
}

}  // namespace tessera::kernels
