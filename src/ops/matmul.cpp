#include "tessera/ops/matmul.hpp"

#include "kernels/matmul.hpp"
#include "ops/common.hpp"
#include "tessera/ops/elementwise.hpp"

namespace tessera::ops {

using namespace detail;

namespace {

class MatmulPlan final : public Plan {
 public:
  MatmulPlan(std::array<TensorDesc, 3> d, const kernels::KernelRow<kernels::MatmulFamily>* row,
             kernels::MatmulTiling tiling, StridedDims<3> batch, std::int64_t m, std::int64_t n, std::int64_t k)
      : Plan(row->name, traffic_bytes({d[0], d[1], d[2]}),
             saturating_mul(saturating_mul(2 * batch.numel(), m), saturating_mul(n, k))),
        descs_(d), row_(row), tiling_(tiling), batch_(batch), m_(m), n_(n), k_(k) {}

  std::string_view op() const override { return "matmul"; }

  Status run(Stream& stream, std::span<const Tensor> in, std::span<const Tensor> out, void*) const override {
    static constexpr std::string_view kIn[] = {"a", "b"}, kOut[] = {"c"};
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), in, std::span(descs_.data(), 2), kIn));
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), out, std::span(descs_.data() + 2, 1), kOut));
    TESSERA_RETURN_IF_ERROR(check_overlap(out[0], "c", in[0], "a", false));
    TESSERA_RETURN_IF_ERROR(check_overlap(out[0], "c", in[1], "b", false));
    return stream.submit(op(), [&] {
      const TensorDesc &a = descs_[0], &b = descs_[1], &c = descs_[2];
      const int ra = a.rank(), rb = b.rank(), rc = c.rank();
      const kernels::MatmulArgs args{a.dtype, b.dtype, c.dtype, k_, nullptr, a.strides[ra - 2], a.strides[ra - 1],
                                     nullptr, b.strides[rb - 2], b.strides[rb - 1], nullptr, c.strides[rc - 2],
                                     c.strides[rc - 1]};
      const std::int64_t mb = (m_ + tiling_.m_block - 1) / tiling_.m_block, nb = (n_ + tiling_.n_block - 1) / tiling_.n_block;
      const std::int64_t per_matrix = mb * nb;
      auto task = [&](std::int64_t t) {
        const auto off = batch_.offsets(t / per_matrix);
        const std::int64_t tile = t % per_matrix, m0 = (tile / nb) * tiling_.m_block, n0 = (tile % nb) * tiling_.n_block;
        kernels::MatmulArgs p = args;
        p.a = byte_ptr(in[0]) + off[0] * bytes_of(a.dtype);
        p.b = byte_ptr(in[1]) + off[1] * bytes_of(b.dtype);
        p.c = const_cast<char*>(byte_ptr(out[0])) + off[2] * bytes_of(c.dtype);
        row_->run(p, m0, std::min(m_, m0 + tiling_.m_block), n0, std::min(n_, n0 + tiling_.n_block));
      };
      stream.context().pool().run_tasks(batch_.numel() * per_matrix, task);
      return Status{};
    });
  }

 private:
  std::array<TensorDesc, 3> descs_;
  const kernels::KernelRow<kernels::MatmulFamily>* row_;
  kernels::MatmulTiling tiling_;
  StridedDims<3> batch_;
  std::int64_t m_, n_, k_;
};

TensorDesc batch_part(const TensorDesc& d) {
  TensorDesc out{d.dtype, {}, {}};
  for (int i = 0; i + 2 < d.rank(); ++i) out.shape.push_back(d.shape[i]), out.strides.push_back(d.strides[i]);
  return out;
}

}  // namespace

Result<PlanPtr> Matmul::plan(Context& ctx, const TensorDesc& a, const TensorDesc& b, const TensorDesc& c) {
  TESSERA_RETURN_IF_ERROR(a.validate("a"));
  TESSERA_RETURN_IF_ERROR(b.validate("b"));
  TESSERA_RETURN_IF_ERROR(c.validate("c"));
  TESSERA_RETURN_IF_ERROR(check_float(a, "a"));
  TESSERA_RETURN_IF_ERROR(check_rank(a, "a", 2));
  TESSERA_RETURN_IF_ERROR(check_rank(b, "b", 2));
  TESSERA_RETURN_IF_ERROR(check_rank(c, "c", 2));
  if (b.dtype != a.dtype)
    return Status::invalid_argument(fmt::format("b: dtype {} must equal a's dtype {}", to_string(b.dtype), to_string(a.dtype)));
  if (c.dtype != DType::f32 && c.dtype != a.dtype)
    return Status::invalid_argument(fmt::format("c: dtype {} must be f32 or a's dtype {}", to_string(c.dtype), to_string(a.dtype)));
  const std::int64_t m = a.shape[a.rank() - 2], k = a.shape[a.rank() - 1], n = b.shape[b.rank() - 1];
  if (b.shape[b.rank() - 2] != k)
    return Status::invalid_argument(fmt::format("b: shape {} has K = {} rows, expected a's K = {} (a is {})",
                                                b.shape.to_string(), b.shape[b.rank() - 2], k, a.shape.to_string()));
  const TensorDesc ab = batch_part(a), bb = batch_part(b), cb = batch_part(c);
  Result<Shape> batch = broadcast_shapes(ab.shape, bb.shape);
  if (!batch.ok())
    return Status::invalid_argument(fmt::format("b: batch dims {} do not broadcast with a's batch dims {}", bb.shape.to_string(), ab.shape.to_string()));
  Shape expected = *batch;
  expected.push_back(m);
  expected.push_back(n);
  TESSERA_RETURN_IF_ERROR(check_same_shape(c, "c", expected, "the broadcast batch + [M, N]"));
  TESSERA_RETURN_IF_ERROR(check_writable(c, "c"));

  const auto batch_dims = collapse<3>(*batch, {broadcast_strides(ab, *batch), broadcast_strides(bb, *batch), cb.strides});
  const kernels::MatmulProblem problem{a.dtype, b.dtype, c.dtype, m, n, k,
                                       a.strides[a.rank() - 1], b.strides[b.rank() - 1], c.strides[c.rank() - 1]};
  const auto* row = kernels::select<kernels::MatmulFamily>(problem, ctx.isa());
  return PlanPtr(std::make_shared<MatmulPlan>(std::array{a, b, c}, row, row->tiling(problem, ctx.hw()), batch_dims, m, n, k));
}

Status matmul(Stream& stream, const Tensor& a, const Tensor& b, const Tensor& c) {
  PlanKey key("matmul", stream.context().isa());
  key.add(a.desc()).add(b.desc()).add(c.desc());
  const Tensor in[] = {a, b}, out[] = {c};
  return run_cached(stream, key, [&] { return Matmul::plan(stream.context(), a.desc(), b.desc(), c.desc()); }, in, out);
}

}  // namespace tessera::ops
