// The cases of `tessera verify`: every op family of tessera/ops over f32,
// bf16 and f16 where the op takes them, on the min / odd / typical / large
// shape set. Each output is held to compare.hpp's tolerance for its dtype and
// longest reduction, chosen per op as tests/ops chooses it. Inputs are
// contiguous (gather's table excepted, see there) and deterministic.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "bench/harness.hpp"
#include "tessera/tessera.hpp"
#include "verify.hpp"

namespace tessera::app::verify {

namespace {

using ops::Activation;
using ops::PlanPtr;

constexpr DType kFloatTypes[] = {DType::f32, DType::bf16, DType::f16};
constexpr DType kQuantTypes[] = {DType::i8, DType::u8, DType::i4};

TensorDesc desc(DType dtype, const Shape& shape) { return TensorDesc::contiguous(dtype, shape); }
std::string str(DType dtype) { return std::string(to_string(dtype)); }
std::string conversion(DType from, DType to) { return fmt::format("{}->{}", to_string(from), to_string(to)); }

// Uniform in [lo, hi) from the bench's counter hash, rounded to a float dtype.
Result<Tensor> random_tensor(DType dtype, const Shape& shape, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  TESSERA_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(dtype, shape));
  std::vector<float> values(static_cast<std::size_t>(t.numel()));
  bench::fill_uniform(values, seed, lo, hi);
  for (std::size_t i = 0; i < values.size(); ++i) {
    switch (dtype) {
      case DType::f32: t.data_as<float>()[i] = values[i]; break;
      case DType::bf16: t.data_as<bf16_t>()[i] = f32_to_bf16(values[i]); break;
      case DType::f16: t.data_as<f16_t>()[i] = f32_to_f16(values[i]); break;
      case DType::i8: t.data_as<std::int8_t>()[i] = std::int8_t(std::lrint(std::clamp(values[i], -128.0f, 127.0f))); break;
      default: return Status::invalid_argument(fmt::format("dtype: {} is neither a float type nor i8", to_string(dtype)));
    }
  }
  return t;
}

// Integers uniform in [lo, hi], as i8, u8 or i4 (two per byte, element 2k in the low nibble).
Result<Tensor> random_ints(DType dtype, const Shape& shape, std::uint64_t seed, int lo, int hi) {
  TESSERA_ASSIGN_OR_RETURN(Tensor t, Tensor::zeros(dtype, shape));
  std::vector<float> values(static_cast<std::size_t>(t.numel()));
  bench::fill_uniform(values, seed, float(lo), float(hi + 1));
  auto* bytes = t.data_as<std::uint8_t>();
  for (std::size_t i = 0; i < values.size(); ++i) {
    const auto bits = std::uint8_t(std::clamp(int(std::floor(values[i])), lo, hi));  // two's complement
    if (dtype == DType::i4)
      bytes[i / 2] |= std::uint8_t((bits & 0xf) << (i % 2 * 4));
    else
      bytes[i] = bits;
  }
  return t;
}

std::pair<int, int> full_range(DType dtype) {
  switch (dtype) {
    case DType::u8: return {0, 255};
    case DType::i4: return {-8, 7};
    default: return {-128, 127};
  }
}

// Near the middle of the type's range, so that few values saturate.
std::pair<int, int> zero_point_range(DType dtype) {
  switch (dtype) {
    case DType::u8: return {100, 150};
    case DType::i4: return {-3, 3};
    default: return {-20, 20};
  }
}

// Indices (i32 or i64) spread over [0, n): element i holds (37 i + 5) mod n.
Result<Tensor> spread_indices(DType dtype, const Shape& shape, std::int64_t n) {
  TESSERA_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(dtype, shape));
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    const std::int64_t v = (37 * i + 5) % n;
    if (dtype == DType::i32)
      t.data_as<std::int32_t>()[i] = std::int32_t(v);
    else
      t.data_as<std::int64_t>()[i] = v;
  }
  return t;
}

struct Sized {
  Size size;
  Shape shape;
};

// Tokens x hidden: the shape set of the row-wise and elementwise ops.
const Sized kRowShapes[] = {
    {Size::min, {1, 1}}, {Size::odd, {17, 255}}, {Size::typical, {128, 4096}}, {Size::large, {512, 4096}}};

bool is_odd_or_typical(Size s) { return s == Size::odd || s == Size::typical; }

// ------------------------------------------------------------- elementwise

void add_elementwise(std::vector<Case>& out) {
  for (Activation act : {Activation::relu, Activation::gelu_erf, Activation::gelu_tanh, Activation::silu,
                         Activation::sigmoid, Activation::tanh, Activation::exp, Activation::quick_gelu})
    for (DType dt : kFloatTypes)
      for (const Sized& s : kRowShapes)
        out.push_back({fmt::format("unary_{}", ops::to_string(act)), str(dt), s.shape.to_string(), s.size,
                       [=]() -> Result<Problem> {
                         TESSERA_ASSIGN_OR_RETURN(Tensor x, random_tensor(dt, s.shape, 1, -9.0f, 9.0f));
                         const TensorDesc y = desc(dt, s.shape);
                         return Problem{[=, xd = x.desc()](Context& ctx) { return ops::Unary::plan(ctx, act, xd, y); },
                                        {x},
                                        {{"y", y, tolerance_for(dt)}}};
                       }});

  const std::pair<DType, DType> kCasts[] = {
      {DType::f32, DType::bf16}, {DType::f32, DType::f16}, {DType::bf16, DType::f32}, {DType::f16, DType::f32}};
  for (const auto& cast : kCasts)
    for (const Sized& s : kRowShapes)
      out.push_back({"cast", conversion(cast.first, cast.second), s.shape.to_string(), s.size, [=]() -> Result<Problem> {
                       // Past f16's largest finite value (65504): overflow to Inf is checked too.
                       TESSERA_ASSIGN_OR_RETURN(Tensor x, random_tensor(cast.first, s.shape, 2, -70000.0f, 70000.0f));
                       const TensorDesc y = desc(cast.second, s.shape);
                       return Problem{[=, xd = x.desc()](Context& ctx) {
                                        return ops::Unary::plan(ctx, Activation::none, xd, y);
                                      },
                                      {x},
                                      {{"y", y, tolerance_for(cast.second)}}};
                     }});

  for (ops::BinaryOp op : {ops::BinaryOp::add, ops::BinaryOp::sub, ops::BinaryOp::mul, ops::BinaryOp::div,
                           ops::BinaryOp::max, ops::BinaryOp::min})
    for (DType dt : kFloatTypes)
      for (const Sized& s : kRowShapes)
        // Same shapes, and (odd, typical) a [C] row broadcast over the rows, as a bias is.
        for (bool broadcast : {false, true}) {
          if (broadcast && !is_odd_or_typical(s.size)) continue;
          const Shape b_shape = broadcast ? Shape{s.shape[1]} : s.shape;
          out.push_back({fmt::format("binary_{}", ops::to_string(op)), str(dt),
                         broadcast ? fmt::format("{} x {}", s.shape.to_string(), b_shape.to_string()) : s.shape.to_string(),
                         s.size, [=]() -> Result<Problem> {
                           TESSERA_ASSIGN_OR_RETURN(Tensor a, random_tensor(dt, s.shape, 3));
                           TESSERA_ASSIGN_OR_RETURN(Tensor b, random_tensor(dt, b_shape, 4));
                           const TensorDesc y = desc(dt, s.shape);
                           return Problem{[=, ad = a.desc(), bd = b.desc()](Context& ctx) {
                                            return ops::Binary::plan(ctx, op, ad, bd, y);
                                          },
                                          {a, b},
                                          {{"y", y, tolerance_for(dt)}}};
                         }});
        }

  for (Activation act : {Activation::silu, Activation::gelu_erf, Activation::gelu_tanh, Activation::relu, Activation::quick_gelu})
    for (DType dt : kFloatTypes)
      for (const Sized& s : kRowShapes)
        // act(a) * b, and (odd, typical) the seeds' act(a) * w + bias, w and bias [C].
        for (bool per_channel : {false, true}) {
          if (per_channel && !is_odd_or_typical(s.size)) continue;
          const Shape w_shape = per_channel ? Shape{s.shape[1]} : s.shape;
          out.push_back({fmt::format("gated_{}{}", ops::to_string(act), per_channel ? "_bias" : ""), str(dt),
                         per_channel ? fmt::format("{} * {} + {}", s.shape.to_string(), w_shape.to_string(),
                                                   w_shape.to_string())
                                     : s.shape.to_string(),
                         s.size, [=]() -> Result<Problem> {
                           TESSERA_ASSIGN_OR_RETURN(Tensor a, random_tensor(dt, s.shape, 5, -4.0f, 4.0f));
                           TESSERA_ASSIGN_OR_RETURN(Tensor b, random_tensor(dt, w_shape, 6));
                           TESSERA_ASSIGN_OR_RETURN(Tensor c, random_tensor(dt, w_shape, 7));
                           const TensorDesc y = desc(dt, s.shape);
                           const std::optional<TensorDesc> cd = per_channel ? std::optional(c.desc()) : std::nullopt;
                           std::vector<Tensor> inputs = {a, b};
                           if (per_channel) inputs.push_back(c);
                           return Problem{[=, ad = a.desc(), bd = b.desc()](Context& ctx) {
                                            return ops::Gated::plan(ctx, act, ad, bd, cd, y);
                                          },
                                          std::move(inputs),
                                          {{"y", y, tolerance_for(dt)}}};
                         }});
        }
}

// ------------------------------------------------------------------- norms

void add_norms(std::vector<Case>& out) {
  struct NormOp {
    const char* name;
    bool adds, layer;
  };
  // Over the last dim of rows, and over C, H and W of an image batch (axis
  // 1: PyTorch's LayerNorm([C, H, W]), ONNX LayerNormalization's axis).
  const Sized kImageShapes[] = {
      {Size::min, {1, 1, 1, 1}}, {Size::odd, {2, 5, 7, 9}}, {Size::typical, {2, 64, 16, 16}}, {Size::large, {4, 128, 32, 32}}};
  for (const NormOp op : {NormOp{"rms_norm", false, false}, NormOp{"layer_norm", false, true},
                          NormOp{"add_rms_norm", true, false}, NormOp{"add_layer_norm", true, true}})
    for (bool image : {false, true})
      for (DType dt : kFloatTypes)
        for (const Sized& s : image ? std::span<const Sized>(kImageShapes) : std::span<const Sized>(kRowShapes))
          out.push_back({image ? fmt::format("{}_chw", op.name) : std::string(op.name), str(dt), s.shape.to_string(), s.size,
                         [=]() -> Result<Problem> {
                           const int axis = image ? 1 : -1;
                           Shape normalized;
                           for (int i = 1; i < s.shape.rank(); ++i) normalized.push_back(s.shape[i]);
                           TESSERA_ASSIGN_OR_RETURN(Tensor x, random_tensor(dt, s.shape, 8, -3.0f, 3.0f));
                           TESSERA_ASSIGN_OR_RETURN(Tensor residual, random_tensor(dt, s.shape, 9, -3.0f, 3.0f));
                           TESSERA_ASSIGN_OR_RETURN(Tensor gamma, random_tensor(dt, normalized, 10));
                           TESSERA_ASSIGN_OR_RETURN(Tensor beta, random_tensor(dt, normalized, 11));
                           std::vector<Tensor> inputs = {x};
                           if (op.adds) inputs.push_back(residual);
                           inputs.push_back(gamma);
                           if (op.layer) inputs.push_back(beta);
                           std::vector<Output> outputs = {{"y", x.desc(), tolerance_for(dt, gamma.numel())}};
                           if (op.adds) outputs.push_back({"sum", x.desc(), tolerance_for(dt)});
                           // residual, y and sum are shaped and typed like x; beta like gamma.
                           auto plan = [op, axis, xd = x.desc(), gd = gamma.desc()](Context& ctx) -> Result<PlanPtr> {
                             const ops::NormAttrs attrs{.eps = 1e-5f, .axis = axis};
                             if (op.adds && op.layer) return ops::AddLayerNorm::plan(ctx, xd, xd, gd, gd, xd, xd, attrs);
                             if (op.adds) return ops::AddRmsNorm::plan(ctx, xd, xd, gd, xd, xd, attrs);
                             if (op.layer) return ops::LayerNorm::plan(ctx, xd, gd, gd, xd, attrs);
                             return ops::RmsNorm::plan(ctx, xd, gd, xd, attrs);
                           };
                           return Problem{plan, std::move(inputs), std::move(outputs)};
                         }});
}

void add_group_norms(std::vector<Case>& out) {
  struct GroupNormShape {
    Size size;
    std::int64_t n, c, groups, h, w;
  };
  // Up to a diffusion VAE's 512 channels at 64 x 64.
  const GroupNormShape kShapes[] = {{Size::min, 1, 1, 1, 1, 1},
                                    {Size::odd, 2, 40, 8, 9, 11},
                                    {Size::typical, 2, 320, 32, 32, 32},
                                    {Size::large, 1, 512, 32, 64, 64}};
  for (bool fused : {false, true})
    for (bool channels_last : {false, true})
      for (DType dt : kFloatTypes)
        for (const GroupNormShape& s : kShapes) {
          const Shape shape = channels_last ? Shape{s.n, s.h, s.w, s.c} : Shape{s.n, s.c, s.h, s.w};
          out.push_back({fmt::format("{}_{}", fused ? "residual_group_norm_silu_mul" : "group_norm",
                                     channels_last ? "nhwc" : "nchw"),
                         str(dt), fmt::format("{} groups={}", shape.to_string(), s.groups), s.size,
                         [=]() -> Result<Problem> {
                           TESSERA_ASSIGN_OR_RETURN(Tensor x, random_tensor(dt, shape, 12, -3.0f, 3.0f));
                           TESSERA_ASSIGN_OR_RETURN(Tensor residual, random_tensor(dt, shape, 13, -3.0f, 3.0f));
                           TESSERA_ASSIGN_OR_RETURN(Tensor gamma, random_tensor(dt, {s.c}, 14));
                           TESSERA_ASSIGN_OR_RETURN(Tensor beta, random_tensor(dt, {s.c}, 15));
                           TESSERA_ASSIGN_OR_RETURN(Tensor mul, random_tensor(dt, shape, 16));
                           const ops::GroupNormAttrs attrs{
                               .groups = s.groups, .eps = 1e-5f, .channels_last = channels_last, .silu = fused};
                           const TensorDesc xd = x.desc();
                           const ops::GroupNormFusion fusion =
                               fused ? ops::GroupNormFusion{.residual = xd, .mul = xd, .sum = xd} : ops::GroupNormFusion{};
                           std::vector<Output> outputs = {{"y", xd, tolerance_for(dt, s.c / s.groups * s.h * s.w)}};
                           if (fused) outputs.push_back({"sum", xd, tolerance_for(dt)});
                           return Problem{[=, g = gamma.desc()](Context& ctx) {
                                            return ops::GroupNorm::plan(ctx, xd, g, g, xd, attrs, fusion);
                                          },
                                          fused ? std::vector{x, residual, gamma, beta, mul} : std::vector{x, gamma, beta},
                                          std::move(outputs)};
                         }});
        }
}

void add_softmax(std::vector<Case>& out) {
  // [heads, queries, keys]: attention scores.
  const Sized kShapes[] = {{Size::min, {1, 1}},
                           {Size::odd, {2, 17, 255}},
                           {Size::typical, {8, 128, 512}},
                           {Size::large, {16, 256, 512}}};
  struct Variant {
    const char* name;
    ops::SoftmaxAttrs attrs;
    bool mask;
  };
  const Variant kVariants[] = {{"softmax", {.scale = 0.7f}, false},
                               {"log_softmax", {.scale = 0.7f, .log = true}, false},
                               {"softmax_causal", {.causal = true}, false},
                               {"softmax_masked", {}, true}};
  for (const Variant& v : kVariants)
    for (DType dt : kFloatTypes)
      for (const Sized& s : kShapes) {
        if (v.mask && !is_odd_or_typical(s.size)) continue;
        const int rank = s.shape.rank();
        const Shape mask_shape{s.shape[rank - 2], s.shape[rank - 1]};  // [Sq, Skv], broadcast over heads
        out.push_back({v.name, str(dt),
                       v.mask ? fmt::format("{} + {}", s.shape.to_string(), mask_shape.to_string()) : s.shape.to_string(),
                       s.size, [=]() -> Result<Problem> {
                         TESSERA_ASSIGN_OR_RETURN(Tensor x, random_tensor(dt, s.shape, 17, -8.0f, 8.0f));
                         TESSERA_ASSIGN_OR_RETURN(Tensor mask, random_tensor(dt, mask_shape, 18, -2.0f, 0.0f));
                         const std::optional<TensorDesc> md = v.mask ? std::optional(mask.desc()) : std::nullopt;
                         return Problem{[=, xd = x.desc()](Context& ctx) {
                                          return ops::Softmax::plan(ctx, xd, md, xd, v.attrs);
                                        },
                                        v.mask ? std::vector{x, mask} : std::vector{x},
                                        {{"y", x.desc(), tolerance_for(dt, s.shape[rank - 1])}}};
                       }});
      }
}

void add_reduce(std::vector<Case>& out) {
  // x for `op`: factors near 1 for products (thousands stay within f32's
  // range), positive sums for log_sum, else [-2, 2].
  const auto input = [](ops::ReduceOp op, DType dt, const Shape& shape, std::uint64_t seed) {
    const float lo = op == ops::ReduceOp::prod ? 0.95f : op == ops::ReduceOp::log_sum ? 0.0f : -2.0f;
    const float hi = op == ops::ReduceOp::prod ? 1.05f : 2.0f;
    return random_tensor(dt, shape, seed, lo, hi);
  };
  using ops::ReduceOp;
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min, ReduceOp::prod, ReduceOp::l1, ReduceOp::l2,
                      ReduceOp::sum_square, ReduceOp::log_sum, ReduceOp::log_sum_exp, ReduceOp::argmax, ReduceOp::argmin})
    for (int axis : {-1, 0})  // along each row, and down the columns
      for (DType dt : kFloatTypes)
        for (const Sized& s : kRowShapes)
          out.push_back({fmt::format("reduce_{}_{}", ops::to_string(op), axis == 0 ? "columns" : "rows"), str(dt),
                         s.shape.to_string(), s.size, [=]() -> Result<Problem> {
                           TESSERA_ASSIGN_OR_RETURN(Tensor x, input(op, dt, s.shape, 19));
                           const int reduced = axis < 0 ? 1 : 0;
                           const bool indices = op == ops::ReduceOp::argmax || op == ops::ReduceOp::argmin;
                           const TensorDesc y = desc(indices ? DType::i64 : dt, {s.shape[1 - reduced]});
                           const ops::ReduceAttrs attrs{.op = op, .axes = {axis}};
                           return Problem{[=, xd = x.desc()](Context& ctx) { return ops::Reduce::plan(ctx, xd, y, attrs); },
                                          {x},
                                          {{"y", y, tolerance_for(dt, s.shape[reduced])}}};
                         }});
  // Several axes: NCHW per-channel statistics (N, H and W: two passes) and
  // a global average pool (H and W: one).
  const Sized kNchw[] = {{Size::min, {1, 1, 1, 1}}, {Size::odd, {3, 5, 7, 9}}, {Size::typical, {2, 320, 32, 32}}, {Size::large, {4, 512, 64, 64}}};
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min, ReduceOp::l2, ReduceOp::log_sum_exp})
    for (bool stats : {true, false})
      for (DType dt : kFloatTypes)
        for (const Sized& s : kNchw)
          out.push_back({fmt::format("reduce_{}_{}", ops::to_string(op), stats ? "nhw" : "hw"), str(dt), s.shape.to_string(), s.size,
                         [=]() -> Result<Problem> {
                           TESSERA_ASSIGN_OR_RETURN(Tensor x, input(op, dt, s.shape, 20));
                           const TensorDesc y = desc(dt, {stats ? 1 : s.shape[0], s.shape[1], 1, 1});
                           const ops::ReduceAttrs attrs{.op = op, .axes = stats ? std::vector{0, 2, 3} : std::vector{2, 3}, .keep_dims = true};
                           const std::int64_t count = (stats ? s.shape[0] : 1) * s.shape[2] * s.shape[3];
                           return Problem{[=, xd = x.desc()](Context& ctx) { return ops::Reduce::plan(ctx, xd, y, attrs); },
                                          {x},
                                          {{"y", y, tolerance_for(dt, count)}}};
                         }});
}

// ------------------------------------------------------------------ layout

// Top-k: the values and indices must match the scalar row's exactly.
void add_top_k(std::vector<Case>& out) {
  struct TopKShape {
    Size size;
    Shape shape;
    std::int64_t k;
  };
  // A single element; odd rows; MoE routing (8 of 64 experts); sampling (50 of Llama 3's vocabulary).
  const TopKShape kShapes[] = {{Size::min, {1, 1}, 1}, {Size::odd, {17, 255}, 5}, {Size::typical, {4096, 64}, 8}, {Size::large, {16, 128256}, 50}};
  const Tolerance exact{.atol = 0, .rtol = 0, .min_cosine = 1};
  for (bool largest : {true, false})
    for (DType dt : kFloatTypes)
      for (const TopKShape& s : kShapes)
        out.push_back({largest ? "top_k_largest" : "top_k_smallest", str(dt), fmt::format("{} k={}", s.shape.to_string(), s.k), s.size,
                       [=]() -> Result<Problem> {
                         TESSERA_ASSIGN_OR_RETURN(Tensor x, random_tensor(dt, s.shape, 21, -4.0f, 4.0f));
                         const TensorDesc values = desc(dt, {s.shape[0], s.k}), indices = desc(DType::i64, {s.shape[0], s.k});
                         const ops::TopKAttrs attrs{.k = s.k, .largest = largest};
                         return Problem{[=, xd = x.desc()](Context& ctx) { return ops::TopK::plan(ctx, xd, values, indices, attrs); },
                                        {x},
                                        {{"values", values, exact}, {"indices", indices, exact}}};
                       }});
}

// MoE combine: the weighted sum of each token's k rows of y.
void add_moe_combine(std::vector<Case>& out) {
  struct MoeShape {
    Size size;
    std::int64_t tokens, k, hidden;
  };
  const MoeShape kShapes[] = {{Size::min, 1, 1, 1}, {Size::odd, 13, 3, 100}, {Size::typical, 512, 2, 4096}, {Size::large, 2048, 8, 2048}};
  for (DType dt : kFloatTypes)
    for (const MoeShape& s : kShapes)
      out.push_back({"moe_combine", str(dt), fmt::format("T={} k={} H={}", s.tokens, s.k, s.hidden), s.size, [=]() -> Result<Problem> {
                       const std::int64_t rows = s.tokens * s.k;
                       TESSERA_ASSIGN_OR_RETURN(Tensor y, random_tensor(dt, {rows, s.hidden}, 22));
                       TESSERA_ASSIGN_OR_RETURN(Tensor w, random_tensor(DType::f32, {s.tokens, s.k}, 23, 0.0f, 1.0f));
                       TESSERA_ASSIGN_OR_RETURN(Tensor positions, Tensor::empty(DType::i64, {s.tokens, s.k}));
                       for (std::int64_t i = 0; i < rows; ++i) positions.data_as<std::int64_t>()[i] = (i * 7919) % rows;  // a permutation
                       const TensorDesc o = desc(dt, {s.tokens, s.hidden});
                       return Problem{[=, yd = y.desc(), wd = w.desc(), pd = positions.desc()](Context& ctx) {
                                        return ops::MoeCombine::plan(ctx, yd, wd, pd, o);
                                      },
                                      {y, w, positions},
                                      {{"out", o, tolerance_for(dt, s.k)}}};
                     }});
}

void add_reorders(std::vector<Case>& out) {
  // Same dtype, and converting on the way.
  const std::pair<DType, DType> kPairs[] = {{DType::f32, DType::f32},  {DType::bf16, DType::bf16},
                                            {DType::f16, DType::f16},  {DType::f32, DType::bf16},
                                            {DType::bf16, DType::f32}, {DType::f32, DType::f16}};
  for (const auto& pair : kPairs)
    for (const Sized& s : kRowShapes) {
      const DType from = pair.first, to = pair.second;
      const std::string dtype = from == to ? str(from) : conversion(from, to);
      // A contiguous copy (converting) and a 2-D transpose.
      for (bool transpose : {false, true})
        out.push_back({transpose ? "transpose" : "reorder", dtype, s.shape.to_string(), s.size, [=]() -> Result<Problem> {
                         TESSERA_ASSIGN_OR_RETURN(Tensor x, random_tensor(from, s.shape, 20));
                         if (transpose) {
                           TESSERA_ASSIGN_OR_RETURN(x, x.transpose(0, 1));
                         }
                         const TensorDesc y = desc(to, x.shape());
                         return Problem{[=, xd = x.desc()](Context& ctx) { return ops::Reorder::plan(ctx, xd, y); },
                                        {x},
                                        {{"y", y, tolerance_for(to)}}};
                       }});
    }

  struct Permutation {
    const char* name;
    std::vector<int> order;
    std::vector<Sized> shapes;
  };
  const Permutation kPermutations[] = {
      {"permute_nchw_to_nhwc",
       {0, 2, 3, 1},
       {{Size::min, {1, 1, 1, 1}}, {Size::odd, {2, 17, 9, 13}}, {Size::typical, {1, 320, 32, 32}}, {Size::large, {1, 512, 64, 64}}}},
      {"permute_bshd_to_bhsd",
       {0, 2, 1, 3},
       {{Size::odd, {2, 33, 4, 64}}, {Size::typical, {1, 128, 32, 128}}, {Size::large, {1, 512, 32, 128}}}},
  };
  for (const Permutation& p : kPermutations)
    for (DType dt : kFloatTypes)
      for (const Sized& s : p.shapes)
        out.push_back({p.name, str(dt), s.shape.to_string(), s.size, [=, order = p.order]() -> Result<Problem> {
                         TESSERA_ASSIGN_OR_RETURN(Tensor x, random_tensor(dt, s.shape, 21));
                         TESSERA_ASSIGN_OR_RETURN(Tensor permuted, x.permute(order));
                         const TensorDesc y = desc(dt, permuted.shape());
                         return Problem{[=, xd = permuted.desc()](Context& ctx) { return ops::Reorder::plan(ctx, xd, y); },
                                        {permuted},
                                        {{"y", y, tolerance_for(dt)}}};
                       }});
}

void add_concat_split(std::vector<Case>& out) {
  struct Pieces {
    Size size;
    std::vector<Shape> shapes;
    int axis;
  };
  const Pieces kPieces[] = {
      {Size::min, {{1, 1}, {1, 1}}, 1},
      {Size::odd, {{17, 3}, {17, 64}, {17, 255}}, 1},
      {Size::odd, {{2, 5, 7}, {3, 5, 7}, {1, 5, 7}}, 0},
      {Size::typical, {{128, 1024}, {128, 3072}}, -1},
      {Size::large, {{512, 2048}, {512, 2048}}, 1},
  };
  for (bool split : {false, true})
    for (DType dt : kFloatTypes)
      for (const Pieces& p : kPieces) {
        const int dim = p.axis < 0 ? p.axis + p.shapes[0].rank() : p.axis;
        Shape whole = p.shapes[0];
        whole[dim] = 0;
        for (const Shape& piece : p.shapes) whole[dim] += piece[dim];
        std::vector<std::string> shape_names;
        for (const Shape& piece : p.shapes) shape_names.push_back(piece.to_string());
        const std::string pieces = fmt::format("{}", fmt::join(shape_names, " + "));
        out.push_back({split ? "split" : "concat", str(dt),
                       split ? fmt::format("{} -> {} axis {}", whole.to_string(), pieces, p.axis)
                             : fmt::format("{} -> {} axis {}", pieces, whole.to_string(), p.axis),
                       p.size, [=, axis = p.axis, shapes = p.shapes]() -> Result<Problem> {
                         std::vector<TensorDesc> piece_descs;
                         for (const Shape& piece : shapes) piece_descs.push_back(desc(dt, piece));
                         if (split) {
                           TESSERA_ASSIGN_OR_RETURN(Tensor x, random_tensor(dt, whole, 22));
                           std::vector<Output> outputs;
                           for (std::size_t i = 0; i < shapes.size(); ++i)
                             outputs.push_back({fmt::format("y{}", i), piece_descs[i], tolerance_for(dt)});
                           return Problem{[=, xd = x.desc()](Context& ctx) {
                                            return ops::Split::plan(ctx, xd, axis, piece_descs);
                                          },
                                          {x},
                                          std::move(outputs)};
                         }
                         std::vector<Tensor> inputs;
                         for (std::size_t i = 0; i < shapes.size(); ++i) {
                           TESSERA_ASSIGN_OR_RETURN(Tensor piece, random_tensor(dt, shapes[i], 23 + i));
                           inputs.push_back(std::move(piece));
                         }
                         const TensorDesc y = desc(dt, whole);
                         return Problem{[=](Context& ctx) { return ops::Concat::plan(ctx, piece_descs, axis, y); },
                                        std::move(inputs),
                                        {{"y", y, tolerance_for(dt)}}};
                       }});
      }
}

void add_pad_gather_embedding(std::vector<Case>& out) {
  // A one-pixel border around the spatial dims of [N, C, H, W].
  const Sized kImages[] = {{Size::min, {1, 1, 1, 1}},
                           {Size::odd, {2, 3, 9, 13}},
                           {Size::typical, {1, 128, 64, 64}},
                           {Size::large, {1, 128, 128, 128}}};
  for (ops::PadMode mode : {ops::PadMode::constant, ops::PadMode::reflect, ops::PadMode::edge})
    for (DType dt : kFloatTypes)
      for (const Sized& s : kImages) {
        if (mode == ops::PadMode::reflect && s.size == Size::min) continue;  // reflect needs pad < dim
        const ops::PadAttrs attrs{.before = {0, 0, 1, 1}, .after = {0, 0, 1, 1}, .mode = mode, .value = 0.5f};
        const Shape padded{s.shape[0], s.shape[1], s.shape[2] + 2, s.shape[3] + 2};
        const char* name = mode == ops::PadMode::constant ? "pad_constant" : mode == ops::PadMode::reflect ? "pad_reflect" : "pad_edge";
        out.push_back({name, str(dt), fmt::format("{} -> {}", s.shape.to_string(), padded.to_string()), s.size,
                       [=]() -> Result<Problem> {
                         TESSERA_ASSIGN_OR_RETURN(Tensor x, random_tensor(dt, s.shape, 24));
                         const TensorDesc y = desc(dt, padded);
                         return Problem{[=, xd = x.desc()](Context& ctx) { return ops::Pad::plan(ctx, xd, y, attrs); },
                                        {x},
                                        {{"y", y, tolerance_for(dt)}}};
                       }});
      }

  // Gather copies contiguous slabs with memcpy at every level; a reorder row
  // runs only when a slab is strided, so the table's rows have gaps (a slice
  // of a wider buffer, like a padded table).
  struct Table {
    Size size;
    std::int64_t rows, indices, d1, d2, pad;
  };
  for (DType dt : kFloatTypes)
    for (const Table& t : {Table{Size::odd, 50, 17, 8, 33, 7}, Table{Size::typical, 1000, 128, 16, 128, 8}})
      out.push_back({"gather", str(dt), fmt::format("[{}, {}, {} of {}] [{}] axis 0", t.rows, t.d1, t.d2, t.d2 + t.pad, t.indices),
                     t.size, [=]() -> Result<Problem> {
                       TESSERA_ASSIGN_OR_RETURN(Tensor wide, random_tensor(dt, {t.rows, t.d1, t.d2 + t.pad}, 25));
                       TESSERA_ASSIGN_OR_RETURN(Tensor x, wide.slice(2, 0, t.d2));
                       TESSERA_ASSIGN_OR_RETURN(Tensor indices, spread_indices(DType::i64, {t.indices}, t.rows));
                       const TensorDesc y = desc(dt, {t.indices, t.d1, t.d2});
                       return Problem{[=, xd = x.desc(), id = indices.desc()](Context& ctx) {
                                        return ops::Gather::plan(ctx, xd, id, 0, y);
                                      },
                                      {x, indices},
                                      {{"y", y, tolerance_for(dt)}}};
                     }});

  struct Lookup {
    Size size;
    std::int64_t vocab, hidden, ids;
  };
  for (DType dt : kFloatTypes)
    for (const Lookup& t : {Lookup{Size::odd, 50, 33, 17}, Lookup{Size::typical, 1000, 4096, 128}})
      out.push_back({"embedding", str(dt), fmt::format("[{}, {}] [{}]", t.vocab, t.hidden, t.ids), t.size,
                     [=]() -> Result<Problem> {
                       TESSERA_ASSIGN_OR_RETURN(Tensor table, random_tensor(dt, {t.vocab, t.hidden}, 26));
                       TESSERA_ASSIGN_OR_RETURN(Tensor ids, spread_indices(DType::i32, {t.ids}, t.vocab));
                       const TensorDesc y = desc(dt, {t.ids, t.hidden});
                       return Problem{[=, td = table.desc(), id = ids.desc()](Context& ctx) {
                                        return ops::Embedding::plan(ctx, td, id, y);
                                      },
                                      {table, ids},
                                      {{"y", y, tolerance_for(dt)}}};
                     }});
}

// --------------------------------------------------- rope, resize, quantize

void add_rope(std::vector<Case>& out) {
  // [B, S, H, D], rotary dim D.
  const Sized kShapes[] = {{Size::min, {1, 1, 1, 2}},
                           {Size::odd, {2, 17, 3, 80}},
                           {Size::typical, {1, 128, 32, 128}},
                           {Size::large, {1, 512, 32, 128}}};
  constexpr std::int64_t kMaxPos = 4096;
  for (bool interleaved : {false, true})
    for (DType dt : kFloatTypes)
      for (const Sized& s : kShapes)
        out.push_back({interleaved ? "rope_interleaved" : "rope", str(dt), s.shape.to_string(), s.size,
                       [=]() -> Result<Problem> {
                         TESSERA_ASSIGN_OR_RETURN(Tensor x, random_tensor(dt, s.shape, 27));
                         TESSERA_ASSIGN_OR_RETURN(Tensor positions, spread_indices(DType::i64, {s.shape[1]}, kMaxPos));
                         TESSERA_ASSIGN_OR_RETURN(auto caches, ops::rope_cache(kMaxPos, s.shape[3]));
                         const ops::RopeAttrs attrs{.interleaved = interleaved};
                         return Problem{[=, xd = x.desc(), pd = positions.desc(), cd = caches.first.desc()](Context& ctx) {
                                          return ops::Rope::plan(ctx, xd, pd, cd, cd, xd, attrs);
                                        },
                                        {x, positions, caches.first, caches.second},
                                        // Each output mixes two inputs, as tests/ops does: reduction 2.
                                        {{"y", x.desc(), tolerance_for(dt, 2)}}};
                       }});
}

void add_resize(std::vector<Case>& out) {
  struct Images {
    Size size;
    std::int64_t n, c, h, w, ho, wo;
  };
  const Images kImages[] = {{Size::min, 1, 1, 1, 1, 2, 2},
                            {Size::odd, 2, 17, 7, 10, 15, 21},
                            {Size::typical, 1, 320, 32, 32, 64, 64},
                            {Size::large, 1, 128, 64, 64, 128, 128}};
  // Nearest: PyTorch's default (the x2 upsample of diffusion UNets);
  // bilinear with align_corners=False; PyTorch's bicubic (align_corners=False).
  for (ops::ResizeMode mode : {ops::ResizeMode::nearest, ops::ResizeMode::bilinear, ops::ResizeMode::cubic})
    for (bool channels_last : {false, true})
      for (DType dt : kFloatTypes)
        for (const Images& im : kImages) {
          ops::ResizeAttrs attrs{.mode = mode, .channels_last = channels_last};
          if (mode == ops::ResizeMode::bilinear) attrs.coord = ops::CoordinateMode::pytorch_half_pixel;
          if (mode == ops::ResizeMode::cubic) attrs.coord = ops::CoordinateMode::half_pixel;
          const char* name = mode == ops::ResizeMode::nearest ? "nearest" : mode == ops::ResizeMode::bilinear ? "bilinear" : "cubic";
          const Shape from = channels_last ? Shape{im.n, im.h, im.w, im.c} : Shape{im.n, im.c, im.h, im.w};
          const Shape to = channels_last ? Shape{im.n, im.ho, im.wo, im.c} : Shape{im.n, im.c, im.ho, im.wo};
          out.push_back({fmt::format("resize_{}_{}", name, channels_last ? "nhwc" : "nchw"),
                         str(dt), fmt::format("{} -> {}", from.to_string(), to.to_string()), im.size,
                         [=]() -> Result<Problem> {
                           TESSERA_ASSIGN_OR_RETURN(Tensor x, random_tensor(dt, from, 28, -2.0f, 2.0f));
                           const TensorDesc y = desc(dt, to);
                           // Bilinear sums two weighted taps along each axis, cubic four.
                           const Tolerance tolerance = mode == ops::ResizeMode::nearest    ? tolerance_for(dt)
                                                       : mode == ops::ResizeMode::bilinear ? tolerance_for(dt, 4)
                                                                                           : tolerance_for(dt, 16);
                           return Problem{[=, xd = x.desc()](Context& ctx) { return ops::Resize::plan(ctx, xd, y, attrs); },
                                          {x},
                                          {{"y", y, tolerance}}};
                         }});
        }
}

// Conv2d NHWC: the implicit GEMM (f32 and bf16 rows), 1x1 direct, grouped,
// depthwise and the fused x2 upsample, with the bias + SiLU epilogue.
void add_conv(std::vector<Case>& out) {
  struct Conv {
    Size size;
    std::int64_t n, h, w, c, cout, k, groups;
    ops::ConvAttrs attrs;
    const char* what;
  };
  const Conv kConvs[] = {
      {Size::min, 1, 1, 1, 1, 1, 1, 1, {}, "1x1"},
      {Size::odd, 2, 7, 9, 17, 33, 3, 1, {.stride = {2, 2}, .padding = {1, 1}}, "3x3 s2"},
      {Size::odd, 1, 9, 7, 12, 20, 3, 4, {.padding = {2, 2}, .dilation = {2, 2}, .groups = 4}, "3x3 dil2 groups4"},
      {Size::odd, 1, 11, 13, 19, 19, 3, 19, {.padding = {1, 1}, .groups = 19}, "3x3 depthwise"},
      {Size::typical, 1, 16, 16, 64, 64, 3, 1, {.padding = {1, 1}}, "3x3"},
      {Size::typical, 1, 8, 8, 64, 64, 3, 1, {.padding = {1, 1}, .upsample_nearest2x = true}, "up2 3x3"},
      {Size::typical, 1, 33, 32, 64, 64, 3, 1, {.stride = {2, 2}, .padding = {1, 1}}, "3x3 s2"},
      {Size::typical, 1, 32, 32, 64, 128, 1, 1, {}, "1x1"},
      {Size::large, 1, 32, 32, 96, 96, 3, 96, {.padding = {1, 1}, .groups = 96}, "3x3 depthwise"},
      {Size::large, 1, 32, 32, 64, 64, 3, 1, {.padding = {1, 1}}, "3x3"},
  };
  for (const auto& [x_dt, w_dt] : {std::pair{DType::f32, DType::f32}, std::pair{DType::bf16, DType::bf16}})
    for (const Conv& cv : kConvs) {
      const Shape x_shape{cv.n, cv.h, cv.w, cv.c};
      out.push_back({"conv2d", str(x_dt), fmt::format("{} {} -> {} ch", x_shape.to_string(), cv.what, cv.cout), cv.size,
                     [=]() -> Result<Problem> {
                       TESSERA_ASSIGN_OR_RETURN(Tensor x, random_tensor(x_dt, x_shape, 29));
                       TESSERA_ASSIGN_OR_RETURN(Tensor w, random_tensor(DType::f32, {cv.cout, cv.c / cv.groups, cv.k, cv.k}, 30));
                       TESSERA_ASSIGN_OR_RETURN(Tensor bias, random_tensor(DType::f32, {cv.cout}, 31));
                       TESSERA_ASSIGN_OR_RETURN(ops::ConvWeightsPtr packed, ops::ConvWeights::pack(w, cv.groups, w_dt));
                       TESSERA_ASSIGN_OR_RETURN(Shape y_shape, ops::conv2d_output_shape(x_shape, *packed, cv.attrs));
                       const TensorDesc y = desc(x_dt, y_shape);
                       const ops::Epilogue ep{.activation = ops::Activation::silu, .bias = bias.desc()};
                       // bf16 operands: the bf16 tolerance over the patch's sum (compare.hpp).
                       const Tolerance tolerance = tolerance_for(x_dt, cv.k * cv.k * cv.c / cv.groups);
                       return Problem{[=, xd = x.desc()](Context& ctx) { return ops::Conv2d::plan(ctx, xd, packed, y, cv.attrs, ep); },
                                      {x, bias},
                                      {{"y", y, tolerance}}};
                     }});
    }
}

void add_quantize(std::vector<Case>& out) {
  struct Granularity {
    Size size;
    Shape x;
    ops::QuantAttrs attrs;
    Shape scale;
    const char* name;
  };
  const Granularity kGranularities[] = {
      {Size::min, {1}, {}, {}, "per tensor"},
      {Size::odd, {3, 293}, {.axis = 1, .group_size = 32}, {3, 10}, "groups of 32"},  // a ragged last group
      {Size::typical, {128, 4096}, {.axis = 0}, {128}, "per channel"},
      {Size::large, {1024, 2048}, {.axis = 1, .group_size = 128}, {1024, 16}, "groups of 128"},
  };
  for (bool dequantize : {false, true})
    for (bool zero_point : {false, true})
      for (DType qt : kQuantTypes)
        for (DType ft : kFloatTypes)
          for (const Granularity& g : kGranularities) {
            if (zero_point && !is_odd_or_typical(g.size)) continue;
            out.push_back(
                {fmt::format("{}{}", dequantize ? "dequantize" : "quantize", zero_point ? "_zp" : ""),
                 dequantize ? conversion(qt, ft) : conversion(ft, qt), fmt::format("{} {}", g.x.to_string(), g.name), g.size,
                 [=]() -> Result<Problem> {
                   // x / scale reaches +-300: every integer type saturates somewhere.
                   TESSERA_ASSIGN_OR_RETURN(Tensor scale, random_tensor(ft, g.scale, 29, dequantize ? -0.05f : 0.01f, 0.05f));
                   const auto [zp_lo, zp_hi] = zero_point_range(qt);
                   TESSERA_ASSIGN_OR_RETURN(Tensor zp, random_ints(qt, g.scale, 30, zp_lo, zp_hi));
                   const auto [lo, hi] = full_range(qt);
                   TESSERA_ASSIGN_OR_RETURN(Tensor x, dequantize ? random_ints(qt, g.x, 31, lo, hi) : random_tensor(ft, g.x, 31, -3.0f, 3.0f));
                   const TensorDesc y = desc(dequantize ? ft : qt, g.x);
                   const std::optional<TensorDesc> zd = zero_point ? std::optional(zp.desc()) : std::nullopt;
                   return Problem{[=, xd = x.desc(), sd = scale.desc()](Context& ctx) -> Result<PlanPtr> {
                                    if (dequantize) return ops::Dequantize::plan(ctx, xd, sd, zd, y, g.attrs);
                                    return ops::Quantize::plan(ctx, xd, sd, zd, y, g.attrs);
                                  },
                                  zero_point ? std::vector{x, scale, zp} : std::vector{x, scale},
                                  // Integers exactly (tolerance_for an integer type).
                                  {{"y", y, tolerance_for(y.dtype)}}};
                 }});
          }
}

// ------------------------------------------------------- matmul and linear

struct Gemm {
  Size size;
  std::int64_t m, k, n;
  std::string name() const { return fmt::format("m={} k={} n={}", m, k, n); }
};

// Matmuls with bf16 or f16 operands or output are held to the bf16 tolerance
// (AMX rounds operands to bf16), as tests/ops/matmul_test.cpp does.
Tolerance matmul_tolerance(DType a, DType c, std::int64_t k) {
  return tolerance_for(a != DType::f32 || c != DType::f32 ? DType::bf16 : DType::f32, k);
}

void add_matmul(std::vector<Case>& out) {
  const Gemm kShapes[] = {
      {Size::min, 1, 1, 1}, {Size::odd, 17, 255, 33}, {Size::typical, 128, 512, 1024}, {Size::large, 256, 1024, 1024}};
  for (DType dt : kFloatTypes)
    for (const Gemm& g : kShapes)
      // C in the operands' dtype, and (below large) f32 C from bf16 / f16 operands.
      for (DType ct : {dt, DType::f32}) {
        if (ct != dt && (dt == DType::f32 || g.size == Size::large)) continue;
        out.push_back({"matmul", ct == dt ? str(dt) : conversion(dt, ct), g.name(), g.size, [=]() -> Result<Problem> {
                         TESSERA_ASSIGN_OR_RETURN(Tensor a, random_tensor(dt, {g.m, g.k}, 32));
                         TESSERA_ASSIGN_OR_RETURN(Tensor b, random_tensor(dt, {g.k, g.n}, 33));
                         const TensorDesc c = desc(ct, {g.m, g.n});
                         return Problem{[=, ad = a.desc(), bd = b.desc()](Context& ctx) {
                                          return ops::Matmul::plan(ctx, ad, bd, c);
                                        },
                                        {a, b},
                                        {{"c", c, matmul_tolerance(dt, ct, g.k)}}};
                       }});
      }

  // Every epilogue term at once: c = silu(0.5 a b + bias) + residual.
  for (DType dt : {DType::f32, DType::bf16})
    for (const Gemm& g : {Gemm{Size::odd, 37, 96, 70}, Gemm{Size::typical, 128, 512, 1024}})
      out.push_back({"matmul_epilogue", str(dt), g.name(), g.size, [=]() -> Result<Problem> {
                       TESSERA_ASSIGN_OR_RETURN(Tensor a, random_tensor(dt, {g.m, g.k}, 34, -2.0f, 2.0f));
                       TESSERA_ASSIGN_OR_RETURN(Tensor b, random_tensor(dt, {g.k, g.n}, 35));
                       TESSERA_ASSIGN_OR_RETURN(Tensor bias, random_tensor(DType::f32, {g.n}, 36));
                       TESSERA_ASSIGN_OR_RETURN(Tensor residual, random_tensor(dt, {g.m, g.n}, 37));
                       const TensorDesc c = desc(dt, {g.m, g.n});
                       const ops::Epilogue epilogue{
                           .scale = 0.5f, .activation = Activation::silu, .bias = bias.desc(), .residual = residual.desc()};
                       return Problem{[=, ad = a.desc(), bd = b.desc()](Context& ctx) {
                                        return ops::Matmul::plan(ctx, ad, bd, c, epilogue);
                                      },
                                      {a, b, bias, residual},
                                      {{"c", c, matmul_tolerance(dt, dt, g.k)}}};
                     }});

  // [2, 3, M, K] x [3, K, N]: batch dims broadcast.
  for (DType dt : kFloatTypes)
    out.push_back({"matmul_batched", str(dt), "[2, 3, 17, 40] x [3, 40, 33]", Size::odd, [=]() -> Result<Problem> {
                     TESSERA_ASSIGN_OR_RETURN(Tensor a, random_tensor(dt, {2, 3, 17, 40}, 38));
                     TESSERA_ASSIGN_OR_RETURN(Tensor b, random_tensor(dt, {3, 40, 33}, 39));
                     const TensorDesc c = desc(dt, {2, 3, 17, 33});
                     return Problem{[=, ad = a.desc(), bd = b.desc()](Context& ctx) { return ops::Matmul::plan(ctx, ad, bd, c); },
                                    {a, b},
                                    {{"c", c, matmul_tolerance(dt, dt, 40)}}};
                   }});
}

// How a Linear's weights are stored, and its activations' dtype.
struct Weights {
  DType a, w;
  std::int64_t group_size = 128;  // quantized: along K when it divides K; 0 (or not dividing): one group over K
  DType scale_dtype = DType::f32;
  bool zero_points = false;
  bool w8a8 = false;  // int8 x int8, A quantized per row on the fly

  std::int64_t group_for(std::int64_t k) const { return group_size > 0 && k % group_size == 0 ? group_size : 0; }
  std::string name(std::int64_t k) const {
    if (w == DType::f32 || w == DType::bf16) return fmt::format("{}x{}", to_string(a), to_string(w));
    return fmt::format("{}x{} g{}{}{}", to_string(a), to_string(w), group_for(k), zero_points ? " zp" : "",
                       scale_dtype == DType::f32 ? "" : fmt::format(" {} scales", to_string(scale_dtype)));
  }
  Result<ops::WeightsPtr> make(const Tensor& b) const {
    if (w == DType::f32 || w == DType::bf16) return ops::pack_weights(b, w);
    return ops::quantize_weights(
        b, {.dtype = w, .group_size = group_for(b.dim(0)), .scale_dtype = scale_dtype, .zero_points = zero_points});
  }
};

// A [M, K] x packed W [K, N] -> C f32, or (with the epilogue) C bf16 =
// gelu(1.5 a w + bias) + residual.
void add_linear_case(std::vector<Case>& out, const char* op, const Weights& wt, const Gemm& g, bool epilogue) {
  out.push_back({op, wt.name(g.k), g.name(), g.size, [=]() -> Result<Problem> {
                   TESSERA_ASSIGN_OR_RETURN(Tensor a, random_tensor(wt.a, {g.m, g.k}, 40, epilogue ? -2.0f : -1.0f,
                                                                    epilogue ? 2.0f : 1.0f));
                   TESSERA_ASSIGN_OR_RETURN(Tensor b, random_tensor(DType::f32, {g.k, g.n}, 41));
                   TESSERA_ASSIGN_OR_RETURN(ops::WeightsPtr w, wt.make(b));
                   TESSERA_ASSIGN_OR_RETURN(Tensor bias, random_tensor(DType::bf16, {g.n}, 42));
                   TESSERA_ASSIGN_OR_RETURN(Tensor residual, random_tensor(DType::f32, {g.m, g.n}, 43));
                   const DType ct = epilogue ? DType::bf16 : DType::f32;
                   const TensorDesc c = desc(ct, {g.m, g.n});
                   const ops::Epilogue ep = epilogue ? ops::Epilogue{.scale = 1.5f,
                                                                     .activation = Activation::gelu_erf,
                                                                     .bias = bias.desc(),
                                                                     .residual = residual.desc()}
                                                     : ops::Epilogue{};
                   const ops::LinearOptions options{.quantize_activations = wt.w8a8};
                   // As tests/ops/linear_test.cpp: through bf16 unless all of A, W and C
                   // are f32, or W8A8 (exact int8 products) with an f32 C.
                   const bool through_bf16 =
                       ct != DType::f32 || (!wt.w8a8 && (wt.w != DType::f32 || wt.a != DType::f32));
                   return Problem{[=, ad = a.desc()](Context& ctx) { return ops::Linear::plan(ctx, ad, w, c, ep, options); },
                                  epilogue ? std::vector{a, bias, residual} : std::vector{a},
                                  {{"c", c, tolerance_for(through_bf16 ? DType::bf16 : DType::f32, g.k)}}};
                 }});
}

void add_linear(std::vector<Case>& out) {
  // Decode (M = 1: the few-row kernels) and prefill (M = 64: the tile kernels).
  const Gemm kShapes[] = {
      {Size::min, 1, 1, 1}, {Size::odd, 17, 384, 100}, {Size::typical, 1, 4096, 1024}, {Size::large, 64, 1024, 1024}};
  const Weights kWeights[] = {
      {.a = DType::f32, .w = DType::f32},
      {.a = DType::f32, .w = DType::bf16},
      {.a = DType::bf16, .w = DType::bf16},
      {.a = DType::f32, .w = DType::i8},
      {.a = DType::f32, .w = DType::i4},
      {.a = DType::f32, .w = DType::i8, .scale_dtype = DType::bf16, .zero_points = true},
      {.a = DType::f32, .w = DType::i4, .scale_dtype = DType::f16, .zero_points = true},
  };
  for (const Weights& wt : kWeights)
    for (const Gemm& g : kShapes) add_linear_case(out, "linear", wt, g, false);
  // W8A8: int8 weights with one scale per output channel.
  for (const Gemm& g : kShapes)
    add_linear_case(out, "linear_w8a8", {.a = DType::f32, .w = DType::i8, .group_size = 0, .w8a8 = true},
                    g, false);
  // Activations the caller quantized: int8 over the whole range, a scale per token.
  for (const Weights& wt : {Weights{.a = DType::i8, .w = DType::i8, .group_size = 0}, Weights{.a = DType::i8, .w = DType::i4, .zero_points = true}})
    for (const Gemm& g : kShapes)
      out.push_back({"quantized_linear", wt.name(g.k), g.name(), g.size, [=]() -> Result<Problem> {
                       TESSERA_ASSIGN_OR_RETURN(Tensor a, random_tensor(DType::i8, {g.m, g.k}, 44, -128.0f, 127.0f));
                       TESSERA_ASSIGN_OR_RETURN(Tensor scales, random_tensor(DType::f32, {g.m, 1}, 45, 0.001f, 0.01f));
                       TESSERA_ASSIGN_OR_RETURN(Tensor b, random_tensor(DType::f32, {g.k, g.n}, 46));
                       TESSERA_ASSIGN_OR_RETURN(ops::WeightsPtr w, wt.make(b));
                       const TensorDesc c = desc(DType::f32, {g.m, g.n});
                       return Problem{[=, ad = a.desc(), sd = scales.desc()](Context& ctx) { return ops::QuantizedLinear::plan(ctx, ad, sd, w, c); },
                                      {a, scales},
                                      {{"c", c, tolerance_for(DType::f32, g.k)}}};
                     }});
  for (const Weights& wt : {Weights{.a = DType::f32, .w = DType::f32}, Weights{.a = DType::f32, .w = DType::bf16},
                            Weights{.a = DType::f32, .w = DType::i8, .group_size = 64},
                            Weights{.a = DType::f32, .w = DType::i4, .group_size = 64}})
    for (const Gemm& g : {Gemm{Size::odd, 20, 128, 48}, Gemm{Size::typical, 4, 4096, 1024}})
      add_linear_case(out, "linear_epilogue", wt, g, true);
}

// --------------------------------------------------------------- attention

struct AttentionShape {
  Size size;
  std::int64_t b, sq, skv, hq, hkv, d;
  bool causal;
  std::int64_t window = 0;
  bool alibi = false;  // slopes 2^(-8 (h + 1) / Hq), as BLOOM's
  bool sinks = false;  // sink logits -2, -0.5, 1, 2.5, ... (gpt-oss's lie in a few units of 0)
  float softcap = 0.0f;
  std::string name() const {
    return fmt::format("b={} sq={} skv={} h={}/{} d={}{}{}{}{}{}", b, sq, skv, hq, hkv, d, causal ? " causal" : "",
                       window ? fmt::format(" window={}", window) : "", alibi ? " alibi" : "", sinks ? " sinks" : "",
                       softcap > 0.0f ? fmt::format(" softcap={}", softcap) : "");
  }
  ops::AttentionAttrs attrs() const {
    ops::AttentionAttrs a{.causal = causal, .window = window, .softcap = softcap};
    for (std::int64_t h = 0; alibi && h < hq; ++h) a.alibi_slopes.push_back(std::exp2(-8.0f * float(h + 1) / float(hq)));
    for (std::int64_t h = 0; sinks && h < hq; ++h) a.sinks.push_back(1.5f * float(h % 4) - 2.0f);
    return a;
  }
};

// compare.hpp: f32 attention to tolerance_for(f32, head_dim), anything in bf16 to tolerance_for(bf16).
Tolerance attention_tolerance(DType dt, std::int64_t head_dim) {
  return dt == DType::bf16 ? tolerance_for(DType::bf16) : tolerance_for(DType::f32, head_dim);
}

// Key padding [B, 1, 1, Skv]: batch element n keeps its first max(1, Skv - 5 (n + 1)) keys.
Result<Tensor> padding_mask(std::int64_t b, std::int64_t skv) {
  TESSERA_ASSIGN_OR_RETURN(Tensor mask, Tensor::zeros(DType::f32, {b, 1, 1, skv}));
  for (std::int64_t n = 0; n < b; ++n)
    for (std::int64_t j = std::max<std::int64_t>(1, skv - 5 * (n + 1)); j < skv; ++j)
      mask.data_as<float>()[n * skv + j] = -std::numeric_limits<float>::infinity();
  return mask;
}

void add_attention_case(std::vector<Case>& out, const char* op, DType dt, const AttentionShape& s, bool masked) {
  out.push_back({op, str(dt), s.name(), s.size, [=]() -> Result<Problem> {
                   TESSERA_ASSIGN_OR_RETURN(Tensor q, random_tensor(dt, {s.b, s.sq, s.hq, s.d}, 44, -2.0f, 2.0f));
                   TESSERA_ASSIGN_OR_RETURN(Tensor k, random_tensor(dt, {s.b, s.skv, s.hkv, s.d}, 45, -2.0f, 2.0f));
                   TESSERA_ASSIGN_OR_RETURN(Tensor v, random_tensor(dt, {s.b, s.skv, s.hkv, s.d}, 46));
                   TESSERA_ASSIGN_OR_RETURN(Tensor mask, padding_mask(s.b, s.skv));
                   const TensorDesc o = q.desc(), lse = desc(DType::f32, {s.b, s.hq, s.sq});
                   ops::AttentionOptions options;
                   options.lse = lse;
                   if (masked) options.mask = mask.desc();
                   const Tolerance tolerance = attention_tolerance(dt, s.d);
                   return Problem{[=, qd = q.desc(), kd = k.desc()](Context& ctx) {
                                    return ops::Attention::plan(ctx, qd, kd, kd, o, s.attrs(), options);
                                  },
                                  masked ? std::vector{q, k, v, mask} : std::vector{q, k, v},
                                  {{"o", o, tolerance}, {"lse", lse, tolerance}}};
                 }});
}

// The newest sq tokens of each sequence (lengths) attend to it in a paged KV cache.
struct PagedShape {
  Size size;
  std::vector<std::int64_t> lengths;
  std::int64_t sq, hq, hkv, d, block_size;
  std::string name() const {
    const bool same = std::ranges::all_of(lengths, [&](std::int64_t l) { return l == lengths[0]; });
    return fmt::format("b={} len={} sq={} h={}/{} d={} block={}", lengths.size(),
                       same ? fmt::format("{}", lengths[0]) : fmt::format("{}", fmt::join(lengths, ",")), sq, hq, hkv, d,
                       block_size);
  }
};

void add_paged_attention_case(std::vector<Case>& out, DType cache_dt, const PagedShape& s) {
  out.push_back({"paged_attention", fmt::format("f32 q, {} cache", to_string(cache_dt)), s.name(), s.size,
                 [=]() -> Result<Problem> {
                   std::int64_t blocks = 0;
                   for (std::int64_t l : s.lengths) blocks += (l + s.block_size - 1) / s.block_size;
                   TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<ops::KvCache> cache,
                                            ops::KvCache::create({.num_blocks = blocks, .block_size = s.block_size,
                                                                  .kv_heads = s.hkv, .head_dim = s.d, .dtype = cache_dt}));
                   const auto batch = std::int64_t(s.lengths.size());
                   TESSERA_ASSIGN_OR_RETURN(Tensor seq_ids, Tensor::empty(DType::i32, {batch}));
                   for (std::int64_t i = 0; i < batch; ++i) {
                     const std::int64_t len = s.lengths[std::size_t(i)];
                     seq_ids.data_as<std::int32_t>()[i] = cache->add_sequence();
                     TESSERA_ASSIGN_OR_RETURN(Tensor k, random_tensor(DType::f32, {len, s.hkv, s.d}, 47 + 2 * std::uint64_t(i)));
                     TESSERA_ASSIGN_OR_RETURN(Tensor v, random_tensor(DType::f32, {len, s.hkv, s.d}, 48 + 2 * std::uint64_t(i)));
                     TESSERA_RETURN_IF_ERROR(cache->append(seq_ids.data_as<std::int32_t>()[i], k, v));
                   }
                   TESSERA_ASSIGN_OR_RETURN(Tensor q, random_tensor(DType::f32, {batch, s.sq, s.hq, s.d}, 49, -2.0f, 2.0f));
                   const TensorDesc o = q.desc(), lse = desc(DType::f32, {batch, s.hq, s.sq});
                   const std::int64_t max_len = std::ranges::max(s.lengths);
                   // Both rows read the same cache: for int8, the int8 KV tolerance (compare.hpp).
                   const Tolerance tolerance = cache_dt == DType::i8 ? tolerance_for_int8_kv_cache()
                                                                      : attention_tolerance(cache_dt, s.d);
                   return Problem{[=, qd = q.desc(), id = seq_ids.desc()](Context& ctx) {
                                    return ops::PagedAttention::plan(ctx, cache, qd, id, o, max_len, {.causal = true}, lse);
                                  },
                                  {q, seq_ids},
                                  {{"o", o, tolerance}, {"lse", lse, tolerance}}};
                 }});
}

void add_attention(std::vector<Case>& out) {
  const AttentionShape kPrefill[] = {{Size::min, 1, 1, 1, 1, 1, 16, false},
                                     {Size::odd, 2, 37, 37, 8, 2, 80, true},
                                     {Size::typical, 1, 512, 512, 8, 2, 128, true},
                                     {Size::large, 1, 1024, 1024, 8, 2, 128, true}};
  // Few queries against many keys: the split-KV kernels.
  const AttentionShape kDecode[] = {{Size::min, 1, 1, 1, 1, 1, 64, false},
                                    {Size::odd, 2, 1, 1000, 8, 1, 80, true},
                                    {Size::typical, 1, 1, 4096, 32, 8, 128, true},
                                    {Size::large, 1, 4, 8192, 32, 8, 128, true}};
  const AttentionShape kMasked[] = {{Size::odd, 2, 19, 45, 4, 2, 64, false}, {Size::typical, 2, 128, 512, 8, 2, 64, false}};
  // Sliding windows: prefill, and decode splitting the window's keys.
  const AttentionShape kWindowed[] = {{Size::odd, 1, 300, 300, 8, 2, 64, true, 50}, {Size::typical, 1, 1, 4096, 32, 8, 128, true, 1024}};
  // ALiBi: causal prefill, cross-attention without causal, decode splitting its keys.
  const AttentionShape kAlibi[] = {{Size::odd, 2, 37, 37, 8, 2, 80, true, 0, true},
                                   {Size::odd, 2, 33, 77, 4, 4, 64, false, 0, true},
                                   {Size::typical, 1, 1, 4096, 32, 8, 128, true, 0, true}};
  // Sinks, as gpt-oss: causal prefill, a windowed layer, decode splitting its keys.
  const AttentionShape kSinks[] = {{Size::odd, 2, 37, 37, 8, 2, 64, true, 0, false, true},
                                   {Size::typical, 1, 300, 300, 8, 2, 64, true, 128, false, true},
                                   {Size::typical, 1, 1, 4096, 32, 8, 64, true, 0, false, true}};
  // Soft-capped logits, as Gemma 2 (heads of 256, local layers of a window),
  // at a cap of 5 that bends these logits (Gemma 2's 50 barely would).
  const AttentionShape kSoftcap[] = {{Size::odd, 2, 37, 37, 8, 4, 256, true, 0, false, false, 5.0f},
                                     {Size::typical, 1, 300, 300, 8, 4, 256, true, 128, false, false, 5.0f},
                                     {Size::typical, 1, 1, 4096, 8, 4, 256, true, 0, false, false, 5.0f}};
  for (DType dt : {DType::f32, DType::bf16}) {
    for (const AttentionShape& s : kPrefill) add_attention_case(out, "attention", dt, s, false);
    for (const AttentionShape& s : kDecode) add_attention_case(out, "attention_decode", dt, s, false);
    for (const AttentionShape& s : kMasked) add_attention_case(out, "attention_masked", dt, s, true);
    for (const AttentionShape& s : kWindowed) add_attention_case(out, "attention_window", dt, s, false);
    for (const AttentionShape& s : kAlibi) add_attention_case(out, "attention_alibi", dt, s, false);
    for (const AttentionShape& s : kSinks) add_attention_case(out, "attention_sinks", dt, s, false);
    for (const AttentionShape& s : kSoftcap) add_attention_case(out, "attention_softcap", dt, s, false);
  }

  const PagedShape kPaged[] = {
      {Size::min, {1}, 1, 1, 1, 64, 16},
      {Size::odd, {300, 17, 5}, 4, 8, 2, 80, 16},
      {Size::typical, std::vector<std::int64_t>(8, 1000), 1, 32, 8, 128, 32},
      {Size::large, std::vector<std::int64_t>(4, 4096), 1, 32, 8, 128, 32},
  };
  for (DType cache_dt : {DType::f32, DType::bf16, DType::i8})
    for (const PagedShape& s : kPaged) add_paged_attention_case(out, cache_dt, s);
}

}  // namespace

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  add_matmul(cases);
  add_linear(cases);
  add_attention(cases);
  add_elementwise(cases);
  add_norms(cases);
  add_group_norms(cases);
  add_softmax(cases);
  add_reduce(cases);
  add_top_k(cases);
  add_moe_combine(cases);
  add_reorders(cases);
  add_concat_split(cases);
  add_pad_gather_embedding(cases);
  add_rope(cases);
  add_resize(cases);
  add_conv(cases);
  add_quantize(cases);
  return cases;
}

}  // namespace tessera::app::verify
