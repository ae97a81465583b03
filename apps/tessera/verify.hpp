#pragma once
// `tessera verify`: the cases it checks (verify_cases.cpp) and what the
// command (verify.cpp) needs to know about each. A case is one op on fixed,
// deterministic inputs; the command plans it under every ISA ceiling, runs
// each distinct kernel row the op layer picks and compares its outputs with
// the scalar reference row's.
#include <functional>
#include <string>
#include <vector>

#include "tessera/core/compare.hpp"
#include "tessera/core/status.hpp"
#include "tessera/core/tensor.hpp"
#include "tessera/ops/plan.hpp"
#include "tessera/runtime/context.hpp"

namespace tessera::app::verify {

// The shape set. --quick runs min and odd only; typical and large are AIGC
// sizes, large kept small enough that the scalar reference stays cheap.
enum class Size { min, odd, typical, large };

// One output, in run()'s order, and how close to the reference it must be.
struct Output {
  std::string name;  // "y", "sum", "lse", ...
  TensorDesc desc;   // contiguous
  Tolerance tolerance;
};

// An op on fixed inputs: the same plan() call under every ISA ceiling, the
// same input tensors for every run.
struct Problem {
  std::function<Result<ops::PlanPtr>(Context&)> plan;
  std::vector<Tensor> inputs;
  std::vector<Output> outputs;
};

struct Case {
  std::string op;     // "add_rms_norm", "linear_w8a8", "resize_bilinear_nhwc", ...
  std::string dtype;  // "bf16", "f32->i4", "f32xi4g128", ...
  std::string shape;  // "[128, 4096]", "m=64 k=1024 n=1024", ...
  Size size;
  // Builds the inputs; called only for the cases that run, one at a time.
  std::function<Result<Problem>()> make;
};

// Every case, over every op family in tessera/ops and every dtype each takes.
std::vector<Case> all_cases();

}  // namespace tessera::app::verify
