#include "tessera/ops/rms_norm.hpp"

#include <cmath>

#include "kernels/rms_norm.hpp"
#include "ops/common.hpp"

namespace tessera::ops {

using namespace detail;

namespace {

class RmsNormPlan final : public Plan {
 public:
  RmsNormPlan(const TensorDesc& x, const TensorDesc& g, const TensorDesc& y, RmsNormAttrs attrs,
              const kernels::KernelRow<kernels::RmsNormFamily>* row, kernels::RowTiling tiling, SplitDims<2> rows)
      : Plan(row->name, traffic_bytes({x, g, y}), saturating_mul(4, y.numel())),
        descs_{x, g, y}, attrs_(attrs), row_(row), tiling_(tiling), rows_(rows) {}

  std::string_view op() const override { return "rms_norm"; }

  Status run(Stream& stream, std::span<const Tensor> in, std::span<const Tensor> out, void*) const override {
    static constexpr std::string_view kIn[] = {"x", "gamma"}, kOut[] = {"y"};
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), in, std::span(descs_, 2), kIn));
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), out, std::span(descs_ + 2, 1), kOut));
    TESSERA_RETURN_IF_ERROR(check_overlap(out[0], "y", in[0], "x", descs_[0].dtype == descs_[2].dtype));
    TESSERA_RETURN_IF_ERROR(check_overlap(out[0], "y", in[1], "gamma", false));
    return stream.submit(op(), [&] {
      const TensorDesc &x = descs_[0], &g = descs_[1], &y = descs_[2];
      const std::int64_t cols = x.shape[x.rank() - 1];
      kernels::RmsNormArgs args{x.dtype, y.dtype, g.dtype, cols, nullptr, rows_.inner_strides[0], x.strides[x.rank() - 1],
                                in[1].data(), g.strides[0], nullptr, rows_.inner_strides[1], y.strides[y.rank() - 1],
                                attrs_.eps};
      parallel_over(stream.context().pool(), rows_.outer, rows_.inner, tiling_.rows_per_task,
                    [&](const std::array<std::int64_t, 2>& off, std::int64_t r0, std::int64_t r1) {
                      kernels::RmsNormArgs a = args;
                      a.x = byte_ptr(in[0]) + off[0] * bytes_of(x.dtype);
                      a.y = const_cast<char*>(byte_ptr(out[0])) + off[1] * bytes_of(y.dtype);
                      row_->run(a, r0, r1);
                    });
      return Status{};
    });
  }

 private:
  TensorDesc descs_[3];
  RmsNormAttrs attrs_;
  const kernels::KernelRow<kernels::RmsNormFamily>* row_;
  kernels::RowTiling tiling_;
  SplitDims<2> rows_;
};

}  // namespace

Result<PlanPtr> RmsNorm::plan(Context& ctx, const TensorDesc& x, const TensorDesc& gamma, const TensorDesc& y,
                              const RmsNormAttrs& attrs) {
  TESSERA_RETURN_IF_ERROR(x.validate("x"));
  TESSERA_RETURN_IF_ERROR(gamma.validate("gamma"));
  TESSERA_RETURN_IF_ERROR(y.validate("y"));
  TESSERA_RETURN_IF_ERROR(check_float(x, "x"));
  TESSERA_RETURN_IF_ERROR(check_float(gamma, "gamma"));
  TESSERA_RETURN_IF_ERROR(check_float(y, "y"));
  TESSERA_RETURN_IF_ERROR(check_rank(x, "x", 1));
  const std::int64_t cols = x.shape[x.rank() - 1];
  if (cols == 0) return Status::invalid_argument(fmt::format("x: last dim (normalized) is 0 in shape {}, expected > 0", x.shape.to_string()));
  TESSERA_RETURN_IF_ERROR(check_rank(gamma, "gamma", 1, 1));
  TESSERA_RETURN_IF_ERROR(check_same_shape(gamma, "gamma", Shape{cols}, "x's last dim"));
  TESSERA_RETURN_IF_ERROR(check_same_shape(y, "y", x.shape, "x's shape"));
  TESSERA_RETURN_IF_ERROR(check_writable(y, "y"));
  if (!std::isfinite(attrs.eps) || attrs.eps < 0)
    return Status::invalid_argument(fmt::format("eps: {} is not a finite value >= 0", attrs.eps));

  Shape lead;
  Strides xs, ys;
  for (int i = 0; i + 1 < x.rank(); ++i) lead.push_back(x.shape[i]), xs.push_back(x.strides[i]), ys.push_back(y.strides[i]);
  const auto rows = split_last(collapse<2>(lead, {xs, ys}));
  const kernels::RowProblem problem{x.dtype, y.dtype, gamma.dtype, x.numel() / cols, cols,
                                    x.strides[x.rank() - 1] == 1 && y.strides[y.rank() - 1] == 1 && gamma.strides[0] == 1};
  const auto* row = kernels::select<kernels::RmsNormFamily>(problem, ctx.isa());
  return PlanPtr(std::make_shared<RmsNormPlan>(x, gamma, y, attrs, row, row->tiling(problem, ctx.hw()), rows));
}

Status rms_norm(Stream& stream, const Tensor& x, const Tensor& gamma, const Tensor& y, const RmsNormAttrs& attrs) {
  PlanKey key("rms_norm", stream.context().isa());
  key.add(x.desc()).add(gamma.desc()).add(y.desc()).add(attrs.eps);
  const Tensor in[] = {x, gamma}, out[] = {y};
  return run_cached(stream, key, [&] { return RmsNorm::plan(stream.context(), x.desc(), gamma.desc(), y.desc(), attrs); },
                    in, out);
}

}  // namespace tessera::ops
