#include "tessera/ops/resize.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <vector>

#include "kernels/resize.hpp"
#include "ops/common.hpp"

namespace tessera::ops {

using namespace detail;

namespace {

// One axis's mapping for every output index, computed once per plan; the
// kernels read it through kernels::ResizeTable.
struct AxisTable {
  std::vector<std::int32_t> i[4];  // the taps used: 1, 2 or 4
  std::vector<float> w[4];
  bool half_pixel_x2 = false;

  kernels::ResizeTable view() const {
    return {i[0].data(), i[1].data(), w[0].data(), w[1].data(), i[2].data(), i[3].data(), w[2].data(), w[3].data(), half_pixel_x2};
  }
};

int taps_of(ResizeMode mode) { return mode == ResizeMode::nearest ? 1 : mode == ResizeMode::bilinear ? 2 : 4; }

AxisTable make_table(std::int64_t in, std::int64_t out, const ResizeAttrs& attrs) {
  constexpr std::int64_t align = kernels::kResizeTableAlign;
  const auto n = static_cast<std::size_t>((out + align - 1) / align * align);
  const int taps = taps_of(attrs.mode);
  AxisTable t;
  // pytorch_half_pixel differs from half_pixel only for an output of 1.
  t.half_pixel_x2 = attrs.mode == ResizeMode::bilinear && out == 2 * in &&
                    (attrs.coord == CoordinateMode::half_pixel || attrs.coord == CoordinateMode::pytorch_half_pixel);
  for (int k = 0; k < taps; ++k) t.i[k].resize(n), t.w[k].resize(taps > 1 ? n : 0);
  for (std::size_t j = 0; j < n; ++j) {
    const std::int64_t o = std::min<std::int64_t>(std::int64_t(j), out - 1);  // the padding repeats the last entry
    switch (attrs.mode) {
      case ResizeMode::nearest:
        t.i[0][j] = std::int32_t(kernels::resize_nearest_index(o, in, out, attrs.coord, attrs.rounding));
        break;
      case ResizeMode::bilinear: {
        const kernels::LinearTaps lin = kernels::resize_linear_taps(o, in, out, attrs.coord);
        t.i[0][j] = std::int32_t(lin.i0), t.i[1][j] = std::int32_t(lin.i1), t.w[0][j] = lin.w0, t.w[1][j] = lin.w1;
        break;
      }
      case ResizeMode::cubic: {
        const kernels::CubicTaps cub = kernels::resize_cubic_taps(o, in, out, attrs.coord, attrs.cubic_coeff_a, attrs.exclude_outside);
        for (int k = 0; k < 4; ++k) t.i[k][j] = std::int32_t(cub.i[k]), t.w[k][j] = cub.w[k];
        break;
      }
    }
  }
  return t;
}

class ResizePlan final : public Plan {
 public:
  ResizePlan(const TensorDesc& x, const TensorDesc& y, const kernels::KernelRow<kernels::ResizeFamily>* row,
             kernels::RowTiling tiling, StridedDims<2> planes, std::int64_t out_rows, kernels::ResizeArgs args,
             AxisTable rows, AxisTable cols)
      : Plan(row->name, traffic_bytes({x, y}),
             // Bilinear: three two-tap blends (2 multiplies, 1 add) per
             // element; cubic: two four-tap blends (4 multiplies, 3 adds).
             args.taps == 1 ? 0 : saturating_mul(args.taps == 2 ? 9 : 14, y.numel())),
        descs_{x, y}, row_(row), tiling_(tiling), planes_(planes), out_rows_(out_rows), args_(args),
        rows_(std::move(rows)), cols_(std::move(cols)) {}

  std::string_view op() const override { return "resize"; }

  Status do_run(Stream& stream, std::span<const Tensor> in, std::span<const Tensor> out, void*) const override {
    TESSERA_RETURN_IF_ERROR(check_x_to_y(op(), in, out, descs_));
    return stream.submit(op(), [&] {
      if (descs_[1].numel() == 0) return Status{};
      kernels::ResizeArgs args = args_;
      args.rows = rows_.view();
      args.cols = cols_.view();
      args.stream_y = tiling_.stream_output;
      const std::int64_t es = bytes_of(args.dtype);
      parallel_over(stream.pool(), planes_, out_rows_, tiling_.rows_per_task,
                    [&](const std::array<std::int64_t, 2>& off, std::int64_t r0, std::int64_t r1) {
                      kernels::ResizeArgs a = args;
                      a.x = byte_ptr(in[0]) + off[0] * es;
                      a.y = const_cast<char*>(byte_ptr(out[0])) + off[1] * es;
                      row_->run(a, r0, r1);
                    });
      return Status{};
    });
  }

 private:
  TensorDesc descs_[2];
  const kernels::KernelRow<kernels::ResizeFamily>* row_;
  kernels::RowTiling tiling_;
  StridedDims<2> planes_;  // (n, c) in NCHW, n in NHWC: element offsets of x's and y's planes
  std::int64_t out_rows_;
  kernels::ResizeArgs args_;  // all but the plane pointers and the tables
  AxisTable rows_, cols_;
};

Status check_attrs(const ResizeAttrs& attrs) {
  if (attrs.mode != ResizeMode::nearest && attrs.mode != ResizeMode::bilinear && attrs.mode != ResizeMode::cubic)
    return Status::invalid_argument(fmt::format("mode: {} is not a ResizeMode (nearest, bilinear or cubic)", int(attrs.mode)));
  if (attrs.mode == ResizeMode::cubic && !std::isfinite(attrs.cubic_coeff_a))
    return Status::invalid_argument(fmt::format("cubic_coeff_a: {} is not finite", attrs.cubic_coeff_a));
  switch (attrs.coord) {
    case CoordinateMode::half_pixel:
    case CoordinateMode::align_corners:
    case CoordinateMode::asymmetric:
    case CoordinateMode::pytorch_half_pixel: break;
    default:
      return Status::invalid_argument(fmt::format(
          "coord: {} is not a CoordinateMode (half_pixel, align_corners, asymmetric or pytorch_half_pixel)", int(attrs.coord)));
  }
  if (attrs.rounding != NearestRounding::round_prefer_floor && attrs.rounding != NearestRounding::floor)
    return Status::invalid_argument(
        fmt::format("rounding: {} is not a NearestRounding (round_prefer_floor or floor)", int(attrs.rounding)));
  return {};
}

}  // namespace

Result<PlanPtr> Resize::plan(Context& ctx, const TensorDesc& x, const TensorDesc& y, const ResizeAttrs& attrs) {
  TESSERA_RETURN_IF_ERROR(x.validate("x"));
  TESSERA_RETURN_IF_ERROR(y.validate("y"));
  TESSERA_RETURN_IF_ERROR(check_float(x, "x"));
  TESSERA_RETURN_IF_ERROR(check_rank(x, "x", 4, 4));
  TESSERA_RETURN_IF_ERROR(check_rank(y, "y", 4, 4));
  if (y.dtype != x.dtype)
    return Status::invalid_argument(fmt::format("y: dtype {} must equal x's dtype {}", to_string(y.dtype), to_string(x.dtype)));
  TESSERA_RETURN_IF_ERROR(check_attrs(attrs));

  const bool nhwc = attrs.channels_last;
  const int hd = nhwc ? 1 : 2, wd = hd + 1, cd = nhwc ? 3 : 1;  // dims of H, W, C
  const char* layout = nhwc ? "[N, H, W, C]" : "[N, C, H, W]";
  if (y.shape[0] != x.shape[0] || y.shape[cd] != x.shape[cd])
    return Status::invalid_argument(fmt::format("y: shape {} must keep x's N = {} and C = {} (layout {})", y.shape.to_string(),
                                                x.shape[0], x.shape[cd], layout));
  const std::int64_t h = x.shape[hd], w = x.shape[wd], ho = y.shape[hd], wo = y.shape[wd], c = x.shape[cd];
  if (ho == 0 || wo == 0)
    return Status::invalid_argument(
        fmt::format("y: output size {}x{} (shape {}, layout {}), expected Ho and Wo > 0", ho, wo, y.shape.to_string(), layout));
  if (h == 0 || w == 0)
    return Status::invalid_argument(fmt::format("x: input size {}x{} (shape {}, layout {}) is empty, expected H and W > 0",
                                                h, w, x.shape.to_string(), layout));
  // The kernels' tables and gathers index rows and columns with 32 bits.
  if (std::max(h, w) > INT32_MAX)
    return Status::invalid_argument(fmt::format("x: input size {}x{} exceeds {} per dim", h, w, INT32_MAX));
  if (std::max(ho, wo) > INT32_MAX)
    return Status::invalid_argument(fmt::format("y: output size {}x{} exceeds {} per dim", ho, wo, INT32_MAX));
  TESSERA_RETURN_IF_ERROR(check_writable(y, "y"));

  Shape plane_shape{x.shape[0]};
  Strides xs{x.strides[0]}, ys{y.strides[0]};
  if (!nhwc) plane_shape.push_back(c), xs.push_back(x.strides[1]), ys.push_back(y.strides[1]);
  const StridedDims<2> planes = collapse<2>(plane_shape, {xs, ys});

  // A pixel of one element (NCHW, or NHWC with C = 1) vectorizes along the
  // row; wider pixels along their channels.
  const std::int64_t channels = nhwc ? c : 1;
  const bool unit_stride = channels == 1 ? (w == 1 || x.strides[wd] == 1) && (wo == 1 || y.strides[wd] == 1)
                                         : x.strides[cd] == 1 && y.strides[cd] == 1;
  const kernels::ResizeArgs args{x.dtype, taps_of(attrs.mode), w, wo, channels,
                                 nullptr, x.strides[hd], x.strides[wd], nhwc ? x.strides[cd] : 0,
                                 nullptr, y.strides[hd], y.strides[wd], nhwc ? y.strides[cd] : 0};
  const kernels::ResizeProblem problem{{x.dtype, y.dtype, x.dtype, planes.numel() * ho, wo * channels, unit_stride}, args.taps};
  const auto* row = kernels::select<kernels::ResizeFamily>(problem, ctx.isa());
  kernels::RowTiling tiling = row->tiling(problem, ctx.hw());
  // Bilinear's two passes of blends, ~20 vector instructions per 16 outputs
  // (the per-row interpolation of a source row, then the blend of two), are
  // arithmetic_bound (kernels/tiling.hpp) against an element read and one
  // written: plain stores. Cubic's twice as many blends are too.
  constexpr int kBilinearWork = 20;
  if (args.taps > 1 && kernels::arithmetic_bound(kBilinearWork, 2 * bytes_of(x.dtype))) tiling.stream_output = false;
  return PlanPtr(std::make_shared<ResizePlan>(x, y, row, tiling, planes, ho, args, make_table(h, ho, attrs),
                                              make_table(w, wo, attrs)));
}

Status resize(Stream& stream, const Tensor& x, const Tensor& y, const ResizeAttrs& attrs) {
  PlanKey key("resize", stream.context().isa());
  key.add(x.desc()).add(y.desc());
  key.add(std::int64_t(attrs.mode)).add(std::int64_t(attrs.coord)).add(std::int64_t(attrs.rounding));
  key.add(std::int64_t(attrs.channels_last));
  if (attrs.mode == ResizeMode::cubic) key.add(attrs.cubic_coeff_a).add(std::int64_t(attrs.exclude_outside));
  const Tensor in[] = {x}, out[] = {y};
  return run_cached(stream, key, [&] { return Resize::plan(stream.context(), x.desc(), y.desc(), attrs); }, in, out);
}

}  // namespace tessera::ops
