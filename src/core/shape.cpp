#include "tessera/core/shape.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace tessera {

Dims::Dims(std::initializer_list<std::int64_t> v) : Dims(std::span(v.begin(), v.size())) {}

Dims::Dims(std::span<const std::int64_t> v) {
  // Over-long lists keep kMaxRank + 1 as the rank marker so validate() reports them.
  rank_ = int(v.size()) > kMaxRank ? kMaxRank + 1 : int(v.size());
  for (int i = 0; i < std::min(rank_, kMaxRank); ++i) d_[i] = v[i];
}

Dims Dims::filled(int rank, std::int64_t value) {
  Dims d;
  d.rank_ = std::clamp(rank, 0, kMaxRank);
  for (int i = 0; i < d.rank_; ++i) d.d_[i] = value;
  return d;
}

void Dims::push_back(std::int64_t v) {
  if (rank_ < kMaxRank) d_[rank_] = v;
  rank_ = std::min(rank_ + 1, kMaxRank + 1);
}

bool Dims::operator==(const Dims& o) const {
  if (rank_ != o.rank_) return false;
  for (int i = 0; i < std::min(rank_, kMaxRank); ++i)
    if (d_[i] != o.d_[i]) return false;
  return true;
}

std::string Dims::to_string() const {
  if (rank_ > kMaxRank) return fmt::format("[rank > {}]", kMaxRank);
  return fmt::format("[{}]", fmt::join(span(), ", "));
}

Result<std::int64_t> checked_numel(const Shape& shape, std::string_view what) {
  if (shape.rank() > kMaxRank)
    return Status::invalid_argument(fmt::format("{}: rank must be at most {}", what, kMaxRank));
  std::int64_t n = 1;
  for (int i = 0; i < shape.rank(); ++i) {
    if (shape[i] < 0)
      return Status::invalid_argument(fmt::format("{}: dim {} is {}, expected >= 0 (shape {})", what, i, shape[i], shape.to_string()));
    if (__builtin_mul_overflow(n, shape[i], &n))
      return Status::out_of_range(fmt::format("{}: element count of shape {} overflows int64", what, shape.to_string()));
  }
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  const int rank = std::min(shape.rank(), kMaxRank);
  Strides s = Dims::filled(rank, 1);
  // Saturates instead of overflowing: validate() rejects such shapes anyway.
  for (int i = rank - 2; i >= 0; --i)
    if (__builtin_mul_overflow(s[i + 1], std::max<std::int64_t>(shape[i + 1], 1), &s[i])) s[i] = INT64_MAX;
  return s;
}

std::int64_t TensorDesc::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

bool TensorDesc::is_contiguous() const {
  std::int64_t expected = 1;
  for (int i = rank() - 1; i >= 0; --i) {
    if (shape[i] == 0) return true;
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

Status TensorDesc::validate(std::string_view what) const {
  if (shape.rank() > kMaxRank)
    return Status::invalid_argument(fmt::format("{}: rank must be at most {}", what, kMaxRank));
  if (strides.rank() != shape.rank())
    return Status::invalid_argument(
        fmt::format("{}: strides {} must have the rank of shape {}", what, strides.to_string(), shape.to_string()));
  TESSERA_ASSIGN_OR_RETURN(std::int64_t n, checked_numel(shape, what));
  if (n == 0) return {};
  std::int64_t last = 0;  // offset of the farthest element, in elements
  for (int i = 0; i < rank(); ++i) {
    if (strides[i] < 0)
      return Status::invalid_argument(fmt::format("{}: stride {} is {}, expected >= 0", what, i, strides[i]));
    std::int64_t reach = 0;
    if (__builtin_mul_overflow(shape[i] - 1, strides[i], &reach) || __builtin_add_overflow(last, reach, &last))
      return Status::out_of_range(fmt::format("{}: byte span of shape {} with strides {} overflows int64", what,
                                              shape.to_string(), strides.to_string()));
  }
  std::int64_t bits = 0;
  if (__builtin_add_overflow(last, 1, &last) || __builtin_mul_overflow(last, std::int64_t(bits_of(dtype)), &bits))
    return Status::out_of_range(fmt::format("{}: byte span overflows int64", what));
  if (dtype == DType::i4 && rank() > 0 && shape[rank() - 1] > 1 && strides[rank() - 1] != 1)
    return Status::unsupported(fmt::format("{}: i4 tensors need a contiguous last dim (stride 1), got stride {}", what,
                                           strides[rank() - 1]));
  return {};
}

std::int64_t TensorDesc::span_bytes() const {
  if (numel() == 0) return 0;
  std::int64_t last = 0;
  for (int i = 0; i < rank(); ++i) last += (shape[i] - 1) * strides[i];
  return ((last + 1) * bits_of(dtype) + 7) / 8;
}

std::string TensorDesc::to_string() const {
  return fmt::format("{}{} strides {}", tessera::to_string(dtype), shape.to_string(), strides.to_string());
}

}  // namespace tessera
