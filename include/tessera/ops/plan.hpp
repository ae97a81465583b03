#pragma once
// The operator contract: plan, then run (the shape of oneDNN's primitive
// descriptor + primitive, and of aclnnXxxGetWorkspaceSize + aclnnXxx).
//
//   TESSERA_ASSIGN_OR_RETURN(auto plan, ops::RmsNorm::plan(ctx, x.desc(), g.desc(), y.desc(), {.eps = 1e-6f}));
//   plan->run(stream, {x, g}, {y});
//
// plan() does every check and picks the kernel row; run() only checks, cheaply,
// that the tensors match the plan's descs and do not overlap where that is not
// allowed. Each op also has a one-shot function that plans through the
// context's plan cache.
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/tensor.hpp"
#include "tessera/runtime/plan_cache.hpp"
#include "tessera/runtime/stream.hpp"

namespace tessera::ops {

// A tiling parameter of a plan's kernel row (Plan::tuning_params()).
struct TuningParam {
  std::string_view name;                 // e.g. "m_block"
  std::int64_t value;                    // what the plan uses
  std::vector<std::int64_t> candidates;  // what the tuner may try, ascending; value is among them
};

class Plan : public CachedPlan, public std::enable_shared_from_this<Plan> {
 public:
  virtual std::string_view op() const = 0;
  // The kernel row plan() chose, e.g. "norm_avx512".
  std::string_view kernel() const { return kernel_; }
  // Scratch memory run() needs; pass at least this many bytes (64-byte aligned).
  virtual std::int64_t workspace_bytes() const { return 0; }
  // Traffic model: bytes read + written once, and floating-point operations.
  std::int64_t bytes_moved() const { return bytes_; }
  std::int64_t flops() const { return flops_; }

  // The key `tessera tune` stores this plan's tiling under ("": not
  // tunable; see TuningStore), and its tiling parameters with the values
  // this plan uses and those the tuner may try, each valid for the plan's
  // kernel row. An override is stored as their values, in this order.
  virtual std::string tuning_key() const { return {}; }
  virtual std::vector<TuningParam> tuning_params() const { return {}; }

  // Runs the plan on `stream` (see stream.hpp for when it returns and how
  // errors surface). The plan must be owned by a PlanPtr. Without a
  // workspace, one of workspace_bytes() comes from the context's memory
  // pool, held until the op has run.
  Status run(Stream& stream, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
             void* workspace = nullptr) const {
    return launch(stream, inputs, outputs, workspace, {});
  }
  Status run(Stream& stream, std::initializer_list<Tensor> inputs, std::initializer_list<Tensor> outputs,
             void* workspace = nullptr) const {
    return run(stream, std::span(inputs.begin(), inputs.size()), std::span(outputs.begin(), outputs.size()), workspace);
  }

  // run() with the time the caller began (plan lookup included) for the
  // profiler's host time; the one-shot functions' path.
  Status launch(Stream& stream, std::span<const Tensor> inputs, std::span<const Tensor> outputs, void* workspace,
                std::chrono::steady_clock::time_point host_start) const;

 protected:
  Plan(std::string_view kernel, std::int64_t bytes, std::int64_t flops) : kernel_(kernel), bytes_(bytes), flops_(flops) {}

  // The op's run-time checks and its work, on the thread that executes the
  // stream's ops; the work goes through stream.submit(op(), ...) and splits
  // over stream.pool().
  virtual Status do_run(Stream& stream, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
                        void* workspace) const = 0;
  // A composite plan runs other plans as its steps (run_step), each recorded
  // by the profiler as its own entry; the composite itself is not recorded.
  virtual bool composite() const { return false; }
  // One of a composite's steps: `step`'s work on the executing thread, with
  // a profiler record of its own while the profiler is on.
  static Status run_step(const Plan& step, Stream& stream, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
                         void* workspace);

 private:
  std::string_view kernel_;
  std::int64_t bytes_, flops_;
};

using PlanPtr = std::shared_ptr<const Plan>;

}  // namespace tessera::ops
