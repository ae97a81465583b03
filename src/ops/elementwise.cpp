#include "tessera/ops/elementwise.hpp"

#include "kernels/binary.hpp"
#include "ops/common.hpp"

namespace tessera::ops {

using namespace detail;

std::string_view to_string(UnaryOp op) { return op == UnaryOp::silu ? "silu" : "cast"; }
std::string_view to_string(BinaryOp op) { return op == BinaryOp::add ? "add" : "mul"; }

Result<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  const int rank = std::max(a.rank(), b.rank());
  if (rank > kMaxRank) return Status::invalid_argument(fmt::format("shapes: rank must be at most {}", kMaxRank));
  Shape out = Shape::filled(rank, 1);
  for (int i = 0; i < rank; ++i) {
    const int ia = i - (rank - a.rank()), ib = i - (rank - b.rank());
    const std::int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1)
      return Status::invalid_argument(
          fmt::format("b: shape {} does not broadcast with a's shape {} (dim {}: {} vs {})", b.to_string(), a.to_string(), i, db, da));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

namespace {

class UnaryPlan final : public Plan {
 public:
  UnaryPlan(UnaryOp op, const TensorDesc& x, const TensorDesc& y, const kernels::KernelRow<kernels::UnaryFamily>* row,
            kernels::ElementwiseTiling tiling, SplitDims<2> dims)
      : Plan(row->name, traffic_bytes({x, y}), op == UnaryOp::silu ? saturating_mul(4, y.numel()) : 0),
        op_(op), descs_{x, y}, row_(row), tiling_(tiling), dims_(dims) {}

  std::string_view op() const override { return to_string(op_); }

  Status run(Stream& stream, std::span<const Tensor> in, std::span<const Tensor> out, void*) const override {
    static constexpr std::string_view kIn[] = {"x"}, kOut[] = {"y"};
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), in, std::span(descs_, 1), kIn));
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), out, std::span(descs_ + 1, 1), kOut));
    TESSERA_RETURN_IF_ERROR(check_overlap(out[0], "y", in[0], "x", descs_[0].dtype == descs_[1].dtype));
    return stream.submit(op(), [&] {
      const char* x = byte_ptr(in[0]);
      char* y = const_cast<char*>(byte_ptr(out[0]));
      const std::int64_t xs = bytes_of(descs_[0].dtype), ys = bytes_of(descs_[1].dtype);
      const auto kind = op_ == UnaryOp::silu ? kernels::UnaryKind::silu : kernels::UnaryKind::identity;
      parallel_over(stream.context().pool(), dims_.outer, dims_.inner, tiling_.grain,
                    [&](const std::array<std::int64_t, 2>& off, std::int64_t i0, std::int64_t i1) {
                      row_->run({kind, descs_[0].dtype, descs_[1].dtype, i1 - i0,
                                 x + (off[0] + i0 * dims_.inner_strides[0]) * xs, dims_.inner_strides[0],
                                 y + (off[1] + i0 * dims_.inner_strides[1]) * ys, dims_.inner_strides[1]});
                    });
      return Status{};
    });
  }

 private:
  UnaryOp op_;
  TensorDesc descs_[2];
  const kernels::KernelRow<kernels::UnaryFamily>* row_;
  kernels::ElementwiseTiling tiling_;
  SplitDims<2> dims_;
};

class BinaryPlan final : public Plan {
 public:
  BinaryPlan(BinaryOp op, const TensorDesc& a, const TensorDesc& b, const TensorDesc& y,
             const kernels::KernelRow<kernels::BinaryFamily>* row, kernels::ElementwiseTiling tiling, SplitDims<3> dims)
      : Plan(row->name, traffic_bytes({a, b, y}), y.numel()),
        op_(op), descs_{a, b, y}, row_(row), tiling_(tiling), dims_(dims) {}

  std::string_view op() const override { return to_string(op_); }

  Status run(Stream& stream, std::span<const Tensor> in, std::span<const Tensor> out, void*) const override {
    static constexpr std::string_view kIn[] = {"a", "b"}, kOut[] = {"y"};
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), in, std::span(descs_, 2), kIn));
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), out, std::span(descs_ + 2, 1), kOut));
    TESSERA_RETURN_IF_ERROR(check_overlap(out[0], "y", in[0], "a", descs_[0].dtype == descs_[2].dtype));
    TESSERA_RETURN_IF_ERROR(check_overlap(out[0], "y", in[1], "b", descs_[1].dtype == descs_[2].dtype));
    return stream.submit(op(), [&] {
      const char* a = byte_ptr(in[0]);
      const char* b = byte_ptr(in[1]);
      char* y = const_cast<char*>(byte_ptr(out[0]));
      const std::int64_t as = bytes_of(descs_[0].dtype), bs = bytes_of(descs_[1].dtype), ys = bytes_of(descs_[2].dtype);
      const auto kind = op_ == BinaryOp::add ? kernels::BinaryKind::add : kernels::BinaryKind::mul;
      const auto& st = dims_.inner_strides;
      parallel_over(stream.context().pool(), dims_.outer, dims_.inner, tiling_.grain,
                    [&](const std::array<std::int64_t, 3>& off, std::int64_t i0, std::int64_t i1) {
                      row_->run({kind, descs_[0].dtype, descs_[1].dtype, descs_[2].dtype, i1 - i0,
                                 a + (off[0] + i0 * st[0]) * as, st[0], b + (off[1] + i0 * st[1]) * bs, st[1],
                                 y + (off[2] + i0 * st[2]) * ys, st[2]});
                    });
      return Status{};
    });
  }

 private:
  BinaryOp op_;
  TensorDesc descs_[3];
  const kernels::KernelRow<kernels::BinaryFamily>* row_;
  kernels::ElementwiseTiling tiling_;
  SplitDims<3> dims_;
};

}  // namespace

Result<PlanPtr> Unary::plan(Context& ctx, UnaryOp op, const TensorDesc& x, const TensorDesc& y) {
  TESSERA_RETURN_IF_ERROR(x.validate("x"));
  TESSERA_RETURN_IF_ERROR(y.validate("y"));
  TESSERA_RETURN_IF_ERROR(check_float(x, "x"));
  TESSERA_RETURN_IF_ERROR(check_float(y, "y"));
  TESSERA_RETURN_IF_ERROR(check_same_shape(y, "y", x.shape, "x's shape"));
  TESSERA_RETURN_IF_ERROR(check_writable(y, "y"));
  const auto dims = split_last(collapse<2>(x.shape, {x.strides, y.strides}));
  const kernels::UnaryProblem problem{op == UnaryOp::silu ? kernels::UnaryKind::silu : kernels::UnaryKind::identity,
                                      x.dtype, y.dtype, dims.inner_strides[0], dims.inner_strides[1], x.numel()};
  const auto* row = kernels::select<kernels::UnaryFamily>(problem, ctx.isa());
  return PlanPtr(std::make_shared<UnaryPlan>(op, x, y, row, row->tiling(problem, ctx.hw()), dims));
}

Result<PlanPtr> Binary::plan(Context& ctx, BinaryOp op, const TensorDesc& a, const TensorDesc& b, const TensorDesc& y) {
  TESSERA_RETURN_IF_ERROR(a.validate("a"));
  TESSERA_RETURN_IF_ERROR(b.validate("b"));
  TESSERA_RETURN_IF_ERROR(y.validate("y"));
  TESSERA_RETURN_IF_ERROR(check_float(a, "a"));
  TESSERA_RETURN_IF_ERROR(check_float(b, "b"));
  TESSERA_RETURN_IF_ERROR(check_float(y, "y"));
  TESSERA_ASSIGN_OR_RETURN(Shape shape, broadcast_shapes(a.shape, b.shape));
  TESSERA_RETURN_IF_ERROR(check_same_shape(y, "y", shape, "the broadcast of a and b"));
  TESSERA_RETURN_IF_ERROR(check_writable(y, "y"));
  const auto dims = split_last(collapse<3>(shape, {broadcast_strides(a, shape), broadcast_strides(b, shape), y.strides}));
  const kernels::BinaryProblem problem{op == BinaryOp::add ? kernels::BinaryKind::add : kernels::BinaryKind::mul,
                                       a.dtype, b.dtype, y.dtype, dims.inner_strides[0], dims.inner_strides[1],
                                       dims.inner_strides[2], y.numel()};
  const auto* row = kernels::select<kernels::BinaryFamily>(problem, ctx.isa());
  return PlanPtr(std::make_shared<BinaryPlan>(op, a, b, y, row, row->tiling(problem, ctx.hw()), dims));
}

namespace {
Status run_unary(Stream& stream, UnaryOp op, const Tensor& x, const Tensor& y) {
  PlanKey key(to_string(op), stream.context().isa());
  key.add(x.desc()).add(y.desc());
  const Tensor in[] = {x}, out[] = {y};
  return run_cached(stream, key, [&] { return Unary::plan(stream.context(), op, x.desc(), y.desc()); }, in, out);
}
Status run_binary(Stream& stream, BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& y) {
  PlanKey key(to_string(op), stream.context().isa());
  key.add(a.desc()).add(b.desc()).add(y.desc());
  const Tensor in[] = {a, b}, out[] = {y};
  return run_cached(stream, key, [&] { return Binary::plan(stream.context(), op, a.desc(), b.desc(), y.desc()); }, in, out);
}
}  // namespace

Status silu(Stream& stream, const Tensor& x, const Tensor& y) { return run_unary(stream, UnaryOp::silu, x, y); }
Status cast(Stream& stream, const Tensor& x, const Tensor& y) { return run_unary(stream, UnaryOp::identity, x, y); }
Status add(Stream& stream, const Tensor& a, const Tensor& b, const Tensor& y) { return run_binary(stream, BinaryOp::add, a, b, y); }
Status mul(Stream& stream, const Tensor& a, const Tensor& b, const Tensor& y) { return run_binary(stream, BinaryOp::mul, a, b, y); }

}  // namespace tessera::ops
