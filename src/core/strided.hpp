#pragma once
// Walking N operands that share one iteration shape but have their own
// strides (a broadcast operand has stride 0). collapse() drops size-1 dims
// and merges neighbours that are contiguous in every operand, so the common
// cases become one long dim and a loop over them stays cheap.
#include <array>
#include <cstdint>

#include "tessera/core/shape.hpp"

namespace tessera::detail {

template <int N>
struct StridedDims {
  int rank = 0;
  std::array<std::int64_t, kMaxRank> shape{};
  std::array<std::array<std::int64_t, kMaxRank>, N> strides{};

  std::int64_t numel() const {
    std::int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= shape[i];
    return n;
  }
  // Element offsets of each operand at row-major linear index `idx`.
  std::array<std::int64_t, N> offsets(std::int64_t idx) const {
    std::array<std::int64_t, N> off{};
    for (int i = rank - 1; i >= 0 && idx > 0; --i) {
      const std::int64_t c = idx % shape[i];
      idx /= shape[i];
      for (int k = 0; k < N; ++k) off[k] += c * strides[k][i];
    }
    return off;
  }
};

template <int N>
StridedDims<N> collapse(const Shape& shape, const std::array<Strides, N>& strides) {
  StridedDims<N> out;
  for (int i = 0; i < shape.rank(); ++i) {
    if (shape[i] == 1) continue;
    bool merge = out.rank > 0;
    for (int k = 0; k < N && merge; ++k)
      merge = out.strides[k][out.rank - 1] == strides[k][i] * shape[i];
    if (merge) {
      out.shape[out.rank - 1] *= shape[i];
      for (int k = 0; k < N; ++k) out.strides[k][out.rank - 1] = strides[k][i];
    } else {
      out.shape[out.rank] = shape[i];
      for (int k = 0; k < N; ++k) out.strides[k][out.rank] = strides[k][i];
      ++out.rank;
    }
  }
  return out;
}

}  // namespace tessera::detail
