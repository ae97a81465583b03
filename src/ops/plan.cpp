#include "tessera/ops/plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "tessera/runtime/profiler.hpp"

namespace tessera::ops {

namespace {

using Clock = std::chrono::steady_clock;

OpRecord record_of(const Plan& plan, const Stream& stream, std::span<const Tensor> in, std::span<const Tensor> out) {
  OpRecord r;
  r.op = plan.op();
  r.kernel = plan.kernel();
  r.dtype = !in.empty() ? in[0].dtype() : !out.empty() ? out[0].dtype() : DType::f32;
  const std::size_t from_inputs = std::min<std::size_t>(in.size(), out.empty() ? OpRecord::kMaxShapes : OpRecord::kMaxShapes - 1);
  for (std::size_t i = 0; i < from_inputs; ++i) r.shapes[r.shape_count++] = in[i].shape();
  if (!out.empty()) r.shapes[r.shape_count++] = out[0].shape();
  r.stream = stream.id();
  r.bytes = plan.bytes_moved();
  r.flops = plan.flops();
  return r;
}

}  // namespace

Status Plan::run_step(const Plan& step, Stream& stream, std::span<const Tensor> in, std::span<const Tensor> out,
                      void* workspace) {
  Profiler& p = stream.context().profiler();
  if (!p.enabled()) return step.do_run(stream, in, out, workspace);
  OpRecord record = record_of(step, stream, in, out);
  record.threads = stream.pool().threads();
  record.host_begin_ns = record.host_end_ns = record.run_begin_ns = p.since_start(Clock::now());  // no host share of its own
  const Status s = step.do_run(stream, in, out, workspace);
  record.run_end_ns = p.since_start(Clock::now());
  p.add(record);
  return s;
}

Status Plan::launch(Stream& stream, std::span<const Tensor> in, std::span<const Tensor> out, void* workspace,
                    Clock::time_point host_start) const {
  Profiler& profiler = stream.context().profiler();
  if (profiler.enabled() && host_start == Clock::time_point{}) host_start = Clock::now();
  std::shared_ptr<MemoryPool::Block> workspace_block;  // the pool's, held until the op has run
  if (!workspace && workspace_bytes() > 0) {
    TESSERA_ASSIGN_OR_RETURN(auto block, stream.context().memory().allocate(workspace_bytes()));
    workspace_block = std::make_shared<MemoryPool::Block>(std::move(block));
    workspace = workspace_block->data();
  }
  // Runs `plan` and completes the record with the run's begin and end.
  const auto run_recorded = [](const Plan& plan, Stream& stream, std::span<const Tensor> in,
                               std::span<const Tensor> out, void* workspace, OpRecord& record) {
    Profiler& p = stream.context().profiler();
    record.run_begin_ns = p.since_start(Clock::now());
    const Status s = plan.do_run(stream, in, out, workspace);
    record.run_end_ns = p.since_start(Clock::now());
    p.add(record);
    return s;
  };
  std::optional<OpRecord> record;  // present while the profiler is on, for a plan not made of steps
  if (profiler.enabled() && !composite()) {
    record = record_of(*this, stream, in, out);
    record->threads = stream.pool().threads();
    record->host_begin_ns = profiler.since_start(host_start);
  }
  if (stream.runs_here()) {
    if (!record) return do_run(stream, in, out, workspace);
    record->host_end_ns = profiler.since_start(Clock::now());
    return run_recorded(*this, stream, in, out, workspace, *record);
  }
  // Queued: the task owns copies of the tensors (sharing their storage), the
  // plan and the workspace block; the record is completed on the worker, so
  // the host's share ends here, as the op is handed over.
  std::shared_ptr<const Plan> self = weak_from_this().lock();
  if (!self) return Status::invalid_argument(fmt::format("{}: run: the plan must be owned by a PlanPtr", op()));
  if (record) record->host_end_ns = profiler.since_start(Clock::now());
  auto task = [self = std::move(self), &stream, in = std::vector<Tensor>(in.begin(), in.end()),
               out = std::vector<Tensor>(out.begin(), out.end()), workspace, block = std::move(workspace_block),
               record, run_recorded]() mutable {
    if (!record) return self->do_run(stream, in, out, workspace);
    return run_recorded(*self, stream, in, out, workspace, *record);
  };
  return stream.enqueue(op(), std::move(task));
}

}  // namespace tessera::ops
