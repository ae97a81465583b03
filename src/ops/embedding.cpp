#include "tessera/ops/embedding.hpp"

#include "kernels/embedding.hpp"
#include "core/element.hpp"
#include "ops/common.hpp"

namespace tessera::ops {

using namespace detail;

namespace {

class EmbeddingPlan final : public Plan {
 public:
  EmbeddingPlan(std::array<TensorDesc, 3> descs, const kernels::KernelRow<kernels::EmbeddingFamily>* row,
                kernels::EmbeddingTiling tiling, SplitDims<2> ids)
      : Plan(row->name, traffic_bytes({descs[1], descs[2], descs[2]}), 0),  // ids, rows read, rows written
        descs_(descs), row_(row), tiling_(tiling), ids_(ids) {}

  std::string_view op() const override { return "embedding"; }

  Status do_run(Stream& stream, std::span<const Tensor> in, std::span<const Tensor> out, void*) const override {
    static constexpr std::string_view kIn[] = {"table", "ids"}, kOut[] = {"out"};
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), in, std::span(descs_.data(), 2), kIn));
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), out, std::span(descs_.data() + 2, 1), kOut));
    TESSERA_RETURN_IF_ERROR(check_overlap(out[0], "out", in[0], "table", false));
    TESSERA_RETURN_IF_ERROR(check_overlap(out[0], "out", in[1], "ids", false));
    return stream.submit(op(), [&]() -> Status {
      const TensorDesc &table = descs_[0], &ids = descs_[1], &o = descs_[2];
      const std::int64_t vocab = table.shape[0];
      // Each id indexes the table: check them all before copying anything.
      for (std::int64_t i = 0; i < ids.numel(); ++i) {
        const auto off = ids_.outer.offsets(i / ids_.inner);
        const std::int64_t id =
            tessera::detail::load_index(in[1].data(), ids.dtype, off[0] + (i % ids_.inner) * ids_.inner_strides[0]);
        if (id < 0 || id >= vocab)
          return Status::out_of_range(fmt::format("ids: value {} at flat index {} is outside [0, {})", id, i, vocab));
      }
      const kernels::EmbeddingArgs args{table.dtype, ids.dtype, table.shape[1], nullptr, ids_.inner_strides[0],
                                        in[0].data(), table.strides[0], table.strides[1], nullptr,
                                        ids_.inner_strides[1], o.strides[o.rank() - 1], tiling_.stream_output};
      parallel_over(stream.pool(), ids_.outer, ids_.inner, tiling_.ids_per_task,
                    [&](const std::array<std::int64_t, 2>& off, std::int64_t i0, std::int64_t i1) {
                      kernels::EmbeddingArgs a = args;
                      a.ids = byte_ptr(in[1]) + off[0] * bytes_of(ids.dtype);
                      a.out = const_cast<char*>(byte_ptr(out[0])) + off[1] * bytes_of(o.dtype);
                      row_->run(a, i0, i1);
                    });
      return Status{};
    });
  }

 private:
  std::array<TensorDesc, 3> descs_;  // table, ids, out
  const kernels::KernelRow<kernels::EmbeddingFamily>* row_;
  kernels::EmbeddingTiling tiling_;
  SplitDims<2> ids_;  // the ids' dims walked for ids (operand 0) and out's rows (operand 1)
};

}  // namespace

Result<PlanPtr> Embedding::plan(Context& ctx, const TensorDesc& table, const TensorDesc& ids, const TensorDesc& out) {
  TESSERA_RETURN_IF_ERROR(table.validate("table"));
  TESSERA_RETURN_IF_ERROR(ids.validate("ids"));
  TESSERA_RETURN_IF_ERROR(out.validate("out"));
  TESSERA_RETURN_IF_ERROR(check_float(table, "table"));
  TESSERA_RETURN_IF_ERROR(check_rank(table, "table", 2, 2));
  TESSERA_RETURN_IF_ERROR(check_index_dtype(ids, "ids"));
  if (ids.rank() >= kMaxRank) return Status::invalid_argument(fmt::format("ids: rank must be below {}", kMaxRank));
  if (out.dtype != table.dtype)
    return Status::invalid_argument(fmt::format("out: dtype {} must equal table's dtype {}", to_string(out.dtype), to_string(table.dtype)));
  Shape expected = ids.shape;
  expected.push_back(table.shape[1]);
  TESSERA_RETURN_IF_ERROR(check_same_shape(out, "out", expected, "ids' shape + [H]"));
  TESSERA_RETURN_IF_ERROR(check_writable(out, "out"));
  Strides out_rows;
  for (int i = 0; i < ids.rank(); ++i) out_rows.push_back(out.strides[i]);
  const auto dims = split_last(collapse<2>(ids.shape, {ids.strides, out_rows}));
  const kernels::EmbeddingProblem problem{table.dtype, out.dtype, ids.dtype, out.numel(),
                                          table.strides[1] == 1 && out.strides[out.rank() - 1] == 1};
  const auto* row = kernels::select<kernels::EmbeddingFamily>(problem, ctx.isa());
  return PlanPtr(std::make_shared<EmbeddingPlan>(std::array{table, ids, out}, row, row->tiling(problem, ctx.hw()), dims));
}

Status embedding(Stream& stream, const Tensor& table, const Tensor& ids, const Tensor& out) {
  PlanKey key("embedding", stream.context().isa());
  key.add(table.desc()).add(ids.desc()).add(out.desc());
  const Tensor in[] = {table, ids}, outs[] = {out};
  return run_cached(stream, key, [&] { return Embedding::plan(stream.context(), table.desc(), ids.desc(), out.desc()); },
                    in, outs);
}

}  // namespace tessera::ops
