// Weights packed once into the kernels' panel layouts (see
// src/kernels/packed_weights.hpp), and group-wise int8 / int4 quantization.
// One-time work, row by row of B: each row read as f32 once (its dtype
// switched once), and the packed index of (k, n) as the index of (k, 0)
// plus that of (0, n), which every layout's index is. Element by element
// (a switch on the dtype and the index worked out afresh per weight) this
// took 8-16 ns a weight, minutes for a 7B model.
#include <cmath>
#include <vector>

#include "core/element.hpp"
#include "kernels/packed_weights.hpp"
#include "kernels/quantize.hpp"
#include "ops/common.hpp"
#include "tessera/core/aligned.hpp"
#include "tessera/ops/matmul.hpp"

namespace tessera::ops {

using namespace detail;
using tessera::detail::load;
using tessera::detail::store;

namespace {

Result<std::shared_ptr<void>> zeroed(std::int64_t bytes) {
  void* p = aligned_alloc_bytes(std::size_t(std::max<std::int64_t>(bytes, 1)));
  if (!p) return Status::out_of_memory(fmt::format("w: cannot allocate {} bytes for packed weights", bytes));
  std::memset(p, 0, std::size_t(bytes));
  return std::shared_ptr<void>(p, aligned_free);
}

Status check_weight(const Tensor& b) {
  if (!b.defined()) return Status::invalid_argument("b: undefined tensor");
  TESSERA_RETURN_IF_ERROR(b.desc().validate("b"));
  TESSERA_RETURN_IF_ERROR(check_float(b.desc(), "b"));
  TESSERA_RETURN_IF_ERROR(check_rank(b.desc(), "b", 2, 2));
  if (b.dim(0) < 1 || b.dim(1) < 1)
    return Status::invalid_argument(fmt::format("b: shape {} must have K >= 1 and N >= 1", b.shape().to_string()));
  return {};
}

// Row k of b as f32.
void row_of(const Tensor& b, std::int64_t k, std::vector<float>& row) {
  tessera::detail::load_floats(b.data(), b.dtype(), k * b.strides()[0], b.strides()[1], b.dim(1), row.data());
}

// The packed index of (k, n) is row[k] + col[n]: the offsets of (k, 0) and (0, n).
struct PackedIndex {
  std::vector<std::int64_t> row, col;
  template <class Index>
  PackedIndex(std::int64_t k, std::int64_t n, Index&& index) : row(std::size_t(k)), col(std::size_t(n)) {
    for (std::int64_t i = 0; i < k; ++i) row[std::size_t(i)] = index(i, 0);
    for (std::int64_t j = 0; j < n; ++j) col[std::size_t(j)] = index(0, j);
  }
};

}  // namespace

Result<WeightsPtr> pack_weights(const Tensor& b, DType dtype) {
  TESSERA_RETURN_IF_ERROR(check_weight(b));
  if (dtype != DType::f32 && dtype != DType::bf16)
    return Status::invalid_argument(fmt::format("dtype: {} cannot be packed, expected f32 or bf16 (int8 / int4: quantize_weights)", to_string(dtype)));
  const std::int64_t k = b.dim(0), n = b.dim(1);
  std::shared_ptr<PackedWeights> w(new PackedWeights());
  w->k_ = k, w->n_ = n, w->dtype_ = dtype;
  w->quant_.group_size = 0;  // not quantized: group_size() is K
  w->bytes_ = kernels::packed_value_bytes(dtype, k, n);
  TESSERA_ASSIGN_OR_RETURN(w->values_, zeroed(w->bytes_));
  void* v = w->values_.get();
  const std::int64_t k_pad = kernels::padded_k(dtype, k);
  const PackedIndex at(k, n, [&](std::int64_t kk, std::int64_t nn) {
    return dtype == DType::f32 ? (nn / kernels::kPanelCols * k + kk) * kernels::kPanelCols + nn % kernels::kPanelCols
                               : kernels::tile_packed_index(dtype, k_pad, kk, nn);
  });
  std::vector<float> row(std::size_t(n), 0.0f);
  for (std::int64_t kk = 0; kk < k; ++kk) {
    row_of(b, kk, row);
    const std::int64_t r = at.row[std::size_t(kk)];
    if (dtype == DType::f32)
      for (std::int64_t nn = 0; nn < n; ++nn) static_cast<float*>(v)[r + at.col[std::size_t(nn)]] = row[std::size_t(nn)];
    else
      for (std::int64_t nn = 0; nn < n; ++nn) static_cast<bf16_t*>(v)[r + at.col[std::size_t(nn)]] = f32_to_bf16(row[std::size_t(nn)]);
  }
  return WeightsPtr(std::move(w));
}

Result<WeightsPtr> quantize_weights(const Tensor& b, const QuantSpec& spec) {
  TESSERA_RETURN_IF_ERROR(check_weight(b));
  if (spec.dtype != DType::i8 && spec.dtype != DType::i4)
    return Status::invalid_argument(fmt::format("spec.dtype: {} is not a weight quantization type, expected i8 or i4", to_string(spec.dtype)));
  if (!is_floating(spec.scale_dtype))
    return Status::invalid_argument(fmt::format("spec.scale_dtype: {} must be f32, f16 or bf16", to_string(spec.scale_dtype)));
  const std::int64_t k = b.dim(0), n = b.dim(1), group = spec.group_size == 0 ? k : spec.group_size;
  if (group < 1 || k % group != 0)
    return Status::invalid_argument(fmt::format("spec.group_size: {} must be 0 (per channel) or a positive divisor of K = {}", spec.group_size, k));
  const std::int64_t groups = k / group, n_pad = kernels::padded_n(n);
  const bool i4 = spec.dtype == DType::i4;
  // Symmetric: q in [-qmax - 1, qmax] (int8 uses -127..127); asymmetric: q in [0, levels].
  const float qmax = i4 ? 7.0f : 127.0f, levels = i4 ? 15.0f : 255.0f;

  std::shared_ptr<PackedWeights> w(new PackedWeights());
  w->k_ = k, w->n_ = n, w->dtype_ = spec.dtype, w->quant_ = spec;
  const std::int64_t value_bytes = kernels::packed_value_bytes(spec.dtype, k, n);
  const std::int64_t scale_bytes = groups * n_pad * bytes_of(spec.scale_dtype), zero_bytes = spec.zero_points ? groups * n_pad : 0;
  const bool offsets = !i4 && !spec.zero_points;
  const std::int64_t offset_bytes = offsets ? n_pad * std::int64_t(sizeof(std::int32_t)) : 0;
  w->bytes_ = value_bytes + scale_bytes + zero_bytes + offset_bytes;
  TESSERA_ASSIGN_OR_RETURN(w->values_, zeroed(value_bytes));
  TESSERA_ASSIGN_OR_RETURN(w->scales_, zeroed(scale_bytes));
  if (spec.zero_points) {
    TESSERA_ASSIGN_OR_RETURN(w->zeros_, zeroed(zero_bytes));
  }
  if (offsets) {
    TESSERA_ASSIGN_OR_RETURN(w->column_offsets_, zeroed(offset_bytes));
  }
  auto* column_offsets = static_cast<std::int32_t*>(w->column_offsets_.get());
  auto* values = static_cast<std::uint8_t*>(w->values_.get());
  auto* zeros = static_cast<std::uint8_t*>(w->zeros_.get());

  // Group by group, rows in order (b is usually row-major [K, N]): first
  // each column's range, then its scale and zero point, then the values.
  const auto cols = static_cast<std::size_t>(n);
  std::vector<float> lo(cols), hi(cols), scale(cols);
  std::vector<int> zero(cols);
  const std::int64_t k_pad = kernels::padded_k(spec.dtype, k);
  const PackedIndex at(k, n, [&](std::int64_t kk, std::int64_t nn) {
    return i4 ? kernels::i4_byte_index(k_pad, kk, nn) : kernels::tile_packed_index(DType::i8, k_pad, kk, nn);
  });
  std::vector<float> row(cols);
  for (std::int64_t g = 0; g < groups; ++g) {
    std::fill(lo.begin(), lo.end(), 0.0f);  // the range always holds 0, so 0 is exact
    std::fill(hi.begin(), hi.end(), 0.0f);
    for (std::int64_t kk = g * group; kk < (g + 1) * group; ++kk) {
      row_of(b, kk, row);
      for (std::int64_t nn = 0; nn < n; ++nn) {
        const float v = row[std::size_t(nn)];
        if (!std::isfinite(v))
          return Status::invalid_argument(fmt::format("b: element [{}, {}] is {}; weights to quantize must be finite", kk, nn, v));
        lo[nn] = std::min(lo[nn], v), hi[nn] = std::max(hi[nn], v);
      }
    }
    for (std::int64_t nn = 0; nn < n; ++nn) {
      const float range = spec.zero_points ? (hi[nn] - lo[nn]) / levels : std::max(hi[nn], -lo[nn]) / qmax;
      // Stored in the scale dtype first: quantization uses the scale the kernels will read.
      const std::int64_t param = kernels::group_param_index(groups, g, nn);
      store(w->scales_.get(), spec.scale_dtype, param, range > 0.0f ? range : 1.0f);
      scale[nn] = load(w->scales_.get(), spec.scale_dtype, param);
      zero[nn] = spec.zero_points ? kernels::quantize_value(-lo[nn], scale[nn], 0, 0, int(levels)) : 0;
      if (spec.zero_points) zeros[param] = std::uint8_t(zero[nn]);
    }
    for (std::int64_t kk = g * group; kk < (g + 1) * group; ++kk) {
      row_of(b, kk, row);
      std::uint8_t* out = values + at.row[std::size_t(kk)];
      for (std::int64_t nn = 0; nn < n; ++nn) {
        const float v = row[std::size_t(nn)];
        const int stored = spec.zero_points ? kernels::quantize_value(v, scale[nn], zero[nn], 0, int(levels))
                                            : kernels::quantize_value(v, scale[nn], 0, -int(qmax) - (i4 ? 1 : 0), int(qmax)) + (i4 ? 8 : 0);
        std::uint8_t& byte = out[at.col[std::size_t(nn)]];
        if (i4) {
          byte = std::uint8_t(nn % kernels::kPanelCols < 16 ? (byte & 0xf0) | stored : (byte & 0x0f) | (stored << 4));
        } else {
          byte = std::uint8_t(stored);
          if (offsets) column_offsets[nn] += 128 * stored;
        }
      }
    }
  }
  return WeightsPtr(std::move(w));
}

Result<Tensor> PackedWeights::unpack() const {
  TESSERA_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(DType::f32, {k_, n_}));
  const kernels::PackedB p{dtype_, k_, n_, values(), scales(), quant_.scale_dtype, zeros(), group_size()};
  auto* o = out.data_as<float>();
  for (std::int64_t kk = 0; kk < k_; ++kk)
    for (std::int64_t nn = 0; nn < n_; ++nn) o[kk * n_ + nn] = kernels::packed_value(p, kk, nn);
  return out;
}

}  // namespace tessera::ops
