#pragma once
// The fused epilogue of the GEMM-based ops (matmul, linear, conv2d): its
// plan-time checks and the one-shot path's key and inputs.
#include <cstdint>
#include <string_view>
#include <vector>

#include "tessera/ops/matmul.hpp"

namespace tessera::ops::detail {

// scale finite, activation known, bias [n] contiguous, residual of the output's shape.
Status check_epilogue(const Epilogue& e, std::int64_t n, const TensorDesc& out, std::string_view out_name);

// The epilogue's descs for a plan: adds its attributes and tensors to the
// one-shot's key and appends the tensors to `in` (bias, then residual).
// `planned_rows` >= 0: the residual is planned with that many rows (a dynamic-rows plan).
Epilogue add_epilogue(const EpilogueTensors& e, std::vector<Tensor>& in, PlanKey& key, std::int64_t planned_rows = -1);

}  // namespace tessera::ops::detail
