#pragma once
// Shapes, strides and tensor descriptors. Strides count elements, not bytes;
// a stride of 0 is a broadcast dimension. Element counts and byte sizes are
// computed with overflow checks, so a huge shape is an error, not a wrap-around.
#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "tessera/core/dtype.hpp"
#include "tessera/core/status.hpp"

namespace tessera {

inline constexpr int kMaxRank = 8;

// A short, fixed-capacity list of int64: the dims of a shape or its strides.
class Dims {
 public:
  Dims() = default;
  Dims(std::initializer_list<std::int64_t> v);
  explicit Dims(std::span<const std::int64_t> v);
  // A Dims of `rank` copies of `value`; rank must be in [0, kMaxRank].
  static Dims filled(int rank, std::int64_t value);

  int rank() const { return rank_; }
  std::int64_t operator[](int i) const { return d_[i]; }
  std::int64_t& operator[](int i) { return d_[i]; }
  // Iteration covers at most kMaxRank dims (an over-long Dims keeps rank
  // kMaxRank + 1 only as a marker for validate()).
  std::span<const std::int64_t> span() const { return {d_.data(), std::size_t(std::min(rank_, kMaxRank))}; }
  const std::int64_t* begin() const { return d_.data(); }
  const std::int64_t* end() const { return d_.data() + std::min(rank_, kMaxRank); }
  // Appending past kMaxRank leaves the over-long marker that validate() reports.
  void push_back(std::int64_t v);
  bool operator==(const Dims& o) const;
  std::string to_string() const;  // "[2, 3, 4]"

 private:
  std::array<std::int64_t, kMaxRank> d_{};
  int rank_ = 0;
};

using Shape = Dims;
using Strides = Dims;

// Product of dims, or an error naming `what` if a dim is negative or the product overflows.
Result<std::int64_t> checked_numel(const Shape& shape, std::string_view what);
// Row-major strides for `shape`.
Strides contiguous_strides(const Shape& shape);

struct TensorDesc {
  DType dtype = DType::f32;
  Shape shape;
  Strides strides;

  static TensorDesc contiguous(DType dtype, const Shape& shape) { return {dtype, shape, contiguous_strides(shape)}; }

  int rank() const { return shape.rank(); }
  std::int64_t dim(int i) const { return shape[i]; }
  std::int64_t numel() const;  // valid descs only (see validate)
  bool is_contiguous() const;  // row-major, no gaps (dims of size 1 may have any stride)
  // Checks rank, non-negative dims, element count and the byte span of every
  // reachable element against overflow; `what` names the tensor in the message.
  Status validate(std::string_view what) const;
  // Bytes from the first to one past the last reachable element (0 when empty);
  // negative strides are not supported by Tessera views.
  std::int64_t span_bytes() const;
  bool operator==(const TensorDesc& o) const { return dtype == o.dtype && shape == o.shape && strides == o.strides; }
  std::string to_string() const;  // "f32[2, 3] strides [3, 1]"
};

}  // namespace tessera
