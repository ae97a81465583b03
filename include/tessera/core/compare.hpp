#pragma once
// Comparing a result with its reference: the numbers the tests and
// `tessera verify` report, and the per-dtype tolerances — kept here, in one
// place, so that every check in the project means the same thing.
#include <cstdint>
#include <string>

#include "tessera/core/tensor.hpp"

namespace tessera {

struct Tolerance {
  double atol;        // absolute error allowed
  double rtol;        // error allowed relative to |reference|
  double min_cosine;  // cosine similarity of result and reference, at least
};

// The tolerance for results stored as `dtype`. `reduction` is the length of
// the longest sum behind each element (K of a matmul, the row of a norm):
// rounding error grows with it, roughly as its square root.
//   f32:  atol 1e-5 * sqrt(reduction), rtol 1e-5 — a few f32 ulps.
//   f16:  atol 2e-3 * sqrt(reduction), rtol 2e-3 — 2 ulps of f16 (2^-10 relative spacing).
//   bf16: atol 1e-2 * sqrt(reduction), rtol 1e-2 — 2 ulps of bf16 (2^-7 relative spacing).
// A result computed through bf16 operands is held to the bf16 tolerance even
// when stored as f32: matmuls with bf16 or int8 / int4 weights on AMX (and,
// where AMX is absent, on AVX512-BF16 dot products) round their operands to
// bf16 on the way into the products, and int4 / int8 weights below M = 16
// (where AMX is absent: int4 below 32, int8 below 128) take the activations
// quantized to int16 per token (finer than bf16 unless a row's largest
// value is 256x its RMS). W8A8 / W4A8 (int8 activations) are
// exact in i32 and then scaled in f32: f32 tolerance against a reference that
// rounds the activations to int8 the same way.
Tolerance tolerance_for(DType dtype, std::int64_t reduction = 1);

// Attention is held to tolerance_for(f32, head_dim) — the dot product behind
// each logit is the longest sum; P·V is a convex combination of V rows and
// adds no growth — or to tolerance_for(bf16) when q, k, v or o are bf16.
// Reading an int8 KV cache (symmetric, one scale per token and head) puts
// each stored value within max|x| / 254 of the original; for |k|, |v| <= 1
// and |q| <= 2 that moves o by ~1e-3 typically and ~1.5e-2 at worst, against
// the reference on the original f32 K and V: atol = rtol = 2e-2, cosine 0.999.
// Decode on VNNI (attention_decode_vnni) also rounds q to int8 per row (steps
// of max|q| / 127) and each block's probabilities, times the values' scales,
// to uint8 (steps of the block's largest / 255, so the largest is exact):
// errors of the same order, held to the same tolerance.
Tolerance tolerance_for_int8_kv_cache();

struct Comparison {
  std::int64_t count = 0;           // elements compared
  std::int64_t mismatches = 0;      // elements outside atol + rtol * |ref|, or NaN/Inf disagreeing
  double max_abs_error = 0.0;
  double max_rel_error = 0.0;       // |got - ref| / max(|ref|, 1e-6), finite elements
  double cosine = 1.0;              // of the finite elements
  std::int64_t nan_got = 0, nan_ref = 0, inf_got = 0, inf_ref = 0;
  std::int64_t first_mismatch = -1; // flat index

  bool passes(const Tolerance& tol) const { return mismatches == 0 && cosine >= tol.min_cosine; }
  std::string to_string() const;
};

// Element-wise comparison of two tensors of the same shape (any dtypes, any strides).
Result<Comparison> compare(const Tensor& got, const Tensor& ref, const Tolerance& tol);

}  // namespace tessera
