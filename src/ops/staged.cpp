// A plan run through copies of some of its operands (common.hpp,
// plan_through_copies).
#include "ops/common.hpp"
#include "tessera/ops/layout.hpp"

namespace tessera::ops::detail {

namespace {

// An operand copied through a buffer: in before the op (an input), or out
// after it (an output).
struct CopyStage {
  std::size_t index = 0;    // among the op's inputs, or its outputs
  PlanPtr reorder;          // the operand into the buffer, or the buffer into it
  TensorDesc buffer;        // the layout the op reads or writes instead
  std::int64_t offset = 0;  // bytes into the workspace
};

// Composite: the copies and the op are each recorded by the profiler as
// their own entry (DESIGN.md: layout traffic the op layer adds is visible).
class StagedPlan final : public Plan {
 public:
  StagedPlan(PlanPtr op, std::vector<TensorDesc> in, std::vector<TensorDesc> out, std::vector<std::string_view> in_names,
             std::vector<std::string_view> out_names, std::vector<CopyStage> ins, std::vector<CopyStage> outs,
             std::int64_t op_offset, std::int64_t bytes)
      : Plan(op->kernel(), bytes, op->flops()), op_(std::move(op)), in_(std::move(in)), out_(std::move(out)),
        in_names_(std::move(in_names)), out_names_(std::move(out_names)), ins_(std::move(ins)), outs_(std::move(outs)),
        op_offset_(op_offset) {}

  std::string_view op() const override { return op_->op(); }
  std::int64_t workspace_bytes() const override { return op_offset_ + op_->workspace_bytes(); }

 protected:
  bool composite() const override { return true; }

  Status do_run(Stream& stream, std::span<const Tensor> in, std::span<const Tensor> out, void* workspace) const override {
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), in, in_, in_names_));
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), out, out_, out_names_));
    // The op sees the buffers in place of these: an output may be an input's
    // very view (in place: the copies keep it correct), but may not overlap
    // one otherwise.
    for (std::size_t o = 0; o < out.size(); ++o)
      for (std::size_t i = 0; i < in.size(); ++i)
        TESSERA_RETURN_IF_ERROR(check_overlap(out[o], out_names_[o], in[i], in_names_[i], true));
    std::vector<Tensor> op_in(in.begin(), in.end()), op_out(out.begin(), out.end());
    auto* base = static_cast<char*>(workspace);
    for (const CopyStage& s : ins_) {
      TESSERA_ASSIGN_OR_RETURN(op_in[s.index], Tensor::wrap(base + s.offset, s.buffer));
      TESSERA_RETURN_IF_ERROR(run_step(*s.reorder, stream, {&in[s.index], 1}, {&op_in[s.index], 1}, nullptr));
    }
    for (const CopyStage& s : outs_) {
      TESSERA_ASSIGN_OR_RETURN(op_out[s.index], Tensor::wrap(base + s.offset, s.buffer));
    }
    TESSERA_RETURN_IF_ERROR(run_step(*op_, stream, op_in, op_out, base + op_offset_));
    for (const CopyStage& s : outs_)
      TESSERA_RETURN_IF_ERROR(run_step(*s.reorder, stream, {&op_out[s.index], 1}, {&out[s.index], 1}, nullptr));
    return Status{};
  }

 private:
  PlanPtr op_;
  std::vector<TensorDesc> in_, out_;
  std::vector<std::string_view> in_names_, out_names_;
  std::vector<CopyStage> ins_, outs_;
  std::int64_t op_offset_;  // the op's own workspace, after the buffers
};

}  // namespace

std::optional<TensorDesc> contiguous_if_strided_rows(const TensorDesc& d, bool) {
  if (d.rank() == 0 || d.shape[d.rank() - 1] <= 1 || d.strides[d.rank() - 1] <= 1) return std::nullopt;
  return TensorDesc::contiguous(d.dtype, d.shape);
}

Result<PlanPtr> plan_through_copies(Context& ctx, std::vector<TensorDesc> in, std::vector<TensorDesc> out,
                                    std::vector<std::string_view> in_names, std::vector<std::string_view> out_names,
                                    const CopyLayout& copy_of, const MakePlan& make) {
  TESSERA_ASSIGN_OR_RETURN(PlanPtr plain, make(in, out));  // the op's own checks first, on the operands as given
  if (ctx.isa() == hw::Isa::scalar) return plain;           // the reference rows walk any strides as they are
  std::vector<TensorDesc> op_in = in, op_out = out;
  std::vector<CopyStage> ins, outs;
  std::int64_t offset = 0, bytes = plain->bytes_moved();
  auto stage = [&](std::vector<TensorDesc>& descs, std::vector<CopyStage>& stages, bool output) -> Status {
    for (std::size_t i = 0; i < descs.size(); ++i) {
      const std::optional<TensorDesc> buffer = copy_of(descs[i], output);
      if (!buffer) continue;
      CopyStage s{i, nullptr, *buffer, offset};
      TESSERA_ASSIGN_OR_RETURN(s.reorder, output ? Reorder::plan(ctx, s.buffer, descs[i]) : Reorder::plan(ctx, descs[i], s.buffer));
      offset += (s.buffer.span_bytes() + 63) / 64 * 64;  // each buffer on its own cache lines
      bytes = saturating_add(bytes, saturating_mul(2, traffic_bytes({s.buffer})));
      descs[i] = s.buffer;
      stages.push_back(std::move(s));
    }
    return Status{};
  };
  TESSERA_RETURN_IF_ERROR(stage(op_in, ins, false));
  TESSERA_RETURN_IF_ERROR(stage(op_out, outs, true));
  if (ins.empty() && outs.empty()) return plain;
  TESSERA_ASSIGN_OR_RETURN(PlanPtr op, make(op_in, op_out));
  return PlanPtr(std::make_shared<StagedPlan>(std::move(op), std::move(in), std::move(out), std::move(in_names),
                                              std::move(out_names), std::move(ins), std::move(outs), offset, bytes));
}

}  // namespace tessera::ops::detail
