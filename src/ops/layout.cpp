#include "tessera/ops/layout.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/element.hpp"
#include "kernels/reorder.hpp"
#include "ops/common.hpp"

namespace tessera::ops {

using namespace detail;

namespace {

using ReorderRow = kernels::KernelRow<kernels::ReorderFamily>;

// Float dtypes convert into each other; any other dtype must match.
Status check_dtypes(const TensorDesc& x, std::string_view x_name, const TensorDesc& y, std::string_view y_name) {
  if (x.dtype == y.dtype || (is_floating(x.dtype) && is_floating(y.dtype))) return {};
  return Status::invalid_argument(fmt::format("{}: dtype {} must equal {}'s dtype {} (only f32, f16 and bf16 convert)", y_name,
                                              to_string(y.dtype), x_name, to_string(x.dtype)));
}

Status i4_not_whole_bytes(std::string_view name, const TensorDesc& d) {
  return Status::unsupported(fmt::format("{}: i4 data ({}) is copied only when contiguous, with an even element count "
                                         "starting on a byte boundary",
                                         name, d.to_string()));
}

// One reorder of x into y (x or y may be a piece of one of the op's tensors,
// at a byte offset): the kernel row, the plane its blocks tile, and the outer
// dims walked around the plane.
struct Part {
  int input = 0, output = 0;  // which of the op's tensors it reads and writes
  std::int64_t x_offset = 0, y_offset = 0;  // bytes from those tensors' data()
  const ReorderRow* row = nullptr;
  kernels::ReorderArgs plane{};  // the whole plane; pointers unset
  StridedDims<2> outer;
  kernels::ReorderTiling tiling{};
  std::int64_t col_blocks = 0, blocks = 0;  // blocks along cols, blocks in the plane

  std::int64_t units() const { return outer.numel() * blocks; }  // blocks at every outer index
  std::int64_t tasks() const { return (units() + tiling.blocks_per_task - 1) / tiling.blocks_per_task; }

  void run_units(const void* x, void* y, std::int64_t u0, std::int64_t u1) const {
    const std::int64_t xs = bytes_of(plane.x_dtype), ys = bytes_of(plane.y_dtype);
    const char* xb = static_cast<const char*>(x) + x_offset;
    char* yb = static_cast<char*>(y) + y_offset;
    for (std::int64_t u = u0; u < u1; ++u) {
      const auto off = outer.offsets(u / blocks);
      const std::int64_t b = u % blocks, r0 = b / col_blocks * tiling.block_rows, c0 = b % col_blocks * tiling.block_cols;
      kernels::ReorderArgs a = plane;
      a.rows = std::min(tiling.block_rows, plane.rows - r0);
      a.cols = std::min(tiling.block_cols, plane.cols - c0);
      a.x = xb + (off[0] + r0 * plane.x_row_stride + c0 * plane.x_col_stride) * xs;
      a.y = yb + (off[1] + r0 * plane.y_row_stride + c0 * plane.y_col_stride) * ys;
      a.stream_y = tiling.stream_output;
      row->run(a);
    }
  }
};

// Plans y = x (same shape). x_at / y_at: element offsets of x and y in the
// op's tensors; op_elements: the whole op's size, for the split into tasks.
Result<Part> make_part(Context& ctx, TensorDesc x, std::string_view x_name, std::int64_t x_at, TensorDesc y,
                       std::string_view y_name, std::int64_t y_at, std::int64_t op_elements) {
  TESSERA_RETURN_IF_ERROR(check_dtypes(x, x_name, y, y_name));
  if (x.dtype == DType::i4) {
    // Two to a byte: only whole bytes move, as u8.
    if (!x.is_contiguous() || x.numel() % 2 != 0 || x_at % 2 != 0) return i4_not_whole_bytes(x_name, x);
    if (!y.is_contiguous() || y_at % 2 != 0) return i4_not_whole_bytes(y_name, y);
    x = y = TensorDesc::contiguous(DType::u8, {x.numel() / 2});
    x_at /= 2, y_at /= 2, op_elements /= 2;
  }
  const auto d = collapse<2>(x.shape, {x.strides, y.strides});
  // The plane: cols along x's unit-stride dim; rows along y's where that is
  // another dim (a transpose), else along the innermost other dim.
  int ux = -1, uy = -1;
  for (int i = d.rank - 1; i >= 0; --i) {
    if (ux < 0 && d.strides[0][i] == 1) ux = i;
    if (uy < 0 && d.strides[1][i] == 1) uy = i;
  }
  auto mode = kernels::ReorderMode::copy;
  int q = -1, p = -1;  // the cols and rows dims; -1: a size-1 dim
  if (ux >= 0 && ux == uy) {
    q = ux, p = ux == d.rank - 1 ? d.rank - 2 : d.rank - 1;
  } else if (ux >= 0 && uy >= 0) {
    mode = kernels::ReorderMode::transpose, q = ux, p = uy;
  } else if (d.rank > 0) {
    mode = kernels::ReorderMode::strided, q = d.rank - 1, p = d.rank - 2;
  }
  Part part;
  part.x_offset = x_at * bytes_of(x.dtype);
  part.y_offset = y_at * bytes_of(y.dtype);
  part.plane = {x.dtype, y.dtype, 1, 1, nullptr, 0, 1, nullptr, 0, 1};
  if (q >= 0) part.plane.cols = d.shape[q], part.plane.x_col_stride = d.strides[0][q], part.plane.y_col_stride = d.strides[1][q];
  if (p >= 0) part.plane.rows = d.shape[p], part.plane.x_row_stride = d.strides[0][p], part.plane.y_row_stride = d.strides[1][p];
  for (int i = 0; i < d.rank; ++i) {
    if (i == p || i == q) continue;
    StridedDims<2>& o = part.outer;
    o.shape[o.rank] = d.shape[i];
    for (int k = 0; k < 2; ++k) o.strides[k][o.rank] = d.strides[k][i];
    ++o.rank;
  }
  const kernels::ReorderProblem problem{mode, x.dtype, y.dtype, part.plane.rows, part.plane.cols, op_elements};
  part.row = kernels::select<kernels::ReorderFamily>(problem, ctx.isa());
  part.tiling = part.row->tiling(problem, ctx.hw());
  part.col_blocks = (part.plane.cols + part.tiling.block_cols - 1) / part.tiling.block_cols;
  part.blocks = (part.plane.rows + part.tiling.block_rows - 1) / part.tiling.block_rows * part.col_blocks;
  return part;
}

// The reorders one op is made of, run as one pool job: part i's tasks follow
// part i-1's. An op small enough for one task runs on the calling thread.
class Parts {
 public:
  Parts(std::vector<Part> parts, std::int64_t op_elements, std::int64_t bytes_per_element, const hw::Info& hw)
      : parts_(std::move(parts)) {
    first_task_.push_back(0);
    for (const Part& p : parts_) first_task_.push_back(first_task_.back() + p.tasks());
    if (op_elements <= kernels::elementwise_tiling(op_elements, bytes_per_element, hw).grain)
      tasks_per_job_ = std::max<std::int64_t>(1, first_task_.back());
  }

  // The least vectorized row any part runs: what a profile should show.
  std::string_view kernel() const {
    const ReorderRow* row = parts_.front().row;
    for (const Part& p : parts_) row = std::max(row, p.row);  // rows of one table, best first
    return row->name;
  }

  void run(ThreadPool& pool, std::span<const Tensor> in, std::span<const Tensor> out) const {
    pool.parallel_for(first_task_.back(), tasks_per_job_, [&](std::int64_t t0, std::int64_t t1) {
      for (std::int64_t t = t0; t < t1; ++t) {
        const auto i = std::size_t(std::upper_bound(first_task_.begin(), first_task_.end(), t) - first_task_.begin() - 1);
        const Part& p = parts_[i];
        const std::int64_t u0 = (t - first_task_[i]) * p.tiling.blocks_per_task;
        p.run_units(in[std::size_t(p.input)].data(), out[std::size_t(p.output)].data(), u0,
                    std::min(p.units(), u0 + p.tiling.blocks_per_task));
      }
    });
  }

 private:
  std::vector<Part> parts_;
  std::vector<std::int64_t> first_task_;  // per part, then the total
  std::int64_t tasks_per_job_ = 1;
};

std::int64_t traffic_of(std::span<const TensorDesc> descs) {
  std::int64_t total = 0;
  for (const TensorDesc& d : descs) total = saturating_add(total, traffic_bytes({d}));
  return total;
}

std::vector<std::string> indexed_names(std::string_view base, std::size_t n) {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < n; ++i) names.push_back(fmt::format("{}[{}]", base, i));
  return names;
}

// Outputs written in one op must not overlap each other.
Status check_disjoint(std::span<const Tensor> out, std::span<const std::string_view> names) {
  for (std::size_t i = 0; i < out.size(); ++i)
    for (std::size_t j = 0; j < i; ++j) {
      const auto* a = static_cast<const char*>(out[i].data());
      const auto* b = static_cast<const char*>(out[j].data());
      const std::int64_t an = out[i].desc().span_bytes(), bn = out[j].desc().span_bytes();
      if (a != nullptr && b != nullptr && an > 0 && bn > 0 && a < b + bn && b < a + an)
        return Status::invalid_argument(fmt::format("{}: overlaps {} in memory", names[i], names[j]));
    }
  return {};
}

// Reorder, concat and split: nothing but parts.
class MovePlan final : public Plan {
 public:
  MovePlan(std::string_view op, std::vector<TensorDesc> in, std::vector<std::string> in_names, std::vector<TensorDesc> out,
           std::vector<std::string> out_names, Parts parts, std::int64_t bytes)
      : Plan(parts.kernel(), bytes, 0), op_(op), in_(std::move(in)), out_(std::move(out)),
        in_names_(std::move(in_names)), out_names_(std::move(out_names)), parts_(std::move(parts)) {
    in_views_.assign(in_names_.begin(), in_names_.end());
    out_views_.assign(out_names_.begin(), out_names_.end());
  }

  std::string_view op() const override { return op_; }

  Status do_run(Stream& stream, std::span<const Tensor> in, std::span<const Tensor> out, void*) const override {
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), in, in_, in_views_));
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), out, out_, out_views_));
    for (std::size_t o = 0; o < out.size(); ++o)
      for (std::size_t i = 0; i < in.size(); ++i)
        TESSERA_RETURN_IF_ERROR(check_overlap(out[o], out_views_[o], in[i], in_views_[i], false));
    TESSERA_RETURN_IF_ERROR(check_disjoint(out, out_views_));
    return stream.submit(op(), [&] {
      parts_.run(stream.pool(), in, out);
      return Status{};
    });
  }

 private:
  std::string_view op_;
  std::vector<TensorDesc> in_, out_;
  std::vector<std::string> in_names_, out_names_;
  std::vector<std::string_view> in_views_, out_views_;
  Parts parts_;
};

// Checks pieces against `whole` (every dim but axis equal, sizes along axis
// summing to whole's) and returns the axis in [0, rank).
Result<int> check_pieces(std::span<const TensorDesc> pieces, std::string_view pieces_name, int axis, const TensorDesc& whole,
                         std::string_view whole_name) {
  if (pieces.empty()) return Status::invalid_argument(fmt::format("{}: expected at least one tensor", pieces_name));
  TESSERA_ASSIGN_OR_RETURN(const int a, normalize_axis(axis, whole.rank()));
  std::int64_t sum = 0;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const std::string name = fmt::format("{}[{}]", pieces_name, i);
    TESSERA_RETURN_IF_ERROR(pieces[i].validate(name));
    bool match = pieces[i].rank() == whole.rank();
    for (int d = 0; d < whole.rank() && match; ++d) match = d == a || pieces[i].shape[d] == whole.shape[d];
    if (!match)
      return Status::invalid_argument(fmt::format("{}: shape {} must equal {}'s shape {} in every dim but axis {}", name,
                                                  pieces[i].shape.to_string(), whole_name, whole.shape.to_string(), a));
    sum += pieces[i].shape[a];
  }
  if (sum != whole.shape[a])
    return Status::invalid_argument(fmt::format("{}: dim {} is {}, but {}' sizes along axis {} sum to {}", whole_name, a,
                                                whole.shape[a], pieces_name, a, sum));
  return a;
}

// Concat (the pieces are the inputs, `whole` the output) and split (the
// reverse): one part between each piece and its slice of whole along axis.
Result<PlanPtr> plan_pieces(Context& ctx, std::string_view op, std::span<const TensorDesc> pieces, std::string_view pieces_name,
                            int axis, const TensorDesc& whole, std::string_view whole_name, bool into_whole) {
  TESSERA_RETURN_IF_ERROR(whole.validate(whole_name));
  if (into_whole) TESSERA_RETURN_IF_ERROR(check_writable(whole, whole_name));
  TESSERA_ASSIGN_OR_RETURN(const int a, check_pieces(pieces, pieces_name, axis, whole, whole_name));
  const std::vector<std::string> names = indexed_names(pieces_name, pieces.size());
  std::vector<Part> list;
  std::int64_t start = 0;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (!into_whole) TESSERA_RETURN_IF_ERROR(check_writable(pieces[i], names[i]));
    TensorDesc slice = whole;
    slice.shape[a] = pieces[i].shape[a];
    const std::int64_t at = start * whole.strides[a];
    start += pieces[i].shape[a];
    Result<Part> part = into_whole ? make_part(ctx, pieces[i], names[i], 0, slice, whole_name, at, whole.numel())
                                   : make_part(ctx, slice, whole_name, at, pieces[i], names[i], 0, whole.numel());
    if (!part.ok()) return part.status();
    (into_whole ? part->input : part->output) = int(i);
    list.push_back(*part);
  }
  Parts parts(std::move(list), whole.numel(), 2 * bytes_of(whole.dtype), ctx.hw());
  const std::int64_t bytes = saturating_add(traffic_of(pieces), traffic_bytes({whole}));
  std::vector<TensorDesc> piece_descs(pieces.begin(), pieces.end()), whole_descs{whole};
  std::vector<std::string> whole_names{std::string(whole_name)};
  if (into_whole)
    return PlanPtr(std::make_shared<MovePlan>(op, piece_descs, names, whole_descs, whole_names, std::move(parts), bytes));
  return PlanPtr(std::make_shared<MovePlan>(op, whole_descs, whole_names, piece_descs, names, std::move(parts), bytes));
}

}  // namespace

Result<PlanPtr> Reorder::plan(Context& ctx, const TensorDesc& x, const TensorDesc& y) {
  TESSERA_RETURN_IF_ERROR(x.validate("x"));
  TESSERA_RETURN_IF_ERROR(y.validate("y"));
  TESSERA_RETURN_IF_ERROR(check_same_shape(y, "y", x.shape, "x's shape"));
  TESSERA_RETURN_IF_ERROR(check_writable(y, "y"));
  TESSERA_ASSIGN_OR_RETURN(Part part, make_part(ctx, x, "x", 0, y, "y", 0, x.numel()));
  Parts parts({part}, x.numel(), bytes_of(x.dtype) + bytes_of(y.dtype), ctx.hw());
  return PlanPtr(std::make_shared<MovePlan>("reorder", std::vector{x}, std::vector<std::string>{"x"}, std::vector{y},
                                            std::vector<std::string>{"y"}, std::move(parts), traffic_bytes({x, y})));
}

Result<PlanPtr> Concat::plan(Context& ctx, std::span<const TensorDesc> inputs, int axis, const TensorDesc& y) {
  return plan_pieces(ctx, "concat", inputs, "inputs", axis, y, "y", true);
}

Result<PlanPtr> Split::plan(Context& ctx, const TensorDesc& x, int axis, std::span<const TensorDesc> outputs) {
  return plan_pieces(ctx, "split", outputs, "outputs", axis, x, "x", false);
}

namespace {

// The bytes of `value` in dtype t; integer dtypes take only integers they hold.
template <class T>
bool integer_bytes(float value, std::array<char, 8>& out) {
  const double v = value;
  if (!(v == std::trunc(v) && v >= double(std::numeric_limits<T>::min()) && v < double(std::numeric_limits<T>::max()) + 1.0))
    return false;
  const T t = T(v);
  std::memcpy(out.data(), &t, sizeof t);
  return true;
}

Result<std::array<char, 8>> fill_bytes(DType t, float value) {
  std::array<char, 8> out{};
  bool ok = true;
  switch (t) {
    case DType::i8: ok = integer_bytes<std::int8_t>(value, out); break;
    case DType::u8: ok = integer_bytes<std::uint8_t>(value, out); break;
    case DType::i32: ok = integer_bytes<std::int32_t>(value, out); break;
    case DType::i64: ok = integer_bytes<std::int64_t>(value, out); break;
    default: tessera::detail::store(out.data(), t, 0, value); break;
  }
  if (!ok) return Status::invalid_argument(fmt::format("value: {} is not an integer that y's dtype {} holds", value, to_string(t)));
  return out;
}

class PadPlan final : public Plan {
 public:
  PadPlan(const TensorDesc& x, const TensorDesc& y, PadAttrs attrs, std::array<char, 8> fill, Parts interior)
      : Plan(interior.kernel(), traffic_bytes({x, y}), 0), descs_{x, y}, attrs_(std::move(attrs)), fill_(fill),
        interior_(std::move(interior)) {}

  std::string_view op() const override { return "pad"; }

  Status do_run(Stream& stream, std::span<const Tensor> in, std::span<const Tensor> out, void*) const override {
    TESSERA_RETURN_IF_ERROR(check_x_to_y(op(), in, out, descs_));
    return stream.submit(op(), [&] {
      interior_.run(stream.pool(), in, out);
      fill_borders(byte_ptr(in[0]), const_cast<char*>(byte_ptr(out[0])));
      return Status{};
    });
  }

 private:
  // The border, box by box: box (d, side) holds the elements whose dims
  // before d lie in the interior and whose dim d lies in the before (side 0)
  // or after (side 1) border. The boxes are disjoint and cover the border.
  void fill_borders(const char* x, char* y) const {
    const TensorDesc &xd = descs_[0], &yd = descs_[1];
    for (int d = 0; d < yd.rank(); ++d)
      for (int side = 0; side < 2; ++side) {
        std::array<std::int64_t, kMaxRank> lo{}, hi{};
        for (int k = 0; k < yd.rank(); ++k) {
          const std::int64_t b = attrs_.before[std::size_t(k)], n = xd.shape[k];
          lo[k] = k < d ? b : (k == d && side == 1 ? b + n : 0);
          hi[k] = k < d ? b + n : (k == d && side == 0 ? b : yd.shape[k]);
        }
        fill_box(x, y, lo, hi);
      }
  }

  // The x index y index i along dim k reads (reflect and edge modes).
  std::int64_t source(int k, std::int64_t i) const {
    const std::int64_t n = descs_[0].shape[k], j = i - attrs_.before[std::size_t(k)];
    if (attrs_.mode == PadMode::edge) return j < 0 ? 0 : (j >= n ? n - 1 : j);
    return j < 0 ? -j : (j >= n ? 2 * (n - 1) - j : j);
  }

  void fill_box(const char* x, char* y, const std::array<std::int64_t, kMaxRank>& lo,
                const std::array<std::int64_t, kMaxRank>& hi) const {
    const TensorDesc &xd = descs_[0], &yd = descs_[1];
    const int rank = yd.rank(), last = rank - 1;
    for (int k = 0; k < rank; ++k)
      if (lo[k] >= hi[k]) return;
    const std::int64_t xs = bytes_of(xd.dtype), ys = bytes_of(yd.dtype);
    const bool constant = attrs_.mode == PadMode::constant;
    std::array<std::int64_t, kMaxRank> idx = lo;
    for (;;) {
      std::int64_t x_off = 0, y_off = 0;  // elements, at idx with the last dim 0
      for (int k = 0; k < last; ++k) {
        y_off += idx[k] * yd.strides[k];
        if (!constant) x_off += source(k, idx[k]) * xd.strides[k];
      }
      for (std::int64_t i = lo[last]; i < hi[last]; ++i) {
        char* dst = y + (y_off + i * yd.strides[last]) * ys;
        if (constant) {
          std::memcpy(dst, fill_.data(), std::size_t(ys));
          continue;
        }
        const std::int64_t src = x_off + source(last, i) * xd.strides[last];
        if (xd.dtype == yd.dtype)
          std::memcpy(dst, x + src * xs, std::size_t(xs));
        else
          tessera::detail::store(dst, yd.dtype, 0, tessera::detail::load(x, xd.dtype, src));
      }
      int k = last - 1;
      for (; k >= 0; --k) {
        if (++idx[k] < hi[k]) break;
        idx[k] = lo[k];
      }
      if (k < 0) return;
    }
  }

  TensorDesc descs_[2];
  PadAttrs attrs_;
  std::array<char, 8> fill_;
  Parts interior_;
};

}  // namespace

Result<PlanPtr> Pad::plan(Context& ctx, const TensorDesc& x, const TensorDesc& y, const PadAttrs& attrs) {
  TESSERA_RETURN_IF_ERROR(x.validate("x"));
  TESSERA_RETURN_IF_ERROR(y.validate("y"));
  if (x.dtype == DType::i4) return Status::unsupported("x: dtype i4 is not supported by pad");
  for (const auto* pads : {&attrs.before, &attrs.after}) {
    const std::string_view name = pads == &attrs.before ? "before" : "after";
    if (pads->size() != std::size_t(x.rank()))
      return Status::invalid_argument(fmt::format("{}: {} values, expected one per dim of x (rank {})", name, pads->size(), x.rank()));
    for (int d = 0; d < x.rank(); ++d) {
      const std::int64_t v = (*pads)[std::size_t(d)], n = x.shape[d];
      if (v < 0)
        return Status::invalid_argument(
            fmt::format("{}: pad {} at dim {} is negative; cropping is not supported, slice x instead", name, v, d));
      if (v > 0 && attrs.mode == PadMode::reflect && v >= n)
        return Status::invalid_argument(fmt::format("{}: reflect pad {} at dim {} must be less than x's dim {}", name, v, d, n));
      if (v > 0 && attrs.mode == PadMode::edge && n == 0)
        return Status::invalid_argument(fmt::format("{}: edge pad {} at dim {} needs x's dim to be non-empty", name, v, d));
    }
  }
  Shape expected = x.shape;
  for (int d = 0; d < x.rank(); ++d) {
    const std::int64_t b = attrs.before[std::size_t(d)], a = attrs.after[std::size_t(d)];
    if (b > std::numeric_limits<std::int64_t>::max() - x.shape[d] - a)
      return Status::invalid_argument(fmt::format("before: {} + x's dim {} + after {} at dim {} overflows int64", b, x.shape[d], a, d));
    expected[d] = b + x.shape[d] + a;
  }
  TESSERA_RETURN_IF_ERROR(check_same_shape(y, "y", expected, "x's shape plus the pads"));
  TESSERA_RETURN_IF_ERROR(check_writable(y, "y"));
  TensorDesc interior = y;  // the elements of y that x lands on
  std::int64_t at = 0;
  for (int d = 0; d < x.rank(); ++d) {
    interior.shape[d] = x.shape[d];
    at += attrs.before[std::size_t(d)] * y.strides[d];
  }
  TESSERA_ASSIGN_OR_RETURN(Part part, make_part(ctx, x, "x", 0, interior, "y", at, x.numel()));
  TESSERA_ASSIGN_OR_RETURN(auto fill, fill_bytes(y.dtype, attrs.value));
  Parts parts({part}, x.numel(), bytes_of(x.dtype) + bytes_of(y.dtype), ctx.hw());
  return PlanPtr(std::make_shared<PadPlan>(x, y, attrs, fill, std::move(parts)));
}

namespace {

class GatherPlan final : public Plan {
 public:
  // slab: x's elements after axis into y's; unset where both are contiguous
  // there (one memcpy of slab_bytes per index then).
  GatherPlan(std::array<TensorDesc, 3> descs, int axis, std::string_view kernel, StridedDims<2> outer,
             StridedDims<2> index_dims, std::optional<Part> slab, std::int64_t slab_bytes, std::int64_t slabs_per_task)
      : Plan(kernel, traffic_bytes({descs[1], descs[2], descs[2]}), 0),  // indices, slabs read, slabs written
        descs_(descs), axis_(axis), outer_(outer), index_dims_(index_dims), slab_(std::move(slab)), slab_bytes_(slab_bytes),
        slabs_per_task_(slabs_per_task) {}

  std::string_view op() const override { return "gather"; }

  Status do_run(Stream& stream, std::span<const Tensor> in, std::span<const Tensor> out, void*) const override {
    static constexpr std::string_view kIn[] = {"x", "indices"}, kOut[] = {"y"};
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), in, std::span(descs_.data(), 2), kIn));
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), out, std::span(descs_.data() + 2, 1), kOut));
    TESSERA_RETURN_IF_ERROR(check_overlap(out[0], "y", in[0], "x", false));
    TESSERA_RETURN_IF_ERROR(check_overlap(out[0], "y", in[1], "indices", false));
    return stream.submit(op(), [&]() -> Status {
      const TensorDesc &x = descs_[0], &indices = descs_[1];
      const std::int64_t count = indices.numel(), n = x.shape[axis_];
      // Every index is checked before anything is copied.
      for (std::int64_t k = 0; k < count; ++k) {
        const std::int64_t v = tessera::detail::load_index(in[1].data(), indices.dtype, index_dims_.offsets(k)[0]);
        if (v < -n || v >= n)
          return Status::out_of_range(fmt::format("indices: value {} at flat index {} is outside [{}, {})", v, k, -n, n));
      }
      if (descs_[2].numel() == 0) return Status{};
      const char* xp = byte_ptr(in[0]);
      char* yp = const_cast<char*>(byte_ptr(out[0]));
      const std::int64_t size = bytes_of(x.dtype), axis_stride = x.strides[axis_];
      stream.pool().parallel_for(outer_.numel() * count, slabs_per_task_, [&](std::int64_t u0, std::int64_t u1) {
        for (std::int64_t u = u0; u < u1; ++u) {
          const auto o = outer_.offsets(u / count), k = index_dims_.offsets(u % count);
          std::int64_t v = tessera::detail::load_index(in[1].data(), indices.dtype, k[0]);
          if (v < 0) v += n;  // ONNX: negative indices count from the end
          const char* src = xp + (o[0] + v * axis_stride) * size;
          char* dst = yp + (o[1] + k[1]) * size;
          if (slab_)
            slab_->run_units(src, dst, 0, slab_->units());
          else
            std::memcpy(dst, src, std::size_t(slab_bytes_));
        }
      });
      return Status{};
    });
  }

 private:
  std::array<TensorDesc, 3> descs_;  // x, indices, y
  int axis_;
  StridedDims<2> outer_;       // x's dims before axis: x (operand 0) and y (operand 1)
  StridedDims<2> index_dims_;  // indices' dims: indices (operand 0) and y (operand 1)
  std::optional<Part> slab_;
  std::int64_t slab_bytes_, slabs_per_task_;
};

}  // namespace

Result<PlanPtr> Gather::plan(Context& ctx, const TensorDesc& x, const TensorDesc& indices, int axis, const TensorDesc& y) {
  TESSERA_RETURN_IF_ERROR(x.validate("x"));
  TESSERA_RETURN_IF_ERROR(indices.validate("indices"));
  TESSERA_RETURN_IF_ERROR(y.validate("y"));
  if (x.dtype == DType::i4) return Status::unsupported("x: dtype i4 is not supported by gather");
  TESSERA_RETURN_IF_ERROR(check_index_dtype(indices, "indices"));
  TESSERA_RETURN_IF_ERROR(check_rank(x, "x", 1));
  TESSERA_ASSIGN_OR_RETURN(const int a, normalize_axis(axis, x.rank()));
  if (x.rank() - 1 + indices.rank() > kMaxRank)
    return Status::invalid_argument(fmt::format("indices: rank {} with x's rank {} gives y a rank above {}", indices.rank(),
                                                x.rank(), kMaxRank));
  if (y.dtype != x.dtype)
    return Status::invalid_argument(fmt::format("y: dtype {} must equal x's dtype {}", to_string(y.dtype), to_string(x.dtype)));
  Shape expected;
  for (int d = 0; d < a; ++d) expected.push_back(x.shape[d]);
  for (std::int64_t v : indices.shape) expected.push_back(v);
  for (int d = a + 1; d < x.rank(); ++d) expected.push_back(x.shape[d]);
  TESSERA_RETURN_IF_ERROR(check_same_shape(y, "y", expected, "x.shape[:axis] + indices.shape + x.shape[axis+1:]"));
  TESSERA_RETURN_IF_ERROR(check_writable(y, "y"));

  // y's dims: x's before axis, then indices', then x's after axis (the slab).
  Shape outer, inner;
  Strides x_outer, y_outer, y_index, x_inner, y_inner;
  for (int d = 0; d < a; ++d) outer.push_back(x.shape[d]), x_outer.push_back(x.strides[d]), y_outer.push_back(y.strides[d]);
  for (int j = 0; j < indices.rank(); ++j) y_index.push_back(y.strides[a + j]);
  for (int d = a + 1; d < x.rank(); ++d)
    inner.push_back(x.shape[d]), x_inner.push_back(x.strides[d]), y_inner.push_back(y.strides[d - 1 + indices.rank()]);
  const auto slab = collapse<2>(inner, {x_inner, y_inner});
  const std::int64_t slab_elements = slab.numel(), size = bytes_of(x.dtype);
  std::optional<Part> part;
  std::string_view kernel = "gather_memcpy";
  if (slab.rank > 1 || (slab.rank == 1 && (slab.strides[0][0] != 1 || slab.strides[1][0] != 1))) {
    TESSERA_ASSIGN_OR_RETURN(part, make_part(ctx, {x.dtype, inner, x_inner}, "x", 0, {y.dtype, inner, y_inner}, "y", 0, slab_elements));
    kernel = part->row->name;
  }
  const std::int64_t slabs_per_task = std::max<std::int64_t>(
      1, kernels::elementwise_tiling(y.numel(), 2 * size, ctx.hw()).grain / std::max<std::int64_t>(1, slab_elements));
  return PlanPtr(std::make_shared<GatherPlan>(std::array{x, indices, y}, a, kernel, collapse<2>(outer, {x_outer, y_outer}),
                                              collapse<2>(indices.shape, {indices.strides, y_index}), std::move(part),
                                              slab_elements * size, slabs_per_task));
}

Status reorder(Stream& stream, const Tensor& x, const Tensor& y) {
  PlanKey key("reorder", stream.context().isa());
  key.add(x.desc()).add(y.desc());
  const Tensor in[] = {x}, out[] = {y};
  return run_cached(stream, key, [&] { return Reorder::plan(stream.context(), x.desc(), y.desc()); }, in, out);
}

Status permute(Stream& stream, const Tensor& x, std::span<const int> order, const Tensor& y) {
  TESSERA_ASSIGN_OR_RETURN(Tensor view, x.permute(order));
  return reorder(stream, view, y);
}

namespace {
std::vector<TensorDesc> descs_of(std::span<const Tensor> tensors) {
  std::vector<TensorDesc> descs;
  for (const Tensor& t : tensors) descs.push_back(t.desc());
  return descs;
}
}  // namespace

Status concat(Stream& stream, std::span<const Tensor> inputs, int axis, const Tensor& y) {
  const std::vector<TensorDesc> descs = descs_of(inputs);
  PlanKey key("concat", stream.context().isa());
  key.add(std::int64_t(axis)).add(std::int64_t(descs.size())).add(y.desc());
  for (const TensorDesc& d : descs) key.add(d);
  const Tensor out[] = {y};
  return run_cached(stream, key, [&] { return Concat::plan(stream.context(), descs, axis, y.desc()); }, inputs, out);
}

Status split(Stream& stream, const Tensor& x, int axis, std::span<const Tensor> outputs) {
  const std::vector<TensorDesc> descs = descs_of(outputs);
  PlanKey key("split", stream.context().isa());
  key.add(std::int64_t(axis)).add(std::int64_t(descs.size())).add(x.desc());
  for (const TensorDesc& d : descs) key.add(d);
  const Tensor in[] = {x};
  return run_cached(stream, key, [&] { return Split::plan(stream.context(), x.desc(), axis, descs); }, in, outputs);
}

Status pad(Stream& stream, const Tensor& x, const Tensor& y, const PadAttrs& attrs) {
  PlanKey key("pad", stream.context().isa());
  key.add(x.desc()).add(y.desc()).add(std::int64_t(attrs.mode)).add(attrs.value);
  key.add(std::int64_t(attrs.before.size())).add(std::int64_t(attrs.after.size()));
  for (std::int64_t v : attrs.before) key.add(v);
  for (std::int64_t v : attrs.after) key.add(v);
  const Tensor in[] = {x}, out[] = {y};
  return run_cached(stream, key, [&] { return Pad::plan(stream.context(), x.desc(), y.desc(), attrs); }, in, out);
}

Status gather(Stream& stream, const Tensor& x, const Tensor& indices, int axis, const Tensor& y) {
  PlanKey key("gather", stream.context().isa());
  key.add(x.desc()).add(indices.desc()).add(std::int64_t(axis)).add(y.desc());
  const Tensor in[] = {x, indices}, out[] = {y};
  return run_cached(stream, key, [&] { return Gather::plan(stream.context(), x.desc(), indices.desc(), axis, y.desc()); }, in, out);
}

}  // namespace tessera::ops
