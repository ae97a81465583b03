#include "tessera/ops/elementwise.hpp"

#include <functional>

#include "kernels/binary.hpp"
#include "kernels/gated.hpp"
#include "ops/common.hpp"

namespace tessera::ops {

using namespace detail;

std::string_view to_string(Activation a) {
  switch (a) {
    case Activation::none: return "none";
    case Activation::relu: return "relu";
    case Activation::gelu_erf: return "gelu_erf";
    case Activation::gelu_tanh: return "gelu_tanh";
    case Activation::silu: return "silu";
    case Activation::sigmoid: return "sigmoid";
    case Activation::tanh: return "tanh";
    case Activation::exp: return "exp";
    case Activation::quick_gelu: return "quick_gelu";
  }
  return "?";
}

std::string_view to_string(BinaryOp op) {
  switch (op) {
    case BinaryOp::add: return "add";
    case BinaryOp::sub: return "sub";
    case BinaryOp::mul: return "mul";
    case BinaryOp::div: return "div";
    case BinaryOp::max: return "max";
    case BinaryOp::min: return "min";
  }
  return "?";
}

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

// Rough f32 operations per element of each activation, for the traffic model.
std::int64_t activation_flops(Activation a) {
  switch (a) {
    case Activation::none: return 0;
    case Activation::relu: return 1;
    case Activation::exp: return 10;
    default: return 20;
  }
}

kernels::Act to_kernel(Activation a) { return kernels::Act(a); }

Status check_activation(Activation act) {
  if (act > kLastActivation) return Status::invalid_argument(fmt::format("act: unknown activation {}", int(act)));
  return Status{};
}

// Operands (inputs, then y) walked in y's order (stride_order), collapsed
// and split into (outer dims, inner run).
template <int N>
SplitDims<N> elementwise_dims(const std::array<TensorDesc, N>& d) {
  std::array<Strides, N> s;
  for (int k = 0; k < N; ++k) s[k] = broadcast_strides(d[k], d[N - 1].shape);
  return split_last(collapse_in_order<N>(d[N - 1].shape, s, stride_order(d[N - 1])));
}

// x's shape, dense, its dims ordered as y's (x aligned to y's trailing dims).
TensorDesc dense_in_order_of(const TensorDesc& x, const TensorDesc& y) {
  const std::array<int, kMaxRank> y_order = stride_order(y);
  const int lead = y.rank() - x.rank();
  Strides strides = Strides::filled(x.rank(), 0);
  std::int64_t step = 1;
  for (int r = y.rank() - 1; r >= 0; --r) {
    const int i = y_order[std::size_t(r)] - lead;
    if (i < 0) continue;
    strides[i] = step;
    step *= x.shape[i];
  }
  return {x.dtype, x.shape, strides};
}

// The elementwise ops' layout rule (plan_through_copies): an input read
// along y's inner run (y's innermost dim in y's order) with a stride other
// than 0 or 1 is copied dense in y's dim order, so that the inner runs are
// unit or broadcast in every operand. y is written as it is, and without a
// unit-stride run in y nothing is copied (the scalar row walks it).
CopyLayout across(const TensorDesc& y) {
  return [y](const TensorDesc& d, bool output) -> std::optional<TensorDesc> {
    if (output) return std::nullopt;
    const std::array<int, kMaxRank> order = stride_order(y);
    for (int r = y.rank() - 1; r >= 0; --r) {
      const int dim = order[std::size_t(r)];
      if (y.shape[dim] == 1) continue;
      if (y.strides[dim] != 1) return std::nullopt;
      const std::int64_t stride = broadcast_strides(d, y.shape)[dim];
      return stride == 0 || stride == 1 ? std::nullopt : std::optional(dense_in_order_of(d, y));
    }
    return std::nullopt;
  };
}

// An elementwise plan over N operands (inputs, then y) whose dims collapse to
// (outer dims, inner run): pieces of inner runs are split over the pool, and
// `launch` calls the family's kernel row on one piece.
template <int N>
class ElementwisePlan final : public Plan {
 public:
  using Launch = std::function<void(const std::array<char*, N>& ptrs, const std::array<std::int64_t, N>& strides,
                                    std::int64_t n)>;

  ElementwisePlan(std::string_view op, std::string_view kernel, const std::array<TensorDesc, N>& descs,
                  const std::array<std::string_view, N>& names, std::int64_t flops, kernels::ElementwiseTiling tiling,
                  Launch launch)
      : Plan(kernel, traffic_of(descs), flops), op_(op), descs_(descs), names_(names), tiling_(tiling),
        dims_(elementwise_dims<N>(descs)), launch_(std::move(launch)) {}

  std::string_view op() const override { return op_; }

  Status do_run(Stream& stream, std::span<const Tensor> in, std::span<const Tensor> out, void*) const override {
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), in, std::span(descs_.data(), N - 1), std::span(names_.data(), N - 1)));
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), out, std::span(descs_.data() + N - 1, 1), std::span(names_.data() + N - 1, 1)));
    for (int k = 0; k + 1 < N; ++k)
      TESSERA_RETURN_IF_ERROR(check_overlap(out[0], names_[N - 1], in[k], names_[k], descs_[k].dtype == descs_[N - 1].dtype));
    return stream.submit(op(), [&] {
      std::array<const char*, N> base;
      for (int k = 0; k + 1 < N; ++k) base[k] = byte_ptr(in[k]);
      base[N - 1] = byte_ptr(out[0]);
      parallel_over(stream.pool(), dims_.outer, dims_.inner, tiling_.grain,
                    [&](const std::array<std::int64_t, N>& off, std::int64_t i0, std::int64_t i1) {
                      std::array<char*, N> ptrs;
                      for (int k = 0; k < N; ++k)
                        ptrs[k] = const_cast<char*>(base[k]) + (off[k] + i0 * dims_.inner_strides[k]) * bytes_of(descs_[k].dtype);
                      launch_(ptrs, dims_.inner_strides, i1 - i0);
                    });
      return Status{};
    });
  }

 private:
  static std::int64_t traffic_of(const std::array<TensorDesc, N>& d) {
    std::int64_t bytes = 0;
    for (const TensorDesc& t : d) bytes = saturating_add(bytes, traffic_bytes({t}));
    return bytes;
  }

  std::string_view op_;
  std::array<TensorDesc, N> descs_;
  std::array<std::string_view, N> names_;
  kernels::ElementwiseTiling tiling_;
  SplitDims<N> dims_;
  Launch launch_;
};

// The checks every elementwise input and output shares.
Status check_operand(const TensorDesc& d, std::string_view name) {
  TESSERA_RETURN_IF_ERROR(d.validate(name));
  return check_float(d, name);
}
Status check_output(const TensorDesc& y, const Shape& shape, std::string_view expected_what) {
  TESSERA_RETURN_IF_ERROR(check_operand(y, "y"));
  TESSERA_RETURN_IF_ERROR(check_same_shape(y, "y", shape, expected_what));
  return check_writable(y, "y");
}

// A cast's operand: any dtype with addressable elements (not i4, two to a byte).
Status check_cast_operand(const TensorDesc& d, std::string_view name) {
  TESSERA_RETURN_IF_ERROR(d.validate(name));
  if (d.dtype == DType::i4)
    return Status::invalid_argument(
        fmt::format("{}: dtype i4 is not supported by cast (two to a byte), expected f32, f16, bf16, i8, u8, i32 or i64", name));
  return {};
}

Result<PlanPtr> plan_unary(Context& ctx, Activation act, const TensorDesc& x, const TensorDesc& y) {
  TESSERA_RETURN_IF_ERROR(check_activation(act));
  const auto check = act == Activation::none ? check_cast_operand : check_operand;
  TESSERA_RETURN_IF_ERROR(check(x, "x"));
  TESSERA_RETURN_IF_ERROR(check(y, "y"));
  TESSERA_RETURN_IF_ERROR(check_same_shape(y, "y", x.shape, "x's shape"));
  TESSERA_RETURN_IF_ERROR(check_writable(y, "y"));
  const auto dims = elementwise_dims<2>({x, y});
  const kernels::UnaryProblem problem{to_kernel(act), x.dtype, y.dtype, dims.inner_strides[0], dims.inner_strides[1], x.numel()};
  const auto* row = kernels::select<kernels::UnaryFamily>(problem, ctx.isa());
  const auto tiling = row->tiling(problem, ctx.hw());
  auto launch = [row, act, xt = x.dtype, yt = y.dtype, nt = tiling.stream_output](
                    const std::array<char*, 2>& p, const std::array<std::int64_t, 2>& s, std::int64_t n) {
    row->run({to_kernel(act), xt, yt, n, p[0], s[0], p[1], s[1], nt});
  };
  return PlanPtr(std::make_shared<ElementwisePlan<2>>(
      act == Activation::none ? std::string_view("cast") : to_string(act), row->name, std::array{x, y},
      std::array<std::string_view, 2>{"x", "y"}, saturating_mul(activation_flops(act), y.numel()), tiling, launch));
}

Result<PlanPtr> plan_binary(Context& ctx, BinaryOp op, const TensorDesc& a, const TensorDesc& b, const TensorDesc& y) {
  if (op > BinaryOp::min) return Status::invalid_argument(fmt::format("op: unknown binary op {}", int(op)));
  TESSERA_RETURN_IF_ERROR(check_operand(a, "a"));
  TESSERA_RETURN_IF_ERROR(check_operand(b, "b"));
  TESSERA_ASSIGN_OR_RETURN(Shape shape, broadcast_shapes(a.shape, b.shape));
  TESSERA_RETURN_IF_ERROR(check_output(y, shape, "the broadcast of a and b"));
  const auto dims = elementwise_dims<3>({a, b, y});
  const auto kind = kernels::BinaryKind(op);
  const kernels::BinaryProblem problem{kind, a.dtype, b.dtype, y.dtype, dims.inner_strides[0], dims.inner_strides[1],
                                       dims.inner_strides[2], y.numel()};
  const auto* row = kernels::select<kernels::BinaryFamily>(problem, ctx.isa());
  const auto tiling = row->tiling(problem, ctx.hw());
  auto launch = [row, kind, at = a.dtype, bt = b.dtype, yt = y.dtype, nt = tiling.stream_output](
                    const std::array<char*, 3>& p, const std::array<std::int64_t, 3>& s, std::int64_t n) {
    row->run({kind, at, bt, yt, n, p[0], s[0], p[1], s[1], p[2], s[2], nt});
  };
  return PlanPtr(std::make_shared<ElementwisePlan<3>>(to_string(op), row->name, std::array{a, b, y},
                                                      std::array<std::string_view, 3>{"a", "b", "y"}, y.numel(), tiling,
                                                      launch));
}

Result<PlanPtr> plan_gated(Context& ctx, Activation act, const TensorDesc& a, const TensorDesc& b,
                           const std::optional<TensorDesc>& c, const TensorDesc& y) {
  TESSERA_RETURN_IF_ERROR(check_activation(act));
  TESSERA_RETURN_IF_ERROR(check_operand(a, "a"));
  TESSERA_RETURN_IF_ERROR(check_operand(b, "b"));
  TESSERA_ASSIGN_OR_RETURN(Shape shape, broadcast_shapes(a.shape, b.shape));
  if (c) {
    TESSERA_RETURN_IF_ERROR(check_operand(*c, "c"));
    auto with_c = broadcast_shapes(shape, c->shape);
    if (!with_c.ok())
      return Status::invalid_argument(fmt::format("c: shape {} does not broadcast with a and b's {}", c->shape.to_string(), shape.to_string()));
    shape = *with_c;
  }
  TESSERA_RETURN_IF_ERROR(check_output(y, shape, c ? "the broadcast of a, b and c" : "the broadcast of a and b"));
  // Without c the kernel sees c as an absent operand with stride 0.
  const TensorDesc cd = c ? *c : TensorDesc::contiguous(DType::f32, {});
  const auto dims = elementwise_dims<4>({a, b, cd, y});
  const auto k = to_kernel(act);
  // An operand whose outer strides are all 0 is one row read for every outer index: cached, not streamed.
  const auto streamed = [&](int k, DType t) {
    for (int d = 0; d < dims.outer.rank; ++d)
      if (dims.outer.strides[std::size_t(k)][std::size_t(d)] != 0 && dims.outer.shape[std::size_t(d)] > 1) return std::int64_t(bytes_of(t));
    return dims.outer.numel() > 1 ? std::int64_t(0) : std::int64_t(bytes_of(t));
  };
  const kernels::GatedProblem problem{k, a.dtype, b.dtype, cd.dtype, y.dtype, dims.inner_strides[0], dims.inner_strides[1],
                                      dims.inner_strides[2], dims.inner_strides[3], y.numel(),
                                      streamed(0, a.dtype) + streamed(1, b.dtype) + (c ? streamed(2, cd.dtype) : 0) + bytes_of(y.dtype)};
  const auto* row = kernels::select<kernels::GatedFamily>(problem, ctx.isa());
  const auto tiling = row->tiling(problem, ctx.hw());
  const std::int64_t flops = saturating_mul(activation_flops(act) + (c ? 2 : 1), y.numel());
  if (c) {
    auto launch = [row, k, at = a.dtype, bt = b.dtype, ct = c->dtype, yt = y.dtype, nt = tiling.stream_output](
                      const std::array<char*, 4>& p, const std::array<std::int64_t, 4>& s, std::int64_t n) {
      row->run({k, at, bt, ct, yt, n, p[0], s[0], p[1], s[1], p[2], s[2], p[3], s[3], nt});
    };
    return PlanPtr(std::make_shared<ElementwisePlan<4>>("gated", row->name, std::array{a, b, *c, y},
                                                        std::array<std::string_view, 4>{"a", "b", "c", "y"}, flops, tiling,
                                                        launch));
  }
  auto launch = [row, k, at = a.dtype, bt = b.dtype, yt = y.dtype, nt = tiling.stream_output](
                    const std::array<char*, 3>& p, const std::array<std::int64_t, 3>& s, std::int64_t n) {
    row->run({k, at, bt, DType::f32, yt, n, p[0], s[0], p[1], s[1], nullptr, 0, p[2], s[2], nt});
  };
  return PlanPtr(std::make_shared<ElementwisePlan<3>>("gated", row->name, std::array{a, b, y},
                                                      std::array<std::string_view, 3>{"a", "b", "y"}, flops, tiling, launch));
}

}  // namespace

Result<PlanPtr> Unary::plan(Context& ctx, Activation act, const TensorDesc& x, const TensorDesc& y) {
  // Casts with an integer side run on the reference row, which walks any
  // strides: no copies for them.
  if (!is_floating(x.dtype) || !is_floating(y.dtype)) return plan_unary(ctx, act, x, y);
  return plan_through_copies(ctx, {x}, {y}, {"x"}, {"y"}, across(y),
                             [&](std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
                               return plan_unary(ctx, act, in[0], out[0]);
                             });
}

Result<PlanPtr> Binary::plan(Context& ctx, BinaryOp op, const TensorDesc& a, const TensorDesc& b, const TensorDesc& y) {
  return plan_through_copies(ctx, {a, b}, {y}, {"a", "b"}, {"y"}, across(y),
                             [&](std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
                               return plan_binary(ctx, op, in[0], in[1], out[0]);
                             });
}

Result<PlanPtr> Gated::plan(Context& ctx, Activation act, const TensorDesc& a, const TensorDesc& b,
                            const std::optional<TensorDesc>& c, const TensorDesc& y) {
  std::vector<TensorDesc> in{a, b};
  std::vector<std::string_view> names{"a", "b"};
  if (c) in.push_back(*c), names.push_back("c");
  return plan_through_copies(ctx, std::move(in), {y}, std::move(names), {"y"}, across(y),
                             [&](std::span<const TensorDesc> i, std::span<const TensorDesc> o) {
                               return plan_gated(ctx, act, i[0], i[1], c ? std::optional(i[2]) : std::nullopt, o[0]);
                             });
}

namespace {
Status run_unary(Stream& stream, Activation act, const Tensor& x, const Tensor& y) {
  PlanKey key("unary", stream.context().isa());
  key.add(std::int64_t(act)).add(x.desc()).add(y.desc());
  const Tensor in[] = {x}, out[] = {y};
  return run_cached(stream, key, [&] { return Unary::plan(stream.context(), act, x.desc(), y.desc()); }, in, out);
}
}  // namespace

Status activation(Stream& stream, Activation act, const Tensor& x, const Tensor& y) { return run_unary(stream, act, x, y); }
Status relu(Stream& stream, const Tensor& x, const Tensor& y) { return run_unary(stream, Activation::relu, x, y); }
Status gelu(Stream& stream, const Tensor& x, const Tensor& y) { return run_unary(stream, Activation::gelu_erf, x, y); }
Status gelu_tanh(Stream& stream, const Tensor& x, const Tensor& y) { return run_unary(stream, Activation::gelu_tanh, x, y); }
Status silu(Stream& stream, const Tensor& x, const Tensor& y) { return run_unary(stream, Activation::silu, x, y); }
Status sigmoid(Stream& stream, const Tensor& x, const Tensor& y) { return run_unary(stream, Activation::sigmoid, x, y); }
Status tanh(Stream& stream, const Tensor& x, const Tensor& y) { return run_unary(stream, Activation::tanh, x, y); }
Status exp(Stream& stream, const Tensor& x, const Tensor& y) { return run_unary(stream, Activation::exp, x, y); }
Status quick_gelu(Stream& stream, const Tensor& x, const Tensor& y) { return run_unary(stream, Activation::quick_gelu, x, y); }
Status cast(Stream& stream, const Tensor& x, const Tensor& y) { return run_unary(stream, Activation::none, x, y); }

Status binary(Stream& stream, BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& y) {
  PlanKey key("binary", stream.context().isa());
  key.add(std::int64_t(op)).add(a.desc()).add(b.desc()).add(y.desc());
  const Tensor in[] = {a, b}, out[] = {y};
  return run_cached(stream, key, [&] { return Binary::plan(stream.context(), op, a.desc(), b.desc(), y.desc()); }, in, out);
}
Status add(Stream& stream, const Tensor& a, const Tensor& b, const Tensor& y) { return binary(stream, BinaryOp::add, a, b, y); }
Status sub(Stream& stream, const Tensor& a, const Tensor& b, const Tensor& y) { return binary(stream, BinaryOp::sub, a, b, y); }
Status mul(Stream& stream, const Tensor& a, const Tensor& b, const Tensor& y) { return binary(stream, BinaryOp::mul, a, b, y); }
Status div(Stream& stream, const Tensor& a, const Tensor& b, const Tensor& y) { return binary(stream, BinaryOp::div, a, b, y); }
Status maximum(Stream& stream, const Tensor& a, const Tensor& b, const Tensor& y) { return binary(stream, BinaryOp::max, a, b, y); }
Status minimum(Stream& stream, const Tensor& a, const Tensor& b, const Tensor& y) { return binary(stream, BinaryOp::min, a, b, y); }

namespace {
Status run_gated(Stream& stream, Activation act, const Tensor& a, const Tensor& b, const Tensor* c, const Tensor& y) {
  PlanKey key("gated", stream.context().isa());
  key.add(std::int64_t(act)).add(a.desc()).add(b.desc()).add(y.desc());
  if (c) key.add(c->desc());
  const std::optional<TensorDesc> cd = c ? std::optional(c->desc()) : std::nullopt;
  auto make = [&] { return Gated::plan(stream.context(), act, a.desc(), b.desc(), cd, y.desc()); };
  const Tensor out[] = {y};
  if (!c) {
    const Tensor in[] = {a, b};
    return run_cached(stream, key, make, in, out);
  }
  const Tensor in[] = {a, b, *c};
  return run_cached(stream, key, make, in, out);
}

// x [..., 2H] as its two halves along the last dim (views, no copy).
Result<std::pair<Tensor, Tensor>> halves(const Tensor& x) {
  if (x.rank() < 1 || x.dim(x.rank() - 1) % 2 != 0)
    return Status::invalid_argument(fmt::format("x: last dim must be even (two halves), got shape {}", x.shape().to_string()));
  const int last = x.rank() - 1;
  const std::int64_t h = x.dim(last) / 2;
  TESSERA_ASSIGN_OR_RETURN(Tensor lo, x.slice(last, 0, h));
  TESSERA_ASSIGN_OR_RETURN(Tensor hi, x.slice(last, h, 2 * h));
  return std::pair{lo, hi};
}
}  // namespace

Status gated(Stream& stream, Activation act, const Tensor& a, const Tensor& b, const Tensor& y) {
  return run_gated(stream, act, a, b, nullptr, y);
}
Status gated(Stream& stream, Activation act, const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& y) {
  return run_gated(stream, act, a, b, &c, y);
}
Status swiglu(Stream& stream, const Tensor& gate, const Tensor& up, const Tensor& y) {
  return run_gated(stream, Activation::silu, gate, up, nullptr, y);
}
Status geglu(Stream& stream, const Tensor& gate, const Tensor& up, const Tensor& y) {
  return run_gated(stream, Activation::gelu_erf, gate, up, nullptr, y);
}
Status swiglu(Stream& stream, const Tensor& x, const Tensor& y) {
  TESSERA_ASSIGN_OR_RETURN(auto h, halves(x));
  return run_gated(stream, Activation::silu, h.first, h.second, nullptr, y);
}
Status geglu(Stream& stream, const Tensor& x, const Tensor& y) {
  TESSERA_ASSIGN_OR_RETURN(auto h, halves(x));
  return run_gated(stream, Activation::gelu_erf, h.second, h.first, nullptr, y);
}

}  // namespace tessera::ops
