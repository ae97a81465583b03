#include "tessera/ops/rope.hpp"

#include <algorithm>
#include <cmath>

#include "core/element.hpp"
#include "kernels/rope.hpp"
#include "ops/common.hpp"

namespace tessera::ops {

using namespace detail;

namespace {

class RopePlan final : public Plan {
 public:
  RopePlan(std::array<TensorDesc, 5> descs, RopeAttrs attrs, const kernels::KernelRow<kernels::RopeFamily>* row,
           kernels::RopeTiling tiling, StridedDims<3> tokens)
      : Plan(row->name, traffic_bytes({descs[0], descs[4]}), saturating_mul(3, descs[4].numel())),
        descs_(descs), attrs_(attrs), row_(row), tiling_(tiling), tokens_(tokens) {}

  std::string_view op() const override { return "rope"; }

  Status do_run(Stream& stream, std::span<const Tensor> in, std::span<const Tensor> out, void*) const override {
    static constexpr std::string_view kIn[] = {"x", "position_ids", "cos_cache", "sin_cache"}, kOut[] = {"y"};
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), in, std::span(descs_.data(), 4), kIn));
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), out, std::span(descs_.data() + 4, 1), kOut));
    TESSERA_RETURN_IF_ERROR(check_overlap(out[0], "y", in[0], "x", descs_[0].dtype == descs_[4].dtype));
    for (int i = 1; i < 4; ++i) TESSERA_RETURN_IF_ERROR(check_overlap(out[0], "y", in[i], kIn[i], false));
    return stream.submit(op(), [&]() -> Status {
      const TensorDesc &x = descs_[0], &pos = descs_[1], &cache = descs_[2], &y = descs_[4];
      const std::int64_t max_pos = cache.shape[0], half = cache.shape[1];
      const char* pos_data = byte_ptr(in[1]);
      // Positions index the caches: check them all before writing anything.
      for (std::int64_t t = 0; t < tokens_.numel(); ++t) {
        const std::int64_t p = tessera::detail::load_index(pos_data, pos.dtype, tokens_.offsets(t)[2]);
        if (p < 0 || p >= max_pos)
          return Status::out_of_range(fmt::format("position_ids: value {} at token {} is outside [0, {})", p, t, max_pos));
      }
      const float* cos = in[2].data_as<const float>();
      const float* sin = in[3].data_as<const float>();
      const kernels::RopeArgs args{x.dtype, y.dtype, attrs_.interleaved, x.shape[2], x.shape[3], 2 * half, nullptr,
                                   x.strides[2], x.strides[3], nullptr, y.strides[2], y.strides[3], nullptr, nullptr};
      stream.pool().parallel_for(tokens_.numel(), tiling_.tokens_per_task, [&](std::int64_t t0, std::int64_t t1) {
        for (std::int64_t t = t0; t < t1; ++t) {
          const auto off = tokens_.offsets(t);
          const std::int64_t p = tessera::detail::load_index(pos_data, pos.dtype, off[2]);
          kernels::RopeArgs a = args;
          a.x = byte_ptr(in[0]) + off[0] * bytes_of(x.dtype);
          a.y = const_cast<char*>(byte_ptr(out[0])) + off[1] * bytes_of(y.dtype);
          a.cos = cos + p * half;
          a.sin = sin + p * half;
          row_->run(a);
        }
      });
      return Status{};
    });
  }

 private:
  std::array<TensorDesc, 5> descs_;  // x, position_ids, cos, sin, y
  RopeAttrs attrs_;
  const kernels::KernelRow<kernels::RopeFamily>* row_;
  kernels::RopeTiling tiling_;
  StridedDims<3> tokens_;  // (B, S) walked for x, y, position_ids
};

}  // namespace

Result<PlanPtr> Rope::plan(Context& ctx, const TensorDesc& x, const TensorDesc& pos, const TensorDesc& cos_cache,
                           const TensorDesc& sin_cache, const TensorDesc& y, const RopeAttrs& attrs) {
  TESSERA_RETURN_IF_ERROR(x.validate("x"));
  TESSERA_RETURN_IF_ERROR(pos.validate("position_ids"));
  TESSERA_RETURN_IF_ERROR(cos_cache.validate("cos_cache"));
  TESSERA_RETURN_IF_ERROR(sin_cache.validate("sin_cache"));
  TESSERA_RETURN_IF_ERROR(y.validate("y"));
  TESSERA_RETURN_IF_ERROR(check_float(x, "x"));
  TESSERA_RETURN_IF_ERROR(check_float(y, "y"));
  TESSERA_RETURN_IF_ERROR(check_rank(x, "x", 4, 4));
  TESSERA_RETURN_IF_ERROR(check_same_shape(y, "y", x.shape, "x's shape"));
  TESSERA_RETURN_IF_ERROR(check_writable(y, "y"));
  TESSERA_RETURN_IF_ERROR(check_index_dtype(pos, "position_ids"));
  const std::int64_t B = x.shape[0], S = x.shape[1], D = x.shape[3];
  Strides pos_strides;
  if (pos.rank() == 2 && pos.shape[0] == B && pos.shape[1] == S) {
    pos_strides = {pos.strides[0], pos.strides[1]};
  } else if (pos.rank() == 1 && pos.shape[0] == S) {
    pos_strides = {0, pos.strides[0]};
  } else {
    return Status::invalid_argument(fmt::format("position_ids: shape {} must be [B, S] = [{}, {}] or [S] = [{}]",
                                                pos.shape.to_string(), B, S, S));
  }
  for (const auto& [cache, name] : {std::pair<const TensorDesc*, const char*>{&cos_cache, "cos_cache"}, {&sin_cache, "sin_cache"}}) {
    if (cache->dtype != DType::f32)
      return Status::invalid_argument(fmt::format("{}: dtype {} is not supported, expected f32", name, to_string(cache->dtype)));
    TESSERA_RETURN_IF_ERROR(check_rank(*cache, name, 2, 2));
    if (!cache->is_contiguous()) return Status::invalid_argument(fmt::format("{}: must be contiguous", name));
  }
  TESSERA_RETURN_IF_ERROR(check_same_shape(sin_cache, "sin_cache", cos_cache.shape, "cos_cache's shape"));
  const std::int64_t rot = 2 * cos_cache.shape[1];
  if (rot == 0 || rot > D)
    return Status::invalid_argument(fmt::format("cos_cache: rotary dim 2 * {} = {} must be in [2, D = {}]", cos_cache.shape[1], rot, D));
  if (cos_cache.shape[0] == 0) return Status::invalid_argument("cos_cache: max_pos (dim 0) is 0, expected > 0");

  const auto tokens = collapse<3>(Shape{B, S}, {Strides{x.strides[0], x.strides[1]}, Strides{y.strides[0], y.strides[1]}, pos_strides});
  const kernels::RopeProblem problem{x.dtype, y.dtype, attrs.interleaved, x.strides[3] == 1 && y.strides[3] == 1};
  const auto* row = kernels::select<kernels::RopeFamily>(problem, ctx.isa());
  return PlanPtr(std::make_shared<RopePlan>(std::array{x, pos, cos_cache, sin_cache, y}, attrs, row,
                                            row->tiling(problem, ctx.hw()), tokens));
}

Status rope(Stream& stream, const Tensor& x, const Tensor& position_ids, const Tensor& cos_cache, const Tensor& sin_cache,
            const Tensor& y, const RopeAttrs& attrs) {
  PlanKey key("rope", stream.context().isa());
  key.add(x.desc()).add(position_ids.desc()).add(cos_cache.desc()).add(sin_cache.desc()).add(y.desc());
  key.add(std::int64_t(attrs.interleaved));
  const Tensor in[] = {x, position_ids, cos_cache, sin_cache}, out[] = {y};
  return run_cached(stream, key, [&] {
    return Rope::plan(stream.context(), x.desc(), position_ids.desc(), cos_cache.desc(), sin_cache.desc(), y.desc(), attrs);
  }, in, out);
}

namespace {

Status check_scaling(const RopeScaling& s) {
  if (s.type == RopeScalingType::none) return {};
  if (!(s.factor >= 1.0) || !std::isfinite(s.factor))
    return Status::invalid_argument(fmt::format("scaling.factor: {} is not a finite number >= 1", s.factor));
  if (s.type == RopeScalingType::linear) return {};
  if (s.original_max_positions <= 0)
    return Status::invalid_argument(fmt::format("scaling.original_max_positions: {} is not > 0", s.original_max_positions));
  if (s.type == RopeScalingType::llama3 && !(s.low_freq_factor > 0.0 && s.high_freq_factor > s.low_freq_factor && std::isfinite(s.high_freq_factor)))
    return Status::invalid_argument(fmt::format("scaling.high_freq_factor: {} and low_freq_factor {} are not finite with high > low > 0",
                                                s.high_freq_factor, s.low_freq_factor));
  if (s.type == RopeScalingType::yarn) {
    if (!(s.beta_slow > 0.0 && s.beta_fast > s.beta_slow && std::isfinite(s.beta_fast)))
      return Status::invalid_argument(fmt::format("scaling.beta_fast: {} and beta_slow {} are not finite with fast > slow > 0",
                                                  s.beta_fast, s.beta_slow));
    if (!(s.attention_factor >= 0.0) || !std::isfinite(s.attention_factor))
      return Status::invalid_argument(fmt::format("scaling.attention_factor: {} is not a finite number >= 0", s.attention_factor));
  }
  return {};
}

// Pair i's frequency, as transformers' rope initializations compute it.
double inv_freq(std::int64_t i, std::int64_t rotary_dim, double theta, const RopeScaling& s) {
  const double base = std::pow(theta, -2.0 * double(i) / double(rotary_dim));
  switch (s.type) {
    case RopeScalingType::none: return base;
    case RopeScalingType::linear: return base / s.factor;
    case RopeScalingType::llama3: {
      // By wavelength against the trained context: short ones (many turns
      // over it) kept, long ones divided, a ramp in the turns between.
      const double wavelen = 2.0 * M_PI / base, context = double(s.original_max_positions);
      if (wavelen < context / s.high_freq_factor) return base;
      if (wavelen > context / s.low_freq_factor) return base / s.factor;
      const double smooth = (context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      return (1.0 - smooth) * base / s.factor + smooth * base;
    }
    case RopeScalingType::yarn: {
      // The pair whose frequency turns `turns` times over the trained context, as a fractional index.
      const auto pair_turning = [&](double turns) {
        return double(rotary_dim) * std::log(double(s.original_max_positions) / (turns * 2.0 * M_PI)) / (2.0 * std::log(theta));
      };
      const double fast = pair_turning(s.beta_fast), slow = pair_turning(s.beta_slow);
      const double low = std::max(s.truncate ? std::floor(fast) : fast, 0.0);
      double high = std::min(s.truncate ? std::ceil(slow) : slow, double(rotary_dim - 1));
      if (high == low) high += 0.001;  // no division by 0
      const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);  // 0: kept, 1: divided
      return base / s.factor * ramp + base * (1.0 - ramp);
    }
  }
  return base;
}

}  // namespace

Result<std::pair<Tensor, Tensor>> rope_cache(std::int64_t max_pos, std::int64_t rotary_dim, double theta, const RopeScaling& scaling) {
  if (max_pos <= 0) return Status::invalid_argument(fmt::format("max_pos: {} is not > 0", max_pos));
  if (rotary_dim <= 0 || rotary_dim % 2 != 0)
    return Status::invalid_argument(fmt::format("rotary_dim: {} is not a positive even number", rotary_dim));
  if (!(theta > 1.0)) return Status::invalid_argument(fmt::format("theta: {} is not > 1", theta));
  TESSERA_RETURN_IF_ERROR(check_scaling(scaling));
  const double magnitude = scaling.type != RopeScalingType::yarn ? 1.0
                           : scaling.attention_factor > 0.0      ? scaling.attention_factor
                                                                 : 0.1 * std::log(scaling.factor) + 1.0;
  const std::int64_t half = rotary_dim / 2;
  TESSERA_ASSIGN_OR_RETURN(Tensor cos, Tensor::empty(DType::f32, {max_pos, half}));
  TESSERA_ASSIGN_OR_RETURN(Tensor sin, Tensor::empty(DType::f32, {max_pos, half}));
  float* c = cos.data_as<float>();
  float* s = sin.data_as<float>();
  for (std::int64_t i = 0; i < half; ++i) {
    const double f = inv_freq(i, rotary_dim, theta, scaling);
    for (std::int64_t p = 0; p < max_pos; ++p) {
      const double angle = double(p) * f;
      c[p * half + i] = float(magnitude * std::cos(angle));
      s[p * half + i] = float(magnitude * std::sin(angle));
    }
  }
  return std::pair{std::move(cos), std::move(sin)};
}

}  // namespace tessera::ops
