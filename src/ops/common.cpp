#include "ops/common.hpp"

#include <algorithm>
#include <numeric>
#include <utility>

namespace tessera::ops::detail {

Status check_float(const TensorDesc& d, std::string_view name) {
  if (!is_floating(d.dtype))
    return Status::invalid_argument(fmt::format("{}: dtype {} is not supported, expected f32, f16 or bf16", name, to_string(d.dtype)));
  return {};
}

Status check_index_dtype(const TensorDesc& d, std::string_view name) {
  if (d.dtype != DType::i32 && d.dtype != DType::i64)
    return Status::invalid_argument(fmt::format("{}: dtype {} is not supported, expected i32 or i64", name, to_string(d.dtype)));
  return {};
}

Result<int> normalize_axis(int axis, int rank) {
  if (axis < -rank || axis >= rank)
    return Status::invalid_argument(fmt::format("axis: {} is out of range for rank {}, expected [{}, {})", axis, rank, -rank, rank));
  return axis < 0 ? axis + rank : axis;
}

Status check_rank(const TensorDesc& d, std::string_view name, int min_rank, int max_rank) {
  if (d.rank() < min_rank || d.rank() > max_rank) {
    if (min_rank == max_rank)
      return Status::invalid_argument(fmt::format("{}: rank {} (shape {}), expected rank {}", name, d.rank(), d.shape.to_string(), min_rank));
    return Status::invalid_argument(
        fmt::format("{}: rank {} (shape {}), expected rank {} to {}", name, d.rank(), d.shape.to_string(), min_rank, max_rank));
  }
  return {};
}

Status check_same_shape(const TensorDesc& d, std::string_view name, const Shape& expected, std::string_view expected_what) {
  if (!(d.shape == expected))
    return Status::invalid_argument(fmt::format("{}: shape {} must equal {} {}", name, d.shape.to_string(), expected_what, expected.to_string()));
  return {};
}

Status check_writable(const TensorDesc& d, std::string_view name) {
  // Sorted by stride, each dim must step over everything the smaller dims
  // span; then no two elements share an address (no two tasks write one).
  std::array<std::pair<std::int64_t, std::int64_t>, kMaxRank> dims{};  // (stride, size)
  int n = 0;
  for (int i = 0; i < d.rank(); ++i) {
    if (d.shape[i] == 0) return {};
    if (d.shape[i] > 1) dims[n++] = {d.strides[i], d.shape[i]};
  }
  for (int i = 1; i < n; ++i)  // insertion sort: at most kMaxRank entries
    for (int j = i; j > 0 && dims[j] < dims[j - 1]; --j) std::swap(dims[j], dims[j - 1]);
  std::int64_t reach = 1;  // elements covered by the dims so far
  for (int i = 0; i < n; ++i) {
    if (dims[i].first < reach)
      return Status::invalid_argument(fmt::format("{}: strides {} make elements of shape {} share memory (an output must not overlap itself)",
                                                  name, d.strides.to_string(), d.shape.to_string()));
    reach = dims[i].first * dims[i].second;  // fits: validate() bounded the span
  }
  return {};
}

std::int64_t traffic_bytes(std::initializer_list<TensorDesc> descs) {
  std::int64_t total = 0;
  for (const TensorDesc& d : descs) {
    std::int64_t unique = bytes_of(d.dtype);
    for (int i = 0; i < d.rank(); ++i)
      if (d.strides[i] != 0 || d.shape[i] == 0) unique = saturating_mul(unique, d.shape[i]);
    total = saturating_add(total, unique);
  }
  return total;
}

Strides broadcast_strides(const TensorDesc& d, const Shape& shape) {
  Strides s = Strides::filled(shape.rank(), 0);
  const int lead = shape.rank() - d.rank();
  for (int i = lead; i < shape.rank(); ++i) s[i] = d.shape[i - lead] == 1 ? 0 : d.strides[i - lead];
  return s;
}

Result<Strides> check_broadcasts_to(const TensorDesc& d, std::string_view name, const Shape& shape, std::string_view shape_what) {
  bool ok = d.rank() <= shape.rank();
  for (int i = 0; ok && i < d.rank(); ++i) ok = d.shape[i] == 1 || d.shape[i] == shape[i + shape.rank() - d.rank()];
  if (!ok)
    return Status::invalid_argument(fmt::format("{}: shape {} does not broadcast to {} {}", name, d.shape.to_string(), shape_what, shape.to_string()));
  return broadcast_strides(d, shape);
}

Status check_tensors(std::string_view op, std::span<const Tensor> given, std::span<const TensorDesc> expected,
                     std::span<const std::string_view> names) {
  if (given.size() != expected.size())
    return Status::invalid_argument(fmt::format("{}: got {} tensors ({}), expected {}", op, given.size(),
                                                names.empty() ? "" : names[0], expected.size()));
  for (std::size_t i = 0; i < given.size(); ++i) {
    const Tensor& t = given[i];
    if (!(t.desc() == expected[i]))
      return Status::invalid_argument(fmt::format("{}: {} is {}, the plan was made for {}", op, names[i],
                                                  t.desc().to_string(), expected[i].to_string()));
    if (t.data() == nullptr && expected[i].numel() > 0)
      return Status::invalid_argument(fmt::format("{}: {} has no data (null pointer)", op, names[i]));
  }
  return {};
}

std::array<int, kMaxRank> stride_order(const TensorDesc& y) {
  std::array<int, kMaxRank> order{};
  std::iota(order.begin(), order.begin() + y.rank(), 0);
  std::stable_sort(order.begin(), order.begin() + y.rank(), [&](int i, int j) { return y.strides[i] > y.strides[j]; });
  return order;
}

Status check_overlap(const Tensor& out, std::string_view out_name, const Tensor& in, std::string_view in_name,
                     bool allow_same_view) {
  const auto* o = static_cast<const char*>(out.data());
  const auto* i = static_cast<const char*>(in.data());
  const std::int64_t ob = out.desc().span_bytes(), ib = in.desc().span_bytes();
  if (o == nullptr || i == nullptr || ob == 0 || ib == 0 || o + ob <= i || i + ib <= o) return {};
  if (allow_same_view && o == i && out.shape() == in.shape() && out.strides() == in.strides()) return {};
  return Status::invalid_argument(fmt::format("{}: overlaps {} in memory{}", out_name, in_name,
                                              allow_same_view ? " (only an identical view, i.e. in-place, is allowed)" : ""));
}

Status check_x_to_y(std::string_view op, std::span<const Tensor> in, std::span<const Tensor> out, const TensorDesc* descs) {
  static constexpr std::string_view kOut[] = {"y"};
  return check_one_to_outputs(op, in, "x", out, descs, kOut);
}

Status check_one_to_outputs(std::string_view op, std::span<const Tensor> in, std::string_view in_name, std::span<const Tensor> out,
                            const TensorDesc* descs, std::span<const std::string_view> out_names) {
  TESSERA_RETURN_IF_ERROR(check_tensors(op, in, std::span(descs, 1), std::span(&in_name, 1)));
  TESSERA_RETURN_IF_ERROR(check_tensors(op, out, std::span(descs + 1, out_names.size()), out_names));
  for (std::size_t o = 0; o < out.size(); ++o) {
    TESSERA_RETURN_IF_ERROR(check_overlap(out[o], out_names[o], in[0], in_name, false));
    for (std::size_t p = 0; p < o; ++p) TESSERA_RETURN_IF_ERROR(check_overlap(out[o], out_names[o], out[p], out_names[p], false));
  }
  return {};
}

}  // namespace tessera::ops::detail
