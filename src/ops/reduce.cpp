#include "tessera/ops/reduce.hpp"

#include <fmt/ranges.h>

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
    case ReduceOp::prod: return "prod";
    case ReduceOp::l1: return "l1";
    case ReduceOp::l2: return "l2";
    case ReduceOp::sum_square: return "sum_square";
    case ReduceOp::log_sum: return "log_sum";
    case ReduceOp::log_sum_exp: return "log_sum_exp";
    case ReduceOp::argmax: return "argmax";
    case ReduceOp::argmin: return "argmin";
  }
  return "reduce";
}

namespace {

// What one pass of `op` computes. Sums of terms take the terms in the
// first pass (which reads x) and finish in the last (which writes y); the
// passes between add partial sums. Products, extremes and log-sum-exps
// combine partial results as the elements themselves (the log-sum-exp of
// partial log-sum-exps is the whole one), means are means of means.
struct PassKind {
  kernels::ReduceKind kind;
  kernels::ReduceTerm term = kernels::ReduceTerm::value;
  kernels::ReduceFinish finish = kernels::ReduceFinish::none;
};

PassKind pass_kind(ReduceOp op, bool first, bool last) {
  using K = kernels::ReduceKind;
  using T = kernels::ReduceTerm;
  switch (op) {
    case ReduceOp::mean: return {K::mean};
    case ReduceOp::max: return {K::max};
    case ReduceOp::min: return {K::min};
    case ReduceOp::prod: return {K::prod};
    case ReduceOp::log_sum_exp: return {K::log_sum_exp};
    case ReduceOp::argmax: return {K::argmax};
    case ReduceOp::argmin: return {K::argmin};
    case ReduceOp::l1: return {K::sum, first ? T::abs : T::value};
    case ReduceOp::sum_square: return {K::sum, first ? T::square : T::value};
    case ReduceOp::l2: return {K::sum, first ? T::square : T::value, last ? kernels::ReduceFinish::sqrt : kernels::ReduceFinish::none};
    case ReduceOp::log_sum: return {K::sum, T::value, last ? kernels::ReduceFinish::log : kernels::ReduceFinish::none};
    case ReduceOp::sum: break;
  }
  return {K::sum};
}

// One pass of a reduction: `outputs` (y's elements, as dims walked with
// the pass's input and output strides) each reduce `length` input elements
// `x_step` apart.
struct ReducePass {
  PassKind kind;
  DType x_dtype, y_dtype;
  std::int64_t length, x_step;
  SplitDims<2> outputs;
  const kernels::KernelRow<kernels::ReduceFamily>* row;
  kernels::ElementwiseTiling tiling;
};

// Over several axes that no view merges into one (NCHW over N, H and W:
// strides C·H·W and 1), a pass per group of axes that does merge, the last
// group first: each pass writes its partial results (f32) into the
// workspace, laid out [earlier groups..., y's elements] so that the next pass
// reduces down columns of y's elements (the SIMD columns kernel); the last
// writes y. How each op combines the partial results: pass_kind.
class ReducePlan final : public Plan {
 public:
  ReducePlan(const TensorDesc& x, const TensorDesc& y, ReduceOp op, std::vector<ReducePass> passes, std::int64_t bytes)
      : Plan(passes.front().row->name, bytes, x.numel()), descs_{x, y}, op_(op), passes_(std::move(passes)) {
    for (std::size_t i = 0; i + 1 < passes_.size(); ++i) {
      const std::int64_t size = (partial_elems(passes_[i]) * 4 + 63) / 64 * 64;  // whole lines
      buffer_bytes_[i % 2] = std::max(buffer_bytes_[i % 2], size);
    }
  }

  std::string_view op() const override { return to_string(op_); }
  // Two buffers of partial results, the passes writing them in turn.
  std::int64_t workspace_bytes() const override { return buffer_bytes_[0] + buffer_bytes_[1]; }

  Status do_run(Stream& stream, std::span<const Tensor> in, std::span<const Tensor> out, void* workspace) const override {
    TESSERA_RETURN_IF_ERROR(check_x_to_y(op(), in, out, descs_));
    return stream.submit(op(), [&] {
      char* buffers[2] = {static_cast<char*>(workspace), static_cast<char*>(workspace) + buffer_bytes_[0]};
      const char* x = byte_ptr(in[0]);
      for (std::size_t i = 0; i < passes_.size(); ++i) {
        char* y = i + 1 < passes_.size() ? buffers[i % 2] : const_cast<char*>(byte_ptr(out[0]));
        run_pass(stream.pool(), passes_[i], x, y);
        x = y;
      }
      return Status{};
    });
  }

 private:
  static std::int64_t partial_elems(const ReducePass& p) { return p.outputs.outer.numel() * p.outputs.inner; }

  void run_pass(ThreadPool& pool, const ReducePass& p, const char* x_base, char* y_base) const {
    const std::int64_t xs = bytes_of(p.x_dtype), ys = bytes_of(p.y_dtype);
    const auto& st = p.outputs.inner_strides;
    parallel_over(pool, p.outputs.outer, p.outputs.inner, p.tiling.grain,
                  [&](const std::array<std::int64_t, 2>& off, std::int64_t j0, std::int64_t j1) {
                    // An empty axis reads nothing of x, whose data may then be null.
                    const char* x = p.length == 0 ? nullptr : x_base + (off[0] + j0 * st[0]) * xs;
                    p.row->run({p.kind.kind, p.kind.term, p.kind.finish, p.x_dtype, p.y_dtype, j1 - j0, p.length, x, p.x_step, st[0],
                                y_base + (off[1] + j0 * st[1]) * ys, st[1]});
                  });
  }

  TensorDesc descs_[2];
  ReduceOp op_;
  std::vector<ReducePass> passes_;
  std::int64_t buffer_bytes_[2] = {0, 0};
};

ReducePass make_pass(Context& ctx, PassKind kind, DType x_dtype, DType y_dtype, std::int64_t length, std::int64_t x_step,
                     const Shape& outputs, const Strides& x_strides, const Strides& y_strides) {
  ReducePass p{kind, x_dtype, y_dtype, length, x_step, split_last(collapse<2>(outputs, {x_strides, y_strides})), nullptr, {}};
  const kernels::ReduceProblem problem{kind.kind, kind.term, kind.finish, x_dtype, y_dtype, saturating_mul(p.outputs.outer.numel(), p.outputs.inner),
                                       length, x_step, p.outputs.inner_strides[0], p.outputs.inner_strides[1]};
  p.row = kernels::select<kernels::ReduceFamily>(problem, ctx.isa());
  p.tiling = p.row->tiling(problem, ctx.hw());
  return p;
}

// One long reduced run with too few outputs to share it: a part of it each
// for several tasks, then a pass over the parts' results. Rows (a unit
// step) with fewer outputs than cores were one task; columns whose outputs
// span under 8 KiB a core were split across their outputs, each task
// reading pieces of every row: NHWC [4, 64, 64, 512] f32 over N, H and W,
// AMD EPYC Zen 3, 1 / 2 threads: 6.4 / 13.9 GB/s. The run becomes [parts,
// length / parts], parts the largest divisor of its length up to 4 a core
// (none: left whole), each part at least 64 elements. Reductions under 64
// KiB a core stay one pass: a second pass and its workspace would cost more
// than the one core saves. Products stay whole: a part's product can
// overflow the f32 partial results where the whole one, in f64, does not
// (1.03 x 16384 then 1 / 1.03 x 16384: a part of 4096 is e^121).
StridedDims<1> split_for_cores(StridedDims<1> group, std::int64_t outputs, std::int64_t x_bytes, const hw::Info& hw) {
  const std::int64_t length = group.shape[0], step = group.strides[0][0], cores = hw.cores;
  const bool few = step == 1 ? outputs < cores : saturating_mul(outputs, x_bytes) < cores * (8 << 10);
  const bool big = saturating_mul(saturating_mul(outputs, length), x_bytes) >= cores * (64 << 10);
  if (!few || !big || cores < 2) return group;
  for (std::int64_t parts = 4 * cores; parts >= 2; --parts)
    if (length % parts == 0 && length / parts >= 64) {
      group.rank = 2;
      group.shape[0] = parts, group.strides[0][0] = length / parts * step;
      group.shape[1] = length / parts, group.strides[0][1] = step;
      return group;
    }
  return group;
}

}  // namespace

Result<PlanPtr> Reduce::plan(Context& ctx, const TensorDesc& x, const TensorDesc& y, const ReduceAttrs& attrs) {
  TESSERA_RETURN_IF_ERROR(x.validate("x"));
  TESSERA_RETURN_IF_ERROR(y.validate("y"));
  TESSERA_RETURN_IF_ERROR(check_float(x, "x"));
  const bool arg = attrs.op == ReduceOp::argmax || attrs.op == ReduceOp::argmin;
  if (arg) {
    if (y.dtype != DType::i64 && y.dtype != DType::i32)
      return Status::invalid_argument(fmt::format("y: dtype {} must be i64 or i32 for {} (indices)", to_string(y.dtype), to_string(attrs.op)));
    if (attrs.axes.size() != 1)
      return Status::invalid_argument(fmt::format("axes: {} takes one axis, {} given", to_string(attrs.op), attrs.axes.size()));
  } else {
    TESSERA_RETURN_IF_ERROR(check_float(y, "y"));
  }
  TESSERA_RETURN_IF_ERROR(check_rank(x, "x", 1));
  const int rank = x.rank();
  std::array<bool, kMaxRank> reduced{};
  for (int a : attrs.axes) {
    if (a < -rank || a >= rank)
      return Status::invalid_argument(fmt::format("axes: {} is out of range for x of shape {}, expected {} to {}", a,
                                                  x.shape.to_string(), -rank, rank - 1));
    const int axis = a < 0 ? a + rank : a;
    if (reduced[std::size_t(axis)])
      return Status::invalid_argument(fmt::format("axes: dim {} appears twice in [{}]", axis, fmt::join(attrs.axes, ", ")));
    reduced[std::size_t(axis)] = true;
  }
  if (attrs.axes.empty()) std::fill_n(reduced.begin(), rank, true);

  Shape expected, kept, lengths;  // y's shape; x's other dims; the reduced ones
  Strides xs, ys, steps;
  std::string which;
  std::int64_t count = 1;
  for (int i = 0; i < rank; ++i) {
    if (reduced[std::size_t(i)]) {
      if (attrs.keep_dims) expected.push_back(1);
      lengths.push_back(x.shape[i]), steps.push_back(x.strides[i]);
      which += fmt::format("{}{}", which.empty() ? "" : ", ", i);
      count = saturating_mul(count, x.shape[i]);
      continue;
    }
    expected.push_back(x.shape[i]);
    kept.push_back(x.shape[i]);
    xs.push_back(x.strides[i]);
  }
  const bool undefined_when_empty = attrs.op == ReduceOp::mean || attrs.op == ReduceOp::max || attrs.op == ReduceOp::min || arg;
  if (count == 0 && undefined_when_empty)
    return Status::invalid_argument(fmt::format("x: dims [{}] (reduced) of shape {} hold no elements, and the {} of none is undefined",
                                                which, x.shape.to_string(), to_string(attrs.op)));
  TESSERA_RETURN_IF_ERROR(check_same_shape(y, "y", expected,
                                           attrs.keep_dims ? fmt::format("x's shape with dims [{}] as 1", which)
                                                           : fmt::format("x's shape without dims [{}]", which)));
  TESSERA_RETURN_IF_ERROR(check_writable(y, "y"));
  for (int i = 0, j = 0; i < rank; ++i) {  // j: y's dim for x's dim i
    if (!reduced[std::size_t(i)]) ys.push_back(y.strides[j]);
    if (!reduced[std::size_t(i)] || attrs.keep_dims) ++j;
  }

  // The reduced dims, merged where x's strides allow (NCHW's H and W; every
  // dim of a contiguous x): a group each, one pass each. Size-1 dims drop
  // out; none left (all reduced dims of size 1, or x's shape kept whole) is
  // one pass of length 1.
  StridedDims<1> groups = collapse<1>(lengths, {steps});
  if (!arg && attrs.op != ReduceOp::prod && groups.rank == 1) groups = split_for_cores(groups, y.numel(), bytes_of(x.dtype), ctx.hw());
  std::vector<ReducePass> passes;
  std::int64_t bytes = traffic_bytes({x, y});
  if (groups.rank <= 1) {
    const std::int64_t length = groups.rank == 1 ? groups.shape[0] : count, step = groups.rank == 1 ? groups.strides[0][0] : 0;
    passes.push_back(make_pass(ctx, pass_kind(attrs.op, true, true), x.dtype, y.dtype, length, step, kept, xs, ys));
  } else {
    // Pass g reads groups 0..g with kept's elements and writes partials
    // [groups 0..g-1][kept] (f32, dense), or y at g = 0.
    const std::int64_t kept_elems = y.numel();
    const Strides dense_kept = contiguous_strides(kept);
    for (int g = groups.rank - 1; g >= 0; --g) {
      Shape outputs;
      Strides in_strides, out_strides;
      for (int h = 0; h < g; ++h) outputs.push_back(groups.shape[h]);
      const Strides partial = contiguous_strides(outputs);
      const bool first = g == groups.rank - 1, last = g == 0;
      for (int h = 0; h < g; ++h) {
        in_strides.push_back(first ? groups.strides[0][h] : saturating_mul(partial[h] * groups.shape[g], kept_elems));
        out_strides.push_back(partial[h] * kept_elems);
      }
      for (int i = 0; i < kept.rank(); ++i) {
        outputs.push_back(kept[i]);
        in_strides.push_back(first ? xs[i] : dense_kept[i]);
        out_strides.push_back(last ? ys[i] : dense_kept[i]);
      }
      const std::int64_t step = first ? groups.strides[0][g] : kept_elems;
      passes.push_back(make_pass(ctx, pass_kind(attrs.op, first, last), first ? x.dtype : DType::f32, last ? y.dtype : DType::f32, groups.shape[g], step,
                                 outputs, in_strides, out_strides));
      if (!last) bytes = saturating_add(bytes, saturating_mul(8, partial[0] * groups.shape[0] * kept_elems));  // written, then read
    }
  }
  return PlanPtr(std::make_shared<ReducePlan>(x, y, attrs.op, std::move(passes), bytes));
}

Status reduce(Stream& stream, const Tensor& x, const Tensor& y, const ReduceAttrs& attrs) {
  PlanKey key(to_string(attrs.op), stream.context().isa());
  key.add(x.desc()).add(y.desc()).add(std::int64_t(attrs.keep_dims)).add(std::int64_t(attrs.axes.size()));
  for (int a : attrs.axes) key.add(std::int64_t(a));
  const Tensor in[] = {x}, out[] = {y};
  return run_cached(stream, key, [&] { return Reduce::plan(stream.context(), x.desc(), y.desc(), attrs); }, in, out);
}

}  // namespace tessera::ops
