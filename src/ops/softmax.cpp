#include "tessera/ops/softmax.hpp"

#include <cmath>
#include <vector>

#include "kernels/softmax.hpp"
#include "ops/common.hpp"

namespace tessera::ops {

using namespace detail;

namespace {

class SoftmaxPlan final : public Plan {
 public:
  SoftmaxPlan(std::vector<TensorDesc> inputs, const TensorDesc& y, SoftmaxAttrs attrs,
              const kernels::KernelRow<kernels::SoftmaxFamily>* row, kernels::RowTiling tiling,
              StridedDims<3> outer, std::array<std::int64_t, 3> row_strides, std::array<std::int64_t, 3> col_strides)
      : Plan(row->name, traffic_bytes({inputs[0], y}), saturating_mul(5, y.numel())),
        inputs_(std::move(inputs)), y_(y), attrs_(attrs), row_(row), tiling_(tiling), outer_(outer),
        row_strides_(row_strides), col_strides_(col_strides) {}

  std::string_view op() const override { return attrs_.log ? "log_softmax" : "softmax"; }

  Status do_run(Stream& stream, std::span<const Tensor> in, std::span<const Tensor> out, void*) const override {
    static constexpr std::string_view kIn[] = {"x", "mask"}, kOut[] = {"y"};
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), in, inputs_, kIn));
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), out, std::span(&y_, 1), kOut));
    TESSERA_RETURN_IF_ERROR(check_overlap(out[0], "y", in[0], "x", inputs_[0].dtype == y_.dtype));
    if (in.size() == 2) TESSERA_RETURN_IF_ERROR(check_overlap(out[0], "y", in[1], "mask", false));
    return stream.submit(op(), [&] {
      const TensorDesc& x = inputs_[0];
      const bool has_mask = in.size() == 2;
      const DType mask_dtype = has_mask ? inputs_[1].dtype : DType::f32;
      const std::int64_t rows = y_.rank() >= 2 ? y_.shape[y_.rank() - 2] : 1, cols = y_.shape[y_.rank() - 1];
      const kernels::SoftmaxArgs args{x.dtype, y_.dtype, mask_dtype, cols, nullptr, row_strides_[0], col_strides_[0],
                                      nullptr, row_strides_[1], col_strides_[1], nullptr, row_strides_[2],
                                      col_strides_[2], attrs_.scale, attrs_.causal, cols - rows, attrs_.log,
                                      tiling_.stream_output};
      parallel_over(stream.pool(), outer_, rows, tiling_.rows_per_task,
                    [&](const std::array<std::int64_t, 3>& off, std::int64_t r0, std::int64_t r1) {
                      kernels::SoftmaxArgs a = args;
                      a.x = byte_ptr(in[0]) + off[0] * bytes_of(x.dtype);
                      if (has_mask) a.mask = byte_ptr(in[1]) + off[1] * bytes_of(mask_dtype);
                      a.y = const_cast<char*>(byte_ptr(out[0])) + off[2] * bytes_of(y_.dtype);
                      row_->run(a, r0, r1);
                    });
      return Status{};
    });
  }

 private:
  std::vector<TensorDesc> inputs_;
  TensorDesc y_;
  SoftmaxAttrs attrs_;
  const kernels::KernelRow<kernels::SoftmaxFamily>* row_;
  kernels::RowTiling tiling_;
  StridedDims<3> outer_;
  std::array<std::int64_t, 3> row_strides_, col_strides_;  // x, mask, y
};

Result<PlanPtr> plan_softmax(Context& ctx, const TensorDesc& x, const std::optional<TensorDesc>& mask, const TensorDesc& y,
                             const SoftmaxAttrs& attrs) {
  TESSERA_RETURN_IF_ERROR(x.validate("x"));
  TESSERA_RETURN_IF_ERROR(y.validate("y"));
  TESSERA_RETURN_IF_ERROR(check_float(x, "x"));
  TESSERA_RETURN_IF_ERROR(check_float(y, "y"));
  TESSERA_RETURN_IF_ERROR(check_rank(x, "x", 1));
  TESSERA_RETURN_IF_ERROR(check_same_shape(y, "y", x.shape, "x's shape"));
  TESSERA_RETURN_IF_ERROR(check_writable(y, "y"));
  if (!std::isfinite(attrs.scale)) return Status::invalid_argument(fmt::format("scale: {} is not finite", attrs.scale));
  Strides mask_strides = Strides::filled(x.rank(), 0);
  if (mask) {
    TESSERA_RETURN_IF_ERROR(mask->validate("mask"));
    TESSERA_RETURN_IF_ERROR(check_float(*mask, "mask"));
    TESSERA_ASSIGN_OR_RETURN(mask_strides, check_broadcasts_to(*mask, "mask", x.shape, "x's shape"));
  }
  const int r = x.rank();
  Shape lead;
  Strides xs, ms, ys;
  for (int i = 0; i + 2 < r; ++i) lead.push_back(x.shape[i]), xs.push_back(x.strides[i]), ms.push_back(mask_strides[i]), ys.push_back(y.strides[i]);
  const auto outer = collapse<3>(lead, {xs, ms, ys});
  const std::array<std::int64_t, 3> row_strides = r >= 2 ? std::array{x.strides[r - 2], mask_strides[r - 2], y.strides[r - 2]}
                                                         : std::array<std::int64_t, 3>{0, 0, 0};
  const std::array<std::int64_t, 3> col_strides{x.strides[r - 1], mask_strides[r - 1], y.strides[r - 1]};
  const std::int64_t cols = x.shape[r - 1];
  const bool unit = col_strides[0] == 1 && col_strides[2] == 1 && (!mask || col_strides[1] == 1 || cols <= 1);
  const kernels::RowProblem problem{x.dtype, y.dtype, mask ? mask->dtype : DType::f32, cols ? x.numel() / cols : 0, cols, unit};
  const auto* row = kernels::select<kernels::SoftmaxFamily>(problem, ctx.isa());
  std::vector<TensorDesc> inputs{x};
  if (mask) inputs.push_back(*mask);
  return PlanPtr(std::make_shared<SoftmaxPlan>(std::move(inputs), y, attrs, row, row->tiling(problem, ctx.hw()), outer,
                                               row_strides, col_strides));
}

}  // namespace

Result<PlanPtr> Softmax::plan(Context& ctx, const TensorDesc& x, const std::optional<TensorDesc>& mask,
                              const TensorDesc& y, const SoftmaxAttrs& attrs) {
  std::vector<TensorDesc> in{x};
  std::vector<std::string_view> names{"x"};
  if (mask) in.push_back(*mask), names.push_back("mask");
  return plan_through_copies(ctx, std::move(in), {y}, std::move(names), {"y"}, contiguous_if_strided_rows,
                             [&](std::span<const TensorDesc> i, std::span<const TensorDesc> o) {
                               return plan_softmax(ctx, i[0], mask ? std::optional(i[1]) : std::nullopt, o[0], attrs);
                             });
}

namespace {
Status run_softmax(Stream& stream, std::span<const Tensor> in, const Tensor& y, const SoftmaxAttrs& attrs) {
  PlanKey key("softmax", stream.context().isa());
  for (const Tensor& t : in) key.add(t.desc());
  key.add(y.desc()).add(attrs.scale).add(std::int64_t(attrs.causal)).add(std::int64_t(attrs.log));
  const std::optional<TensorDesc> mask = in.size() == 2 ? std::optional(in[1].desc()) : std::nullopt;
  const Tensor out[] = {y};
  return run_cached(stream, key, [&] { return Softmax::plan(stream.context(), in[0].desc(), mask, y.desc(), attrs); }, in, out);
}
}  // namespace

Status softmax(Stream& stream, const Tensor& x, const Tensor& y, const SoftmaxAttrs& attrs) {
  const Tensor in[] = {x};
  return run_softmax(stream, in, y, attrs);
}

Status softmax(Stream& stream, const Tensor& x, const Tensor& mask, const Tensor& y, const SoftmaxAttrs& attrs) {
  const Tensor in[] = {x, mask};
  return run_softmax(stream, in, y, attrs);
}

}  // namespace tessera::ops
