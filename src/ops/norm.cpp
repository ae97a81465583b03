#include "tessera/ops/norm.hpp"

#include <algorithm>

#include <cmath>
#include <vector>

#include "kernels/norm.hpp"
#include "ops/common.hpp"

namespace tessera::ops {

using namespace detail;
using kernels::NormKind;

namespace {

std::string_view op_name(NormKind kind, bool add) {
  if (kind == NormKind::rms) return add ? "add_rms_norm" : "rms_norm";
  return add ? "add_layer_norm" : "layer_norm";
}

// Holds the tensors in run() order: inputs {x, [residual], [gamma], [beta]},
// outputs {y, [sum]}; sum is there exactly when residual is.
class NormPlan final : public Plan {
 public:
  // cols: the elements a row normalizes; steps: their stride in x,
  // residual, sum, y, gamma and beta (the normalized dims, one run each).
  NormPlan(NormKind kind, std::vector<TensorDesc> inputs, std::vector<std::string_view> input_names,
           std::vector<TensorDesc> outputs, int gamma_at, int beta_at, NormAttrs attrs,
           const kernels::KernelRow<kernels::NormFamily>* row, kernels::RowTiling tiling, kernels::NormOutputBlock output,
           SplitDims<4> rows, std::int64_t cols, std::array<std::int64_t, 6> steps)
      : Plan(row->name, bytes_of_all(inputs, outputs), flops_of(kind, outputs)),
        kind_(kind), inputs_(std::move(inputs)), input_names_(std::move(input_names)), outputs_(std::move(outputs)),
        gamma_at_(gamma_at), beta_at_(beta_at), attrs_(attrs), row_(row), tiling_(tiling), output_(output), rows_(rows),
        cols_(cols), steps_(steps) {}

  std::string_view op() const override { return op_name(kind_, has_residual()); }

  Status do_run(Stream& stream, std::span<const Tensor> in, std::span<const Tensor> out, void*) const override {
    static constexpr std::string_view kOut[] = {"y", "sum"};
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), in, inputs_, input_names_));
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), out, outputs_, std::span(kOut, outputs_.size())));
    // Every element of x and residual is read before the same element of y
    // or sum is written, so y may be x's very view and sum x's or residual's.
    for (std::size_t o = 0; o < out.size(); ++o)
      for (std::size_t i = 0; i < in.size(); ++i) {
        const bool may_alias = (i == 0 || (o == 1 && i == 1)) && inputs_[i].dtype == outputs_[o].dtype;
        TESSERA_RETURN_IF_ERROR(check_overlap(out[o], kOut[o], in[i], input_names_[i], may_alias));
      }
    if (has_residual()) TESSERA_RETURN_IF_ERROR(check_overlap(out[1], "sum", out[0], "y", false));
    return stream.submit(op(), [&] {
      const TensorDesc &x = inputs_[0], &y = outputs_[0];
      const TensorDesc& residual = has_residual() ? inputs_[1] : x;
      const TensorDesc& sum = has_residual() ? outputs_[1] : y;
      const TensorDesc* gamma = gamma_at_ >= 0 ? &inputs_[gamma_at_] : nullptr;
      const TensorDesc* beta = beta_at_ >= 0 ? &inputs_[beta_at_] : nullptr;
      const kernels::NormArgs args{
          kind_, x.dtype, residual.dtype, sum.dtype, gamma ? gamma->dtype : x.dtype, beta ? beta->dtype : x.dtype, y.dtype,
          cols_,
          nullptr, rows_.inner_strides[0], steps_[0],
          nullptr, rows_.inner_strides[1], steps_[1],
          nullptr, rows_.inner_strides[2], steps_[2],
          gamma ? in[gamma_at_].data() : nullptr, steps_[4],
          beta ? in[beta_at_].data() : nullptr, steps_[5],
          nullptr, rows_.inner_strides[3], steps_[3],
          attrs_.eps, tiling_.stream_output, tiling_.prefetch_l1, output_};
      parallel_over(stream.pool(), rows_.outer, rows_.inner, tiling_.rows_per_task,
                    [&](const std::array<std::int64_t, 4>& off, std::int64_t r0, std::int64_t r1) {
                      kernels::NormArgs a = args;
                      a.x = byte_ptr(in[0]) + off[0] * bytes_of(x.dtype);
                      if (has_residual()) {
                        a.residual = byte_ptr(in[1]) + off[1] * bytes_of(residual.dtype);
                        a.sum = const_cast<char*>(byte_ptr(out[1])) + off[2] * bytes_of(sum.dtype);
                      }
                      a.y = const_cast<char*>(byte_ptr(out[0])) + off[3] * bytes_of(y.dtype);
                      row_->run(a, r0, r1);
                    });
      return Status{};
    });
  }

 private:
  bool has_residual() const { return outputs_.size() == 2; }

  static std::int64_t bytes_of_all(const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs) {
    std::int64_t bytes = 0;
    for (const auto* list : {&inputs, &outputs})
      for (const TensorDesc& d : *list) bytes = saturating_add(bytes, traffic_bytes({d}));
    return bytes;
  }
  // Per element: the residual add; for layer the mean's add and two
  // centerings; the square-add, the scale and gamma's multiply-add.
  static std::int64_t flops_of(NormKind kind, const std::vector<TensorDesc>& outputs) {
    const std::int64_t per_element = (kind == NormKind::layer ? 8 : 4) + (outputs.size() == 2 ? 1 : 0);
    return saturating_mul(per_element, outputs[0].numel());
  }

  NormKind kind_;
  std::vector<TensorDesc> inputs_;
  std::vector<std::string_view> input_names_;
  std::vector<TensorDesc> outputs_;
  int gamma_at_, beta_at_;  // index in inputs_, -1 when absent
  NormAttrs attrs_;
  const kernels::KernelRow<kernels::NormFamily>* row_;
  kernels::RowTiling tiling_;
  kernels::NormOutputBlock output_;
  SplitDims<4> rows_;  // x, residual, sum, y
  std::int64_t cols_;
  std::array<std::int64_t, 6> steps_;  // x, residual, sum, y, gamma, beta
};

// The stride of d's dims [from, rank) as one run (they merge, as in a view
// of a contiguous tensor), or an error naming d.
Result<std::int64_t> run_stride(const TensorDesc& d, std::string_view name, int from) {
  Shape shape;
  Strides strides;
  for (int i = from; i < d.rank(); ++i) shape.push_back(d.shape[i]), strides.push_back(d.strides[i]);
  const StridedDims<1> run = collapse<1>(shape, {strides});
  if (run.rank > 1)
    return Status::invalid_argument(fmt::format("{}: dims {} to {} (normalized) of {} do not form one run; pass a contiguous copy",
                                                name, from, d.rank() - 1, d.to_string()));
  return run.rank == 1 ? run.strides[0][0] : 1;
}

// residual and sum are given together (the add variants) or not at all.
Result<PlanPtr> plan_norm_rows(Context& ctx, NormKind kind, const TensorDesc& x, const std::optional<TensorDesc>& residual,
                               const std::optional<TensorDesc>& gamma, const std::optional<TensorDesc>& beta,
                               const TensorDesc& y, const std::optional<TensorDesc>& sum, const NormAttrs& attrs) {
  TESSERA_RETURN_IF_ERROR(x.validate("x"));
  TESSERA_RETURN_IF_ERROR(check_float(x, "x"));
  TESSERA_RETURN_IF_ERROR(check_rank(x, "x", 1));
  const int rank = x.rank();
  TESSERA_ASSIGN_OR_RETURN(const int axis, normalize_axis(attrs.axis, rank));
  Shape normalized;  // x's dims from axis on
  std::int64_t cols = 1;
  for (int i = axis; i < rank; ++i) normalized.push_back(x.shape[i]), cols *= x.shape[i];
  if (cols == 0)
    return Status::invalid_argument(fmt::format("x: dims {} to {} (normalized) of shape {} hold no elements, expected > 0", axis,
                                                rank - 1, x.shape.to_string()));
  const auto check_row_shaped = [&](const TensorDesc& d, std::string_view name, bool written) -> Status {
    TESSERA_RETURN_IF_ERROR(d.validate(name));
    TESSERA_RETURN_IF_ERROR(check_float(d, name));
    TESSERA_RETURN_IF_ERROR(check_same_shape(d, name, x.shape, "x's shape"));
    return written ? check_writable(d, name) : Status{};
  };
  const auto check_param = [&](const TensorDesc& d, std::string_view name) -> Status {
    TESSERA_RETURN_IF_ERROR(d.validate(name));
    TESSERA_RETURN_IF_ERROR(check_float(d, name));
    return check_same_shape(d, name, normalized, axis == rank - 1 ? "x's last dim" : fmt::format("x's dims from {} on", axis));
  };
  if (residual) TESSERA_RETURN_IF_ERROR(check_row_shaped(*residual, "residual", false));
  if (gamma) TESSERA_RETURN_IF_ERROR(check_param(*gamma, "gamma"));
  if (beta) TESSERA_RETURN_IF_ERROR(check_param(*beta, "beta"));
  TESSERA_RETURN_IF_ERROR(check_row_shaped(y, "y", true));
  if (sum) TESSERA_RETURN_IF_ERROR(check_row_shaped(*sum, "sum", true));
  if (!std::isfinite(attrs.eps) || attrs.eps < 0)
    return Status::invalid_argument(fmt::format("eps: {} is not a finite value >= 0", attrs.eps));

  std::vector<TensorDesc> inputs{x}, outputs{y};
  std::vector<std::string_view> names{"x"};
  if (residual) inputs.push_back(*residual), names.push_back("residual"), outputs.push_back(*sum);
  const int gamma_at = gamma ? int(inputs.size()) : -1;
  if (gamma) inputs.push_back(*gamma), names.push_back("gamma");
  const int beta_at = beta ? int(inputs.size()) : -1;
  if (beta) inputs.push_back(*beta), names.push_back("beta");

  // Rows: every dim before axis, walked in step by x, residual, sum and y;
  // the normalized dims of each operand, one run of `cols` elements.
  const TensorDesc& r = residual ? *residual : x;
  const TensorDesc& s = sum ? *sum : y;
  Shape lead;
  std::array<Strides, 4> strides;
  for (int i = 0; i < axis; ++i) {
    lead.push_back(x.shape[i]);
    for (int k = 0; const TensorDesc* d : {&x, &r, &s, &y}) strides[k++].push_back(d->strides[i]);
  }
  std::array<std::int64_t, 6> steps{1, 1, 1, 1, 1, 1};  // 1 for an absent gamma or beta
  TESSERA_ASSIGN_OR_RETURN(steps[0], run_stride(x, "x", axis));
  TESSERA_ASSIGN_OR_RETURN(steps[3], run_stride(y, "y", axis));
  steps[1] = steps[0], steps[2] = steps[3];  // no residual and sum: x's and y's
  if (residual) {
    TESSERA_ASSIGN_OR_RETURN(steps[1], run_stride(*residual, "residual", axis));
    TESSERA_ASSIGN_OR_RETURN(steps[2], run_stride(*sum, "sum", axis));
  }
  if (gamma) {
    TESSERA_ASSIGN_OR_RETURN(steps[4], run_stride(*gamma, "gamma", 0));
  }
  if (beta) {
    TESSERA_ASSIGN_OR_RETURN(steps[5], run_stride(*beta, "beta", 0));
  }
  // Stride 1 along the run in every operand; a single column is contiguous whatever its stride.
  const bool unit = std::ranges::all_of(steps, [](std::int64_t step) { return step == 1; });
  const kernels::RowProblem problem{x.dtype, y.dtype, gamma ? gamma->dtype : x.dtype, x.numel() / cols, cols, unit || cols == 1};
  const auto* row = kernels::select<kernels::NormFamily>(problem, ctx.isa());
  return PlanPtr(std::make_shared<NormPlan>(kind, std::move(inputs), std::move(names), std::move(outputs), gamma_at, beta_at,
                                            attrs, row, row->tiling(problem, ctx.hw()),
                                            kernels::norm_output_block(cols, sum ? sum->dtype : x.dtype, beta.has_value(), ctx.hw()),
                                            split_last(collapse<4>(lead, strides)), cols, steps));
}

// plan_norm_rows through plan_through_copies: inputs {x, [residual], [gamma],
// [beta]}, outputs {y, [sum]}.
Result<PlanPtr> plan_norm(Context& ctx, NormKind kind, const TensorDesc& x, const std::optional<TensorDesc>& residual,
                          const std::optional<TensorDesc>& gamma, const std::optional<TensorDesc>& beta,
                          const TensorDesc& y, const std::optional<TensorDesc>& sum, const NormAttrs& attrs) {
  std::vector<TensorDesc> in{x}, out{y};
  std::vector<std::string_view> in_names{"x"}, out_names{"y"};
  for (auto [d, name] : {std::pair{&residual, "residual"}, {&gamma, "gamma"}, {&beta, "beta"}})
    if (*d) in.push_back(**d), in_names.push_back(name);
  if (sum) out.push_back(*sum), out_names.push_back("sum");
  return plan_through_copies(ctx, std::move(in), std::move(out), std::move(in_names), std::move(out_names),
                             contiguous_if_strided_rows, [&](std::span<const TensorDesc> i, std::span<const TensorDesc> o) {
                               std::size_t at = 1;
                               const auto next = [&](bool present) { return present ? std::optional(i[at++]) : std::nullopt; };
                               const auto r = next(residual.has_value()), g = next(gamma.has_value()), b = next(beta.has_value());
                               return plan_norm_rows(ctx, kind, i[0], r, g, b, o[0], sum ? std::optional(o[1]) : std::nullopt, attrs);
                             });
}

std::optional<TensorDesc> desc_of(const std::optional<Tensor>& t) { return t ? std::optional(t->desc()) : std::nullopt; }

// The one-shot path. The key says which of gamma and beta are there: with
// only one of them, their descs alone would not tell.
Status run_norm(Stream& stream, NormKind kind, const Tensor& x, const std::optional<Tensor>& residual,
                const std::optional<Tensor>& gamma, const std::optional<Tensor>& beta, const Tensor& y,
                const std::optional<Tensor>& sum, const NormAttrs& attrs) {
  std::vector<Tensor> in{x}, out{y};
  for (const auto* t : {&residual, &gamma, &beta})
    if (*t) in.push_back(**t);
  if (sum) out.push_back(*sum);
  PlanKey key(op_name(kind, residual.has_value()), stream.context().isa());
  key.add(std::int64_t(gamma.has_value())).add(std::int64_t(beta.has_value())).add(attrs.eps).add(std::int64_t(attrs.axis));
  for (const Tensor& t : in) key.add(t.desc());
  for (const Tensor& t : out) key.add(t.desc());
  return run_cached(stream, key, [&] {
    return plan_norm(stream.context(), kind, x.desc(), desc_of(residual), desc_of(gamma), desc_of(beta), y.desc(), desc_of(sum), attrs);
  }, in, out);
}

}  // namespace

Result<PlanPtr> RmsNorm::plan(Context& ctx, const TensorDesc& x, const std::optional<TensorDesc>& gamma,
                              const TensorDesc& y, const NormAttrs& attrs) {
  return plan_norm(ctx, NormKind::rms, x, std::nullopt, gamma, std::nullopt, y, std::nullopt, attrs);
}

Result<PlanPtr> LayerNorm::plan(Context& ctx, const TensorDesc& x, const std::optional<TensorDesc>& gamma,
                                const std::optional<TensorDesc>& beta, const TensorDesc& y, const NormAttrs& attrs) {
  return plan_norm(ctx, NormKind::layer, x, std::nullopt, gamma, beta, y, std::nullopt, attrs);
}

Result<PlanPtr> AddRmsNorm::plan(Context& ctx, const TensorDesc& x, const TensorDesc& residual,
                                 const std::optional<TensorDesc>& gamma, const TensorDesc& y, const TensorDesc& sum,
                                 const NormAttrs& attrs) {
  return plan_norm(ctx, NormKind::rms, x, residual, gamma, std::nullopt, y, sum, attrs);
}

Result<PlanPtr> AddLayerNorm::plan(Context& ctx, const TensorDesc& x, const TensorDesc& residual,
                                   const std::optional<TensorDesc>& gamma, const std::optional<TensorDesc>& beta,
                                   const TensorDesc& y, const TensorDesc& sum, const NormAttrs& attrs) {
  return plan_norm(ctx, NormKind::layer, x, residual, gamma, beta, y, sum, attrs);
}

Status rms_norm(Stream& stream, const Tensor& x, const std::optional<Tensor>& gamma, const Tensor& y, const NormAttrs& attrs) {
  return run_norm(stream, NormKind::rms, x, std::nullopt, gamma, std::nullopt, y, std::nullopt, attrs);
}

Status layer_norm(Stream& stream, const Tensor& x, const std::optional<Tensor>& gamma, const std::optional<Tensor>& beta,
                  const Tensor& y, const NormAttrs& attrs) {
  return run_norm(stream, NormKind::layer, x, std::nullopt, gamma, beta, y, std::nullopt, attrs);
}

Status add_rms_norm(Stream& stream, const Tensor& x, const Tensor& residual, const std::optional<Tensor>& gamma,
                    const Tensor& y, const Tensor& sum, const NormAttrs& attrs) {
  return run_norm(stream, NormKind::rms, x, residual, gamma, std::nullopt, y, sum, attrs);
}

Status add_layer_norm(Stream& stream, const Tensor& x, const Tensor& residual, const std::optional<Tensor>& gamma,
                      const std::optional<Tensor>& beta, const Tensor& y, const Tensor& sum, const NormAttrs& attrs) {
  return run_norm(stream, NormKind::layer, x, residual, gamma, beta, y, sum, attrs);
}

}  // namespace tessera::ops
