#include "tessera/ops/topk.hpp"

#include <limits>

#include "kernels/topk.hpp"
#include "ops/common.hpp"

namespace tessera::ops {

using namespace detail;

namespace {

// The rows (every index of x's other dims, as collapsed dims walked with
// x's, values' and indices' strides) and one kernel row for all of them.
class TopKPlan final : public Plan {
 public:
  TopKPlan(const TensorDesc& x, const TensorDesc& values, const TensorDesc& indices, const TopKAttrs& attrs, int axis,
           SplitDims<3> rows, const kernels::KernelRow<kernels::TopKFamily>* row, kernels::ElementwiseTiling tiling)
      : Plan(row->name, traffic_bytes({x, values, indices}), x.numel()), descs_{x, values, indices}, attrs_(attrs),
        length_(x.shape[axis]), steps_{x.strides[axis], values.strides[axis], indices.strides[axis]}, rows_(rows), row_(row),
        tiling_(tiling) {}

  std::string_view op() const override { return "top_k"; }

  Status do_run(Stream& stream, std::span<const Tensor> in, std::span<const Tensor> out, void* /*workspace*/) const override {
    static constexpr std::string_view kOut[] = {"values", "indices"};
    TESSERA_RETURN_IF_ERROR(check_one_to_outputs(op(), in, "x", out, descs_, kOut));
    return stream.submit(op(), [&] {
      const DType xt = descs_[0].dtype, it = descs_[2].dtype;
      const auto& st = rows_.inner_strides;
      parallel_over(stream.pool(), rows_.outer, rows_.inner, tiling_.grain,
                    [&](const std::array<std::int64_t, 3>& off, std::int64_t j0, std::int64_t j1) {
                      row_->run({xt, it, j1 - j0, length_, attrs_.k, attrs_.largest,
                                 byte_ptr(in[0]) + (off[0] + j0 * st[0]) * bytes_of(xt), steps_[0], st[0],
                                 const_cast<char*>(byte_ptr(out[0])) + (off[1] + j0 * st[1]) * bytes_of(xt), steps_[1], st[1],
                                 const_cast<char*>(byte_ptr(out[1])) + (off[2] + j0 * st[2]) * bytes_of(it), steps_[2], st[2]});
                    });
      return Status{};
    });
  }

 private:
  TensorDesc descs_[3];  // x, values, indices
  TopKAttrs attrs_;
  std::int64_t length_;
  std::array<std::int64_t, 3> steps_;  // along the axis
  SplitDims<3> rows_;
  const kernels::KernelRow<kernels::TopKFamily>* row_;
  kernels::ElementwiseTiling tiling_;
};

}  // namespace

Result<PlanPtr> TopK::plan(Context& ctx, const TensorDesc& x, const TensorDesc& values, const TensorDesc& indices,
                           const TopKAttrs& attrs) {
  TESSERA_RETURN_IF_ERROR(x.validate("x"));
  TESSERA_RETURN_IF_ERROR(values.validate("values"));
  TESSERA_RETURN_IF_ERROR(indices.validate("indices"));
  TESSERA_RETURN_IF_ERROR(check_float(x, "x"));
  TESSERA_RETURN_IF_ERROR(check_rank(x, "x", 1));
  const int rank = x.rank();
  TESSERA_ASSIGN_OR_RETURN(const int axis, normalize_axis(attrs.axis, rank));
  const std::int64_t length = x.shape[axis];
  if (attrs.k < 0 || attrs.k > length)
    return Status::invalid_argument(fmt::format("k: {} is not in [0, {}] (x's dim {} of shape {})", attrs.k, length, axis, x.shape.to_string()));
  if (values.dtype != x.dtype)
    return Status::invalid_argument(fmt::format("values: dtype {} differs from x's {}", to_string(values.dtype), to_string(x.dtype)));
  TESSERA_RETURN_IF_ERROR(check_index_dtype(indices, "indices"));
  if (indices.dtype == DType::i32 && length - 1 > std::numeric_limits<std::int32_t>::max())
    return Status::invalid_argument(fmt::format("indices: i32 cannot hold the indices of x's dim {} of {} elements (take i64)", axis, length));
  Shape expected = x.shape;
  expected[axis] = attrs.k;
  const std::string what = fmt::format("x's shape with dim {} as k = {}", axis, attrs.k);
  TESSERA_RETURN_IF_ERROR(check_same_shape(values, "values", expected, what));
  TESSERA_RETURN_IF_ERROR(check_same_shape(indices, "indices", expected, what));
  TESSERA_RETURN_IF_ERROR(check_writable(values, "values"));
  TESSERA_RETURN_IF_ERROR(check_writable(indices, "indices"));

  // The rows: x's other dims, merged where all three tensors' strides allow.
  Shape others;
  std::array<Strides, 3> strides;
  for (int i = 0; i < rank; ++i) {
    if (i == axis) continue;
    others.push_back(x.shape[i]);
    strides[0].push_back(x.strides[i]), strides[1].push_back(values.strides[i]), strides[2].push_back(indices.strides[i]);
  }
  const SplitDims<3> rows = split_last(collapse<3>(others, strides));
  const kernels::TopKProblem problem{x.dtype, indices.dtype, saturating_mul(rows.outer.numel(), rows.inner), length, attrs.k,
                                     x.strides[axis]};
  const auto* row = kernels::select<kernels::TopKFamily>(problem, ctx.isa());
  return PlanPtr(std::make_shared<TopKPlan>(x, values, indices, attrs, axis, rows, row, row->tiling(problem, ctx.hw())));
}

Status top_k(Stream& stream, const Tensor& x, const Tensor& values, const Tensor& indices, const TopKAttrs& attrs) {
  PlanKey key("top_k", stream.context().isa());
  key.add(x.desc()).add(values.desc()).add(indices.desc()).add(attrs.k).add(std::int64_t(attrs.axis)).add(std::int64_t(attrs.largest));
  const Tensor in[] = {x}, out[] = {values, indices};
  return run_cached(stream, key, [&] { return TopK::plan(stream.context(), x.desc(), values.desc(), indices.desc(), attrs); }, in, out);
}

}  // namespace tessera::ops
