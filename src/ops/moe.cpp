#include "tessera/ops/moe.hpp"

#include <limits>
#include <tuple>
#include <vector>

#include "core/element.hpp"
#include "kernels/moe.hpp"
#include "ops/common.hpp"

namespace tessera::ops {

using namespace detail;
using tessera::detail::load_index;
using tessera::detail::store_int;

namespace {

// A counting sort of the (token, slot) pairs by expert, on the stream: T k
// steps, far below the experts' GEMMs; one pass checks the ids, one counts,
// one places.
class MoePermutePlan final : public Plan {
 public:
  MoePermutePlan(std::array<TensorDesc, 4> descs, std::int64_t experts)
      : Plan("moe_permute_counting_sort", traffic_bytes({descs[0], descs[1], descs[2], descs[3]}), 0), descs_(descs), experts_(experts) {}

  std::string_view op() const override { return "moe_permute"; }

  Status do_run(Stream& stream, std::span<const Tensor> in, std::span<const Tensor> out, void*) const override {
    static constexpr std::string_view kOut[] = {"rows", "offsets", "positions"};
    TESSERA_RETURN_IF_ERROR(check_one_to_outputs(op(), in, "experts", out, descs_.data(), kOut));
    return stream.submit(op(), [&]() -> Status {
      const TensorDesc &ids = descs_[0], &rows = descs_[1], &offsets = descs_[2], &positions = descs_[3];
      const std::int64_t tokens = ids.shape[0], k = ids.shape[1];
      const auto id_at = [&](std::int64_t t, std::int64_t j) {
        return load_index(in[0].data(), ids.dtype, t * ids.strides[0] + j * ids.strides[1]);
      };
      std::vector<std::int64_t> next(std::size_t(experts_ + 1), 0);
      for (std::int64_t t = 0; t < tokens; ++t)
        for (std::int64_t j = 0; j < k; ++j) {
          const std::int64_t e = id_at(t, j);
          if (e < 0 || e >= experts_)
            return Status::out_of_range(fmt::format("experts: value {} at [{}, {}] is outside [0, {})", e, t, j, experts_));
          ++next[std::size_t(e) + 1];
        }
      for (std::int64_t e = 0; e < experts_; ++e) next[std::size_t(e) + 1] += next[std::size_t(e)];
      for (std::int64_t e = 0; e <= experts_; ++e) store_int(out[1].data(), offsets.dtype, e * offsets.strides[0], next[std::size_t(e)]);
      for (std::int64_t t = 0; t < tokens; ++t)
        for (std::int64_t j = 0; j < k; ++j) {
          const std::int64_t p = next[std::size_t(id_at(t, j))]++;
          store_int(out[0].data(), rows.dtype, p * rows.strides[0], t);
          store_int(out[2].data(), positions.dtype, t * positions.strides[0] + j * positions.strides[1], p);
        }
      return Status{};
    });
  }

 private:
  std::array<TensorDesc, 4> descs_;  // experts, rows, offsets, positions
  std::int64_t experts_;
};

class MoeCombinePlan final : public Plan {
 public:
  MoeCombinePlan(std::array<TensorDesc, 4> descs, const kernels::KernelRow<kernels::MoeCombineFamily>* row,
                 kernels::ElementwiseTiling tiling)
      : Plan(row->name, traffic_bytes({descs[1], descs[2], descs[3]}) + descs[1].numel() * descs[0].shape[1] * bytes_of(descs[0].dtype),
             2 * descs[1].numel() * descs[0].shape[1]),  // k rows of y read per token
        descs_(descs), row_(row), tiling_(tiling) {}

  std::string_view op() const override { return "moe_combine"; }

  Status do_run(Stream& stream, std::span<const Tensor> in, std::span<const Tensor> out, void*) const override {
    static constexpr std::string_view kIn[] = {"y", "weights", "positions"}, kOut[] = {"out"};
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), in, std::span(descs_.data(), 3), kIn));
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), out, std::span(descs_.data() + 3, 1), kOut));
    for (std::size_t i = 0; i < 3; ++i) TESSERA_RETURN_IF_ERROR(check_overlap(out[0], "out", in[i], kIn[i], false));
    return stream.submit(op(), [&]() -> Status {
      const TensorDesc &y = descs_[0], &w = descs_[1], &p = descs_[2], &o = descs_[3];
      const std::int64_t tokens = w.shape[0], k = w.shape[1], rows = y.shape[0];
      // Each position indexes y: check them all before reading any row.
      for (std::int64_t t = 0; t < tokens; ++t)
        for (std::int64_t j = 0; j < k; ++j) {
          const std::int64_t r = load_index(in[2].data(), p.dtype, t * p.strides[0] + j * p.strides[1]);
          if (r < 0 || r >= rows)
            return Status::out_of_range(fmt::format("positions: value {} at [{}, {}] is outside [0, {}) (y's rows)", r, t, j, rows));
        }
      const kernels::MoeCombineArgs args{k, y.shape[1], y.dtype, in[0].data(), y.strides[0], y.strides[1],
                                         w.dtype, in[1].data(), w.strides[0], w.strides[1],
                                         p.dtype, in[2].data(), p.strides[0], p.strides[1],
                                         o.dtype, out[0].data(), o.strides[0], o.strides[1]};
      stream.pool().parallel_for(tokens, tiling_.grain, [&](std::int64_t t0, std::int64_t t1) { row_->run(args, t0, t1); });
      return Status{};
    });
  }

 private:
  std::array<TensorDesc, 4> descs_;  // y, weights, positions, out
  const kernels::KernelRow<kernels::MoeCombineFamily>* row_;
  kernels::ElementwiseTiling tiling_;
};

}  // namespace

Result<PlanPtr> MoePermute::plan(Context& /*ctx*/, const TensorDesc& experts, std::int64_t num_experts, const TensorDesc& rows,
                                 const TensorDesc& offsets, const TensorDesc& positions) {
  TESSERA_RETURN_IF_ERROR(experts.validate("experts"));
  TESSERA_RETURN_IF_ERROR(rows.validate("rows"));
  TESSERA_RETURN_IF_ERROR(offsets.validate("offsets"));
  TESSERA_RETURN_IF_ERROR(positions.validate("positions"));
  TESSERA_RETURN_IF_ERROR(check_index_dtype(experts, "experts"));
  TESSERA_RETURN_IF_ERROR(check_rank(experts, "experts", 2, 2));
  if (num_experts <= 0) return Status::invalid_argument(fmt::format("num_experts: {} is not positive", num_experts));
  const std::int64_t pairs = experts.numel();
  for (const auto& [d, name, shape, what] :
       {std::tuple{&rows, "rows", Shape{pairs}, "[T k]"}, std::tuple{&offsets, "offsets", Shape{num_experts + 1}, "[num_experts + 1]"},
        std::tuple{&positions, "positions", experts.shape, "experts' shape"}}) {
    TESSERA_RETURN_IF_ERROR(check_index_dtype(*d, name));
    TESSERA_RETURN_IF_ERROR(check_same_shape(*d, name, shape, what));
    TESSERA_RETURN_IF_ERROR(check_writable(*d, name));
    if (d->dtype == DType::i32 && pairs > std::numeric_limits<std::int32_t>::max())
      return Status::invalid_argument(fmt::format("{}: i32 cannot hold the indices of {} pairs (take i64)", name, pairs));
  }
  return PlanPtr(std::make_shared<MoePermutePlan>(std::array{experts, rows, offsets, positions}, num_experts));
}

Status moe_permute(Stream& stream, const Tensor& experts, std::int64_t num_experts, const Tensor& rows, const Tensor& offsets,
                   const Tensor& positions) {
  PlanKey key("moe_permute", stream.context().isa());
  key.add(experts.desc()).add(num_experts).add(rows.desc()).add(offsets.desc()).add(positions.desc());
  const Tensor in[] = {experts}, out[] = {rows, offsets, positions};
  return run_cached(stream, key, [&] {
    return MoePermute::plan(stream.context(), experts.desc(), num_experts, rows.desc(), offsets.desc(), positions.desc());
  }, in, out);
}

Result<PlanPtr> MoeCombine::plan(Context& ctx, const TensorDesc& y, const TensorDesc& weights, const TensorDesc& positions,
                                 const TensorDesc& out) {
  TESSERA_RETURN_IF_ERROR(y.validate("y"));
  TESSERA_RETURN_IF_ERROR(weights.validate("weights"));
  TESSERA_RETURN_IF_ERROR(positions.validate("positions"));
  TESSERA_RETURN_IF_ERROR(out.validate("out"));
  TESSERA_RETURN_IF_ERROR(check_float(y, "y"));
  TESSERA_RETURN_IF_ERROR(check_float(weights, "weights"));
  TESSERA_RETURN_IF_ERROR(check_float(out, "out"));
  TESSERA_RETURN_IF_ERROR(check_index_dtype(positions, "positions"));
  TESSERA_RETURN_IF_ERROR(check_rank(y, "y", 2, 2));
  TESSERA_RETURN_IF_ERROR(check_rank(weights, "weights", 2, 2));
  TESSERA_RETURN_IF_ERROR(check_same_shape(positions, "positions", weights.shape, "weights' shape [T, k]"));
  TESSERA_RETURN_IF_ERROR(check_same_shape(out, "out", Shape{weights.shape[0], y.shape[1]}, "[T, H] (weights' T, y's H)"));
  TESSERA_RETURN_IF_ERROR(check_writable(out, "out"));
  const bool unit = (y.shape[1] <= 1 || y.strides[1] == 1) && (out.shape[1] <= 1 || out.strides[1] == 1);
  const kernels::MoeCombineProblem problem{y.dtype, out.dtype, weights.shape[0], weights.shape[1], y.shape[1], unit};
  const auto* row = kernels::select<kernels::MoeCombineFamily>(problem, ctx.isa());
  return PlanPtr(std::make_shared<MoeCombinePlan>(std::array{y, weights, positions, out}, row, row->tiling(problem, ctx.hw())));
}

Status moe_combine(Stream& stream, const Tensor& y, const Tensor& weights, const Tensor& positions, const Tensor& out) {
  PlanKey key("moe_combine", stream.context().isa());
  key.add(y.desc()).add(weights.desc()).add(positions.desc()).add(out.desc());
  const Tensor in[] = {y, weights, positions}, outs[] = {out};
  return run_cached(stream, key, [&] { return MoeCombine::plan(stream.context(), y.desc(), weights.desc(), positions.desc(), out.desc()); },
                    in, outs);
}

}  // namespace tessera::ops
