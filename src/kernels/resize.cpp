#include "kernels/resize.hpp"

#include <algorithm>

#include "tessera/ops/resize.hpp"

namespace tessera::kernels {

namespace {

using ops::CoordinateMode;

// 128-bit: (2o + 1) * in, doubled again for rounding, overflows int64 for
// sizes near 2^31.
using Wide = __int128;

// The source coordinate of output index o as the exact ratio num / den, den > 0.
struct SourceCoord {
  Wide num, den;
};

SourceCoord source_coord(std::int64_t o, std::int64_t in, std::int64_t out, CoordinateMode coord) {
  switch (coord) {
    case CoordinateMode::asymmetric: return {Wide(o) * in, out};
    case CoordinateMode::align_corners:
      if (out == 1) return {0, 1};
      return {Wide(o) * (in - 1), out - 1};
    case CoordinateMode::pytorch_half_pixel:
      if (out == 1) return {0, 1};
      [[fallthrough]];
    case CoordinateMode::half_pixel: break;
  }
  return {Wide(2 * o + 1) * in - out, Wide(2) * out};  // (o + 0.5) * in / out - 0.5
}

bool bf16_rows(const RowProblem& p) { return row_vectorizable(p) && p.x == DType::bf16 && p.y == DType::bf16; }

Wide floor_div(Wide num, Wide den) {
  const Wide q = num / den;
  return (num % den != 0 && num < 0) ? q - 1 : q;
}

}  // namespace

std::int64_t resize_nearest_index(std::int64_t o, std::int64_t in, std::int64_t out, CoordinateMode coord,
                                  ops::NearestRounding rounding) {
  const SourceCoord s = source_coord(o, in, out, coord);
  // round_prefer_floor: ceil(s - 1/2) = -floor((den - 2 num) / (2 den)), so exact halves go down.
  const Wide i = rounding == ops::NearestRounding::floor ? floor_div(s.num, s.den)
                                                         : -floor_div(s.den - 2 * s.num, 2 * s.den);
  return std::int64_t(std::clamp<Wide>(i, 0, in - 1));
}

LinearTaps resize_linear_taps(std::int64_t o, std::int64_t in, std::int64_t out, CoordinateMode coord) {
  const SourceCoord s = source_coord(o, in, out, coord);
  if (s.num <= 0) return {0, 0, 1.0f, 0.0f};
  const Wide i0 = floor_div(s.num, s.den);
  if (i0 >= in - 1) return {in - 1, in - 1, 1.0f, 0.0f};
  const Wide rem = s.num - i0 * s.den;  // in [0, den): the fraction's numerator
  return {std::int64_t(i0), std::int64_t(i0) + 1, float(double(s.den - rem) / double(s.den)),
          float(double(rem) / double(s.den))};
}

CubicTaps resize_cubic_taps(std::int64_t o, std::int64_t in, std::int64_t out, CoordinateMode coord, float a,
                            bool exclude_outside) {
  const SourceCoord s = source_coord(o, in, out, coord);
  const Wide i = floor_div(s.num, s.den);
  const double t = double(s.num - i * s.den) / double(s.den), c = a;  // the fraction, in [0, 1)
  // Keys' kernel at distance d: within 1 and from 1 to 2.
  const auto near = [c](double d) { return ((c + 2) * d - (c + 3)) * d * d + 1; };
  const auto far = [c](double d) { return ((c * d - 5 * c) * d + 8 * c) * d - 4 * c; };
  const double w[4] = {far(1 + t), near(t), near(1 - t), far(2 - t)};
  CubicTaps taps{};
  bool inside[4];
  double kept = 0;  // the inside taps' weight
  for (int k = 0; k < 4; ++k) {
    const Wide at = i - 1 + k;
    inside[k] = at >= 0 && at < in;
    taps.i[k] = std::int64_t(std::clamp<Wide>(at, 0, in - 1));
    if (inside[k]) kept += w[k];
  }
  // A coefficient that zeroes every inside tap leaves nothing to rescale by
  // (ONNX divides by 0 there): the weights stay as they are.
  const bool rescale = exclude_outside && kept != 0;
  for (int k = 0; k < 4; ++k) taps.w[k] = rescale ? (inside[k] ? float(w[k] / kept) : 0.0f) : float(w[k]);
  return taps;
}

namespace {

bool vectorizable(const ResizeProblem& p) { return row_vectorizable(p.rows); }
// The AVX-512 rows have no cubic: it takes the AVX2 row there.
bool avx512_rows(const ResizeProblem& p) { return p.taps <= 2 && vectorizable(p); }
bool avx512_bf16_rows(const ResizeProblem& p) { return p.taps <= 2 && bf16_rows(p.rows); }
RowTiling resize_tiling(const ResizeProblem& p, const hw::Info& hw) { return row_tiling(p.rows, hw); }

}  // namespace

std::span<const KernelRow<ResizeFamily>> rows(ResizeFamily) {
  static const KernelRow<ResizeFamily> kRows[] = {
      {"resize_avx512_bf16", hw::Isa::avx512_bf16, avx512_bf16_rows, resize_tiling, avx512_bf16::resize},
      {"resize_avx512", hw::Isa::avx512, avx512_rows, resize_tiling, avx512::resize},
      {"resize_avx2", hw::Isa::avx2, vectorizable, resize_tiling, avx2::resize},
      {"resize_ref", hw::Isa::scalar, supports_all, resize_tiling, ref::resize},
  };
  return kRows;
}

}  // namespace tessera::kernels
