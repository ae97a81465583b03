#pragma once
// Matrix multiplication with a fused epilogue.
//
// Matmul: batched C = A x B with numpy batch broadcasting, A [..., M, K],
// B [..., K, N], C [..., M, N]. Transposed operands are views (strides); no
// copy is made. A and B are f32, bf16 or f16, alike or not (f32 activations
// times bf16 weights: computed in f32, as oneDNN without fpmath); C is f32
// or one of theirs.
//
// Linear: A [..., K] x W [K, N] -> C [..., N] where W was packed once
// (pack_weights: f32 / bf16) or quantized once (quantize_weights: int8 /
// int4 with group-wise scales) into the layout the kernels stream. The plan
// holds the packed weights, so they live as long as any plan that uses them.
//
// Both apply the epilogue to each output element while its tile is in
// registers:  c = act(scale * sum_k a*b + bias[n]) + residual[m, n],
// then round to c's dtype. Accumulation is f32 (i32 for int8 x int8).
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "tessera/ops/activation.hpp"
#include "tessera/ops/plan.hpp"
#include "tessera/runtime/context.hpp"

namespace tessera::ops {

// The plan-time form: the bias and residual descs (absent when not fused).
// Run-time inputs are {a, b, [bias], [residual]}; the residual may be the
// very view of c (c += ...), any other overlap is an error.
struct Epilogue {
  float scale = 1.0f;
  Activation activation = Activation::none;
  std::optional<TensorDesc> bias;      // [N], any float dtype
  std::optional<TensorDesc> residual;  // shaped like c, any float dtype
};

// The one-shot form: undefined tensors are absent.
struct EpilogueTensors {
  float scale = 1.0f;
  Activation activation = Activation::none;
  Tensor bias;
  Tensor residual;
};

struct Matmul {
  static Result<PlanPtr> plan(Context& ctx, const TensorDesc& a, const TensorDesc& b, const TensorDesc& c,
                              const Epilogue& epilogue = {});
};

Status matmul(Stream& stream, const Tensor& a, const Tensor& b, const Tensor& c, const EpilogueTensors& epilogue = {});

// ----------------------------------------------------------------- packed weights

// Group-wise quantization along K: w[k, n] = (q[k, n] - zero[g, n]) * scale[g, n],
// g = k / group_size. Without zero points q is symmetric (int8: -127..127,
// int4: -8..7 with scale = max|w| / 7). Rounding is to nearest even; values
// saturate at the range.
struct QuantSpec {
  DType dtype = DType::i4;         // i8 or i4
  std::int64_t group_size = 128;   // must divide K; 0 = one group over K (per output channel)
  DType scale_dtype = DType::f32;  // f32, f16 or bf16
  bool zero_points = false;        // asymmetric, q unsigned: int8 0..255, int4 0..15
};

class PackedWeights {
 public:
  std::int64_t k() const { return k_; }
  std::int64_t n() const { return n_; }
  DType dtype() const { return dtype_; }  // f32, bf16, i8 or i4
  const QuantSpec& quant() const { return quant_; }
  std::int64_t group_size() const { return quant_.group_size == 0 ? k_ : quant_.group_size; }
  // Bytes a GEMM streams from this weight: values + scales + zero points
  // (+ column offsets).
  std::int64_t bytes() const { return bytes_; }
  // The weight as f32 [K, N], dequantized: what the kernels compute with.
  Result<Tensor> unpack() const;

  // Layout (see src/kernels/packed_weights.hpp); for the kernels.
  const void* values() const { return values_.get(); }
  const void* scales() const { return scales_.get(); }
  const std::uint8_t* zeros() const { return static_cast<const std::uint8_t*>(zeros_.get()); }
  const std::int32_t* column_offsets() const { return static_cast<const std::int32_t*>(column_offsets_.get()); }

 private:
  friend Result<std::shared_ptr<const PackedWeights>> pack_weights(const Tensor&, DType);
  friend class QuantizedPacker;  // quantize_weights, pack_quantized_weights
  PackedWeights() = default;
  std::int64_t k_ = 0, n_ = 0, bytes_ = 0;
  DType dtype_ = DType::f32;
  QuantSpec quant_{};
  std::shared_ptr<void> values_, scales_, zeros_, column_offsets_;
};
using WeightsPtr = std::shared_ptr<const PackedWeights>;

// b [K, N] (any float dtype, any strides) packed as f32 or bf16 (rounded to nearest even).
Result<WeightsPtr> pack_weights(const Tensor& b, DType dtype);
// b [K, N] quantized as spec says; K must be a multiple of the group size.
Result<WeightsPtr> quantize_weights(const Tensor& b, const QuantSpec& spec);
// Weights quantized elsewhere (GPTQ, AWQ, ONNX MatMulNBits or
// DequantizeLinear checkpoints), packed with their own values and scales
// rather than re-quantized from f32: w[k, n] = (q[k, n] - zero_points[g, n])
// * scales[g, n], g = k / (K / groups), as QuantSpec. q [K, N] holds one
// value per element (nibble-packed formats unpacked first): i8 without zero
// points (int8 -127..127, int4 -8..7), u8 with them (0..255, 0..15).
// scales [groups, N] f32, f16 or bf16, kept in their dtype; zero_points
// [groups, N] u8 in q's range, or undefined. groups divides K. Any strides:
// a checkpoint stored [N, K] is passed as its transposed view.
Result<WeightsPtr> pack_quantized_weights(DType dtype, const Tensor& q, const Tensor& scales, const Tensor& zero_points = {});

struct LinearOptions {
  // Quantize each row of A to int8 on the fly (symmetric, scale = max|a| /
  // 127, per token) and multiply integers: W8A8 with int8 weights quantized
  // per output channel without zero points, W4A8 with int4 weights (any
  // group size, zero points or not), run as int8 dot products (AVX512-VNNI):
  // 1.1-1.2x weight-only int4 at M = 1 (which quantizes A to int16 steps of
  // max|a| / 32639 per token there, on the same units), 1.7x at M = 16;
  // from M = 16 on weight-only int4 runs on AMX, the faster choice for
  // prefill.
  bool quantize_activations = false;
  // A plan for a dynamic number of rows: a, c and the residual are 2-D
  // [M, .] and run() takes any M' <= M rows (bytes and FLOPs stay M's). The
  // one-shots linear() and quantized_linear() make such plans when
  // Context::token_bucket is on.
  bool dynamic_rows = false;
};

struct Linear {
  // Inputs {a, [bias], [residual]}, outputs {c}. a [..., K] f32 or bf16; c [..., N] f32 or bf16.
  // On AMX and AVX512-BF16, A is rounded to bf16 against bf16 weights and, from M = 16 on,
  // against quantized ones; below M = 16, int4 and int8 weights (without
  // quantize_activations) take A quantized to int16 per token instead
  // (compare.hpp).
  static Result<PlanPtr> plan(Context& ctx, const TensorDesc& a, WeightsPtr w, const TensorDesc& c,
                              const Epilogue& epilogue = {}, const LinearOptions& options = {});
};

Status linear(Stream& stream, const Tensor& a, const WeightsPtr& w, const Tensor& c,
              const EpilogueTensors& epilogue = {}, const LinearOptions& options = {});

// Linear on activations the caller quantized (SmoothQuant / LLM.int8-style
// W8A8, an int8 model's activations kept int8 between layers): a [..., K]
// i8 standing for q * a_scales, a_scales (any float dtype) broadcasting to
// a's shape with K as 1: one scale per token ([..., 1]) or one for all
// ([1]). The weights and kernels are quantize_activations' (int8 per output
// channel without zero points, or int4), the pass that quantizes A replaced
// by a copy. The kernels take |q| <= 127, as symmetric quantizers give:
// -128 is read as -127.
struct QuantizedLinear {
  // Inputs {a, a_scales, [bias], [residual]}, outputs {c}; c [..., N] f32 or bf16.
  // options.dynamic_rows as Linear's, per-token a_scales [M, 1] taking the
  // rows a brings; options.quantize_activations is refused (a is int8).
  static Result<PlanPtr> plan(Context& ctx, const TensorDesc& a, const TensorDesc& a_scales, WeightsPtr w,
                              const TensorDesc& c, const Epilogue& epilogue = {}, const LinearOptions& options = {});
};

Status quantized_linear(Stream& stream, const Tensor& a, const Tensor& a_scales, const WeightsPtr& w, const Tensor& c,
                        const EpilogueTensors& epilogue = {});

}  // namespace tessera::ops
