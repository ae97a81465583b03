#include "tessera/ops/reduce.hpp"

#include "kernels/reduce.hpp"
#include "ops/common.hpp"

namespace tessera::ops {

using namespace detail;

std::string_view to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::mean: return "mean";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
    case ReduceOp::argmax: return "argmax";
    case ReduceOp::argmin: return "argmin";
  }
  return "reduce";
}

namespace {

kernels::ReduceKind kind_of(ReduceOp op) {
  switch (op) {
    case ReduceOp::mean: return kernels::ReduceKind::mean;
    case ReduceOp::max: return kernels::ReduceKind::max;
    case ReduceOp::min: return kernels::ReduceKind::min;
    case ReduceOp::argmax: return kernels::ReduceKind::argmax;
    case ReduceOp::argmin: return kernels::ReduceKind::argmin;
    default: return kernels::ReduceKind::sum;
  }
}

class ReducePlan final : public Plan {
 public:
  // `outputs`: y's dims (the reduced one left out) walked with x's and y's strides.
  ReducePlan(const TensorDesc& x, const TensorDesc& y, ReduceOp op, std::int64_t length, std::int64_t x_step,
             const kernels::KernelRow<kernels::ReduceFamily>* row, kernels::ElementwiseTiling tiling, SplitDims<2> outputs)
      : Plan(row->name, traffic_bytes({x, y}), x.numel()),
        descs_{x, y}, op_(op), length_(length), x_step_(x_step), row_(row), tiling_(tiling), outputs_(outputs) {}

  std::string_view op() const override { return to_string(op_); }

  Status do_run(Stream& stream, std::span<const Tensor> in, std::span<const Tensor> out, void*) const override {
    TESSERA_RETURN_IF_ERROR(check_x_to_y(op(), in, out, descs_));
    return stream.submit(op(), [&] {
      const std::int64_t xs = bytes_of(descs_[0].dtype), ys = bytes_of(descs_[1].dtype);
      const auto& st = outputs_.inner_strides;
      parallel_over(stream.pool(), outputs_.outer, outputs_.inner, tiling_.grain,
                    [&](const std::array<std::int64_t, 2>& off, std::int64_t j0, std::int64_t j1) {
                      // An empty axis reads nothing of x, whose data may then be null.
                      const char* x = length_ == 0 ? nullptr : byte_ptr(in[0]) + (off[0] + j0 * st[0]) * xs;
                      row_->run({kind_of(op_), descs_[0].dtype, descs_[1].dtype, j1 - j0, length_, x, x_step_, st[0],
                                 const_cast<char*>(byte_ptr(out[0])) + (off[1] + j0 * st[1]) * ys, st[1]});
                    });
      return Status{};
    });
  }

 private:
  TensorDesc descs_[2];
  ReduceOp op_;
  std::int64_t length_, x_step_;
  const kernels::KernelRow<kernels::ReduceFamily>* row_;
  kernels::ElementwiseTiling tiling_;
  SplitDims<2> outputs_;
};

}  // namespace

Result<PlanPtr> Reduce::plan(Context& ctx, const TensorDesc& x, const TensorDesc& y, const ReduceAttrs& attrs) {
  TESSERA_RETURN_IF_ERROR(x.validate("x"));
  TESSERA_RETURN_IF_ERROR(y.validate("y"));
  TESSERA_RETURN_IF_ERROR(check_float(x, "x"));
  if (attrs.op == ReduceOp::argmax || attrs.op == ReduceOp::argmin) {
    if (y.dtype != DType::i64 && y.dtype != DType::i32)
      return Status::invalid_argument(fmt::format("y: dtype {} must be i64 or i32 for {} (indices)", to_string(y.dtype), to_string(attrs.op)));
  } else {
    TESSERA_RETURN_IF_ERROR(check_float(y, "y"));
  }
  TESSERA_RETURN_IF_ERROR(check_rank(x, "x", 1));
  const int rank = x.rank();
  if (attrs.axis < -rank || attrs.axis >= rank)
    return Status::invalid_argument(fmt::format("axis: {} is out of range for x of shape {}, expected {} to {}", attrs.axis,
                                                x.shape.to_string(), -rank, rank - 1));
  const int axis = attrs.axis < 0 ? attrs.axis + rank : attrs.axis;
  const std::int64_t length = x.shape[axis];
  if (length == 0 && attrs.op != ReduceOp::sum)
    return Status::invalid_argument(fmt::format("x: dim {} (reduced) is 0 in shape {}, and the {} of no elements is undefined",
                                                axis, x.shape.to_string(), to_string(attrs.op)));

  Shape expected, kept;  // y's shape; x's other dims
  Strides xs, ys;
  for (int i = 0; i < rank; ++i) {
    if (i == axis && attrs.keep_dims) expected.push_back(1);
    if (i == axis) continue;
    expected.push_back(x.shape[i]);
    kept.push_back(x.shape[i]);
    xs.push_back(x.strides[i]);
  }
  TESSERA_RETURN_IF_ERROR(check_same_shape(y, "y", expected,
                                           attrs.keep_dims ? fmt::format("x's shape with dim {} as 1", axis)
                                                           : fmt::format("x's shape without dim {}", axis)));
  TESSERA_RETURN_IF_ERROR(check_writable(y, "y"));
  for (int i = 0; i < y.rank(); ++i)
    if (!(attrs.keep_dims && i == axis)) ys.push_back(y.strides[i]);

  const auto outputs = split_last(collapse<2>(kept, {xs, ys}));
  const kernels::ReduceProblem problem{kind_of(attrs.op), x.dtype, y.dtype, y.numel(), length, x.strides[axis],
                                       outputs.inner_strides[0], outputs.inner_strides[1]};
  const auto* row = kernels::select<kernels::ReduceFamily>(problem, ctx.isa());
  return PlanPtr(std::make_shared<ReducePlan>(x, y, attrs.op, length, x.strides[axis], row, row->tiling(problem, ctx.hw()), outputs));
}

Status reduce(Stream& stream, const Tensor& x, const Tensor& y, const ReduceAttrs& attrs) {
  PlanKey key(to_string(attrs.op), stream.context().isa());
  key.add(x.desc()).add(y.desc()).add(std::int64_t(attrs.axis)).add(std::int64_t(attrs.keep_dims));
  const Tensor in[] = {x}, out[] = {y};
  return run_cached(stream, key, [&] { return Reduce::plan(stream.context(), x.desc(), y.desc(), attrs); }, in, out);
}

}  // namespace tessera::ops
