#include "tessera/ops/quantize.hpp"

#include <cstring>
#include <vector>

#include "kernels/matmul.hpp"
#include "kernels/quantize.hpp"
#include "ops/common.hpp"

namespace tessera::ops {

using namespace detail;

namespace {

bool is_quantized(DType t) { return t == DType::i8 || t == DType::u8 || t == DType::i4; }

// Bytes of one tensor read or written once; i4 holds two elements per byte.
std::int64_t tensor_bytes(const TensorDesc& d) {
  const std::int64_t bytes = traffic_bytes({d});
  return d.dtype == DType::i4 ? (bytes + 1) / 2 : bytes;
}

// How run() walks the operands. The dims are x's, collapsed, for five
// operands: x, y, scale, zero point, and the coordinate along the block axis
// (stride 1 there, 0 elsewhere). A block index i / group is not linear in i,
// so with blocks longer than one element the scale and zero point strides
// along that axis are kept apart and applied to the coordinate's block; the
// coordinate's 0/1 strides also keep that axis from merging with others.
struct Layout {
  SplitDims<5> dims;
  std::int64_t group = 1, scale_axis_stride = 0, zp_axis_stride = 0;
};

// Every check the two ops share, after the dtypes of x and y: `quantized` is
// the integer dtype, which the zero point must have.
Result<Layout> lay_out(const TensorDesc& x, const TensorDesc& scale, const std::optional<TensorDesc>& zp,
                       const TensorDesc& y, const QuantAttrs& attrs, DType quantized, std::string_view quantized_name) {
  TESSERA_RETURN_IF_ERROR(check_float(scale, "scale"));
  if (zp) {
    TESSERA_RETURN_IF_ERROR(zp->validate("zero_point"));
    if (zp->dtype != quantized)
      return Status::invalid_argument(fmt::format("zero_point: dtype {} must equal {}'s dtype {}", to_string(zp->dtype),
                                                  quantized_name, to_string(quantized)));
    TESSERA_RETURN_IF_ERROR(check_same_shape(*zp, "zero_point", scale.shape, "scale's shape"));
  }
  TESSERA_RETURN_IF_ERROR(check_same_shape(y, "y", x.shape, "x's shape"));
  TESSERA_RETURN_IF_ERROR(check_writable(y, "y"));
  if (attrs.group_size < 0)
    return Status::invalid_argument(fmt::format("group_size: {} must be >= 0 (0: per tensor or per channel)", attrs.group_size));

  const int r = x.rank();
  Layout l;
  Strides ss = Strides::filled(r, 0), zs = ss, coord = ss;
  const bool per_tensor = attrs.group_size == 0 && scale.rank() <= 1 && scale.numel() == 1;
  if (!per_tensor) {
    const int axis = attrs.axis < 0 ? attrs.axis + r : attrs.axis;
    if (axis < 0 || axis >= r)
      return Status::invalid_argument(
          fmt::format("axis: {} is out of range for x of rank {} (expected {} to {})", attrs.axis, r, -r, r - 1));
    if (attrs.group_size == 0) {
      if (scale.rank() != 1 || scale.shape[0] != x.shape[axis])
        return Status::invalid_argument(fmt::format(
            "scale: shape {} matches no granularity: expected [] or [1] (per tensor) or [{}] (per channel along axis {}); "
            "group-wise needs group_size > 0",
            scale.shape.to_string(), x.shape[axis], axis));
      ss[axis] = scale.strides[0];
      if (zp) zs[axis] = zp->strides[0];
    } else {
      Shape blocks = x.shape;
      blocks[axis] = (x.shape[axis] + attrs.group_size - 1) / attrs.group_size;  // the last block may be short
      if (!(scale.shape == blocks))
        return Status::invalid_argument(fmt::format(
            "scale: shape {} does not fit group-wise quantization along axis {} with group_size {}: expected {}",
            scale.shape.to_string(), axis, attrs.group_size, blocks.to_string()));
      for (int d = 0; d < r; ++d) ss[d] = scale.strides[d], zs[d] = zp ? zp->strides[d] : 0;
      if (attrs.group_size > 1) {
        l.group = attrs.group_size, l.scale_axis_stride = ss[axis], l.zp_axis_stride = zs[axis];
        ss[axis] = zs[axis] = 0, coord[axis] = 1;
      }
    }
  }
  l.dims = split_last(collapse<5>(x.shape, {x.strides, y.strides, ss, zs, coord}));
  return l;
}

class QuantPlan final : public Plan {
 public:
  QuantPlan(std::string_view op, std::string_view kernel, kernels::QuantRun run, std::vector<TensorDesc> inputs,
            const TensorDesc& y, const Layout& layout, std::int64_t grain, bool stream_y)
      : Plan(kernel, bytes_of_all(inputs, y), saturating_mul(2, y.numel())),
        op_(op), run_(run), inputs_(std::move(inputs)), y_(y), layout_(layout), grain_(grain), stream_y_(stream_y) {}

  std::string_view op() const override { return op_; }

  Status do_run(Stream& stream, std::span<const Tensor> in, std::span<const Tensor> out, void*) const override {
    static constexpr std::string_view kIn[] = {"x", "scale", "zero_point"}, kOut[] = {"y"};
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), in, inputs_, kIn));
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), out, std::span(&y_, 1), kOut));
    for (std::size_t i = 0; i < in.size(); ++i) TESSERA_RETURN_IF_ERROR(check_overlap(out[0], "y", in[i], kIn[i], false));
    return stream.submit(op(), [&] {
      const SplitDims<5>& d = layout_.dims;
      const bool has_zp = in.size() == 3;
      // A run along the block axis steps blocks of `group`; any other run
      // has one scale step per element (stride 0 when the scale is constant).
      const bool along_blocks = d.inner_strides[4] == 1;
      const kernels::QuantArgs base{
          inputs_[0].dtype, y_.dtype, inputs_[1].dtype, has_zp ? inputs_[2].dtype : y_.dtype,
          in[0].data(), 0, d.inner_strides[0],
          out[0].data(), 0, d.inner_strides[1],
          in[1].data(), 0, along_blocks ? layout_.scale_axis_stride : d.inner_strides[2],
          has_zp ? in[2].data() : nullptr, 0, along_blocks ? layout_.zp_axis_stride : d.inner_strides[3],
          along_blocks ? layout_.group : 1, stream_y_};
      parallel_over(stream.pool(), d.outer, d.inner, grain_,
                    [&](const std::array<std::int64_t, 5>& off, std::int64_t i0, std::int64_t i1) {
                      kernels::QuantArgs a = base;
                      const std::int64_t block = off[4] / layout_.group;
                      a.x_offset = off[0], a.y_offset = off[1];
                      a.scale_offset = off[2] + block * layout_.scale_axis_stride;
                      a.zp_offset = off[3] + block * layout_.zp_axis_stride;
                      run_(a, i0, i1);
                    });
      return Status{};
    });
  }

 private:
  static std::int64_t bytes_of_all(const std::vector<TensorDesc>& inputs, const TensorDesc& y) {
    std::int64_t total = tensor_bytes(y);
    for (const TensorDesc& d : inputs) total = saturating_add(total, tensor_bytes(d));
    return total;
  }

  std::string_view op_;
  kernels::QuantRun run_;
  std::vector<TensorDesc> inputs_;
  TensorDesc y_;
  Layout layout_;
  std::int64_t grain_;
  bool stream_y_;
};

// Picks the row and the task size. An i4 operand must start every call on a
// byte for the SIMD rows, and an i4 output must never have two tasks writing
// halves of one byte: with even row strides and unit steps along the run,
// tasks split at even run positions (or whole runs, for odd run lengths);
// otherwise an i4 output is written by one task.
template <class Family>
PlanPtr make_plan(std::string_view op, Context& ctx, const TensorDesc& x, const TensorDesc& scale,
                  const std::optional<TensorDesc>& zp, const TensorDesc& y, const Layout& layout) {
  const SplitDims<5>& d = layout.dims;
  const int packed = x.dtype == DType::i4 ? 0 : y.dtype == DType::i4 ? 1 : -1;  // operand index of an i4 tensor
  bool byte_aligned = true;
  if (packed >= 0) {
    for (int i = 0; i < d.outer.rank; ++i) byte_aligned = byte_aligned && d.outer.strides[packed][i] % 2 == 0;
    byte_aligned = byte_aligned && (d.inner <= 1 || d.inner_strides[packed] == 1);
  }
  const bool unit = d.inner <= 1 || (d.inner_strides[0] == 1 && d.inner_strides[1] == 1);
  const kernels::QuantProblem problem{x.dtype, y.dtype, scale.dtype, zp ? zp->dtype : DType::i8, unit, byte_aligned, x.numel()};
  const auto* row = kernels::select<Family>(problem, ctx.isa());
  const kernels::ElementwiseTiling tiling = row->tiling(problem, ctx.hw());
  std::int64_t grain = tiling.grain;
  if (packed >= 0 && byte_aligned) {
    const std::int64_t step = d.inner % 2 == 0 ? 2 : d.inner;
    grain = (grain + step - 1) / step * step;
  } else if (packed == 1) {
    grain = std::max<std::int64_t>(1, x.numel());
  }
  std::vector<TensorDesc> inputs{x, scale};
  if (zp) inputs.push_back(*zp);
  return PlanPtr(std::make_shared<QuantPlan>(op, row->name, row->run, std::move(inputs), y, layout, grain, tiling.stream_output));
}

std::optional<TensorDesc> desc_of(const std::optional<Tensor>& t) { return t ? std::optional(t->desc()) : std::nullopt; }

template <class MakePlan>
Status run_quant(Stream& stream, std::string_view op, const Tensor& x, const Tensor& scale,
                 const std::optional<Tensor>& zero_point, const Tensor& y, const QuantAttrs& attrs, MakePlan&& make) {
  std::vector<Tensor> in{x, scale};
  if (zero_point) in.push_back(*zero_point);
  const Tensor out[] = {y};
  PlanKey key(op, stream.context().isa());
  key.add(std::int64_t(attrs.axis)).add(attrs.group_size).add(std::int64_t(zero_point.has_value()));
  for (const Tensor& t : in) key.add(t.desc());
  key.add(y.desc());
  return run_cached(stream, key, make, in, out);
}

}  // namespace

Result<PlanPtr> Quantize::plan(Context& ctx, const TensorDesc& x, const TensorDesc& scale,
                               const std::optional<TensorDesc>& zero_point, const TensorDesc& y, const QuantAttrs& attrs) {
  TESSERA_RETURN_IF_ERROR(x.validate("x"));
  TESSERA_RETURN_IF_ERROR(scale.validate("scale"));
  TESSERA_RETURN_IF_ERROR(y.validate("y"));
  TESSERA_RETURN_IF_ERROR(check_float(x, "x"));
  if (!is_quantized(y.dtype))
    return Status::invalid_argument(fmt::format("y: dtype {} is not supported, expected i8, u8 or i4", to_string(y.dtype)));
  TESSERA_ASSIGN_OR_RETURN(Layout layout, lay_out(x, scale, zero_point, y, attrs, y.dtype, "y"));
  return make_plan<kernels::QuantizeFamily>("quantize", ctx, x, scale, zero_point, y, layout);
}

Result<PlanPtr> Dequantize::plan(Context& ctx, const TensorDesc& x, const TensorDesc& scale,
                                 const std::optional<TensorDesc>& zero_point, const TensorDesc& y, const QuantAttrs& attrs) {
  TESSERA_RETURN_IF_ERROR(x.validate("x"));
  TESSERA_RETURN_IF_ERROR(scale.validate("scale"));
  TESSERA_RETURN_IF_ERROR(y.validate("y"));
  if (!is_quantized(x.dtype) && x.dtype != DType::i32)
    return Status::invalid_argument(fmt::format("x: dtype {} is not supported, expected i8, u8, i4 or i32", to_string(x.dtype)));
  TESSERA_RETURN_IF_ERROR(check_float(y, "y"));
  TESSERA_ASSIGN_OR_RETURN(Layout layout, lay_out(x, scale, zero_point, y, attrs, x.dtype, "x"));
  return make_plan<kernels::DequantizeFamily>("dequantize", ctx, x, scale, zero_point, y, layout);
}

Status quantize(Stream& stream, const Tensor& x, const Tensor& scale, const std::optional<Tensor>& zero_point,
                const Tensor& y, const QuantAttrs& attrs) {
  return run_quant(stream, "quantize", x, scale, zero_point, y, attrs, [&] {
    return Quantize::plan(stream.context(), x.desc(), scale.desc(), desc_of(zero_point), y.desc(), attrs);
  });
}

Status dequantize(Stream& stream, const Tensor& x, const Tensor& scale, const std::optional<Tensor>& zero_point,
                  const Tensor& y, const QuantAttrs& attrs) {
  return run_quant(stream, "dequantize", x, scale, zero_point, y, attrs, [&] {
    return Dequantize::plan(stream.context(), x.desc(), scale.desc(), desc_of(zero_point), y.desc(), attrs);
  });
}

// ------------------------------------------------------------ QuantizeRows

namespace {

using QuantizeRowsRun = decltype(&kernels::ref::w8a8_quantize_rows);

class QuantizeRowsPlan final : public Plan {
 public:
  // `rows`: x's leading dims walked with x's, y's and the scales' strides.
  QuantizeRowsPlan(const TensorDesc& x, const TensorDesc& y, const TensorDesc& scales, std::string_view kernel, QuantizeRowsRun run,
                   SplitDims<3> rows, std::int64_t grain)
      : Plan(kernel, traffic_bytes({x, y, scales}), saturating_mul(3, x.numel())), descs_{x, y, scales}, run_(run), rows_(rows),
        grain_(grain) {}

  std::string_view op() const override { return "quantize_rows"; }

  Status do_run(Stream& stream, std::span<const Tensor> in, std::span<const Tensor> out, void*) const override {
    static constexpr std::string_view kOut[] = {"y", "scales"};
    TESSERA_RETURN_IF_ERROR(check_one_to_outputs(op(), in, "x", out, descs_, kOut));
    return stream.submit(op(), [&] {
      const TensorDesc &x = descs_[0], &y = descs_[1];
      const std::int64_t k = x.shape[x.rank() - 1], x_cs = x.strides[x.rank() - 1], y_cs = y.strides[y.rank() - 1];
      // The kernels write whole 64-byte steps of a row (zero past K), and
      // the scales side by side: in place where y's rows are back to back
      // in whole steps and the scales contiguous, else through buffers of
      // kBlock rows (a row copied with memcpy where y's columns are).
      constexpr std::int64_t kBlock = 16;
      const std::int64_t ldq = kernels::round_up(std::max<std::int64_t>(k, 1), 64);
      const auto& st = rows_.inner_strides;
      const bool rows_in_place = y_cs == 1 && st[1] == ldq && k == ldq, scales_in_place = st[2] == 1;
      parallel_over(stream.pool(), rows_.outer, rows_.inner, grain_,
                    [&](const std::array<std::int64_t, 3>& off, std::int64_t r0, std::int64_t r1) {
                      std::vector<std::int8_t> q(rows_in_place ? 0 : std::size_t(kBlock * ldq));
                      float scales[kBlock];
                      for (std::int64_t b = r0; b < r1; b += kBlock) {
                        const std::int64_t n = std::min(kBlock, r1 - b);
                        kernels::MatmulArgs p{};
                        p.a_dtype = x.dtype, p.k = k, p.a_row_stride = st[0], p.a_col_stride = x_cs;
                        p.a = byte_ptr(in[0]) + (off[0] + b * st[0]) * bytes_of(x.dtype);
                        auto* y_rows = static_cast<std::int8_t*>(out[0].data()) + off[1] + b * st[1];
                        auto* s_rows = static_cast<float*>(out[1].data()) + off[2] + b * st[2];
                        run_(p, 0, n, rows_in_place ? y_rows : q.data(), ldq, scales_in_place ? s_rows : scales);
                        for (std::int64_t i = 0; i < n; ++i) {
                          if (!scales_in_place) s_rows[i * st[2]] = scales[i];
                          if (rows_in_place) continue;
                          const std::int8_t* row = q.data() + i * ldq;
                          if (y_cs == 1) std::memcpy(y_rows + i * st[1], row, std::size_t(k));
                          else for (std::int64_t c = 0; c < k; ++c) y_rows[i * st[1] + c * y_cs] = row[c];
                        }
                      }
                    });
      return Status{};
    });
  }

 private:
  TensorDesc descs_[3];  // x, y, scales
  QuantizeRowsRun run_;
  SplitDims<3> rows_;
  std::int64_t grain_;
};

}  // namespace

Result<PlanPtr> QuantizeRows::plan(Context& ctx, const TensorDesc& x, const TensorDesc& y, const TensorDesc& scales) {
  TESSERA_RETURN_IF_ERROR(x.validate("x"));
  TESSERA_RETURN_IF_ERROR(y.validate("y"));
  TESSERA_RETURN_IF_ERROR(scales.validate("scales"));
  TESSERA_RETURN_IF_ERROR(check_float(x, "x"));
  TESSERA_RETURN_IF_ERROR(check_rank(x, "x", 1));
  if (y.dtype != DType::i8) return Status::invalid_argument(fmt::format("y: dtype {} is not i8", to_string(y.dtype)));
  TESSERA_RETURN_IF_ERROR(check_same_shape(y, "y", x.shape, "x's shape"));
  TESSERA_RETURN_IF_ERROR(check_writable(y, "y"));
  if (scales.dtype != DType::f32) return Status::invalid_argument(fmt::format("scales: dtype {} is not f32", to_string(scales.dtype)));
  const int r = x.rank();
  Shape per_row = x.shape;
  per_row[r - 1] = 1;
  TESSERA_RETURN_IF_ERROR(check_same_shape(scales, "scales", per_row, "x's shape with K as 1"));
  TESSERA_RETURN_IF_ERROR(check_writable(scales, "scales"));
  Shape lead;
  Strides xs, ys, ss;
  for (int i = 0; i + 1 < r; ++i) lead.push_back(x.shape[i]), xs.push_back(x.strides[i]), ys.push_back(y.strides[i]), ss.push_back(scales.strides[i]);
  const SplitDims<3> rows = split_last(collapse<3>(lead, {xs, ys, ss}));
  const kernels::W8A8Quantizer quantizer = kernels::w8a8_quantizer(ctx.isa());
  const std::int64_t grain =
      kernels::row_tiling({x.dtype, y.dtype, scales.dtype, rows.outer.numel() * rows.inner, x.shape[r - 1], true}, ctx.hw()).rows_per_task;
  return PlanPtr(std::make_shared<QuantizeRowsPlan>(x, y, scales, quantizer.name, quantizer.run, rows, grain));
}

Status quantize_rows(Stream& stream, const Tensor& x, const Tensor& y, const Tensor& scales) {
  PlanKey key("quantize_rows", stream.context().isa());
  key.add(x.desc()).add(y.desc()).add(scales.desc());
  const Tensor in[] = {x}, out[] = {y, scales};
  return run_cached(stream, key, [&] { return QuantizeRows::plan(stream.context(), x.desc(), y.desc(), scales.desc()); }, in, out);
}

}  // namespace tessera::ops
