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
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string_view>

#include "tessera/core/tensor.hpp"
#include "tessera/runtime/plan_cache.hpp"
#include "tessera/runtime/stream.hpp"

namespace tessera::ops {

class Plan : public CachedPlan {
 public:
  virtual std::string_view op() const = 0;
  // The kernel row plan() chose, e.g. "norm_avx512".
  std::string_view kernel() const { return kernel_; }
  // Scratch memory run() needs; pass at least this many bytes (64-byte aligned).
  virtual std::int64_t workspace_bytes() const { return 0; }
  // Traffic model: bytes read + written once, and floating-point operations.
  std::int64_t bytes_moved() const { return bytes_; }
  std::int64_t flops() const { return flops_; }

  virtual Status run(Stream& stream, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
                     void* workspace = nullptr) const = 0;
  Status run(Stream& stream, std::initializer_list<Tensor> inputs, std::initializer_list<Tensor> outputs,
             void* workspace = nullptr) const {
    return run(stream, std::span(inputs.begin(), inputs.size()), std::span(outputs.begin(), outputs.size()), workspace);
  }

 protected:
  Plan(std::string_view kernel, std::int64_t bytes, std::int64_t flops) : kernel_(kernel), bytes_(bytes), flops_(flops) {}

 private:
  std::string_view kernel_;
  std::int64_t bytes_, flops_;
};

using PlanPtr = std::shared_ptr<const Plan>;

}  // namespace tessera::ops
