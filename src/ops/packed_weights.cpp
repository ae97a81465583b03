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

// Quantized weights being packed: their buffers sized for the spec, and the
// writers of each group's parameters and each stored value into the layout.
class QuantizedPacker {
 public:
  static Result<QuantizedPacker> make(std::int64_t k, std::int64_t n, const QuantSpec& spec) {
    QuantizedPacker p(k, n, spec);
    PackedWeights& w = *p.w_;
    const std::int64_t value_bytes = kernels::packed_value_bytes(spec.dtype, k, n), n_pad = kernels::padded_n(n);
    const std::int64_t scale_bytes = p.groups_ * n_pad * bytes_of(spec.scale_dtype), zero_bytes = spec.zero_points ? p.groups_ * n_pad : 0;
    const bool offsets = !p.i4_ && !spec.zero_points;
    const std::int64_t offset_bytes = offsets ? n_pad * std::int64_t(sizeof(std::int32_t)) : 0;
    w.bytes_ = value_bytes + scale_bytes + zero_bytes + offset_bytes;
    TESSERA_ASSIGN_OR_RETURN(w.values_, zeroed(value_bytes));
    TESSERA_ASSIGN_OR_RETURN(w.scales_, zeroed(scale_bytes));
    if (spec.zero_points) {
      TESSERA_ASSIGN_OR_RETURN(w.zeros_, zeroed(zero_bytes));
    }
    if (offsets) {
      TESSERA_ASSIGN_OR_RETURN(w.column_offsets_, zeroed(offset_bytes));
    }
    return p;
  }

  std::int64_t groups() const { return groups_; }
  // Stores group g's scale of column n in the scale dtype; returns it as stored.
  float scale(std::int64_t g, std::int64_t n, float s) {
    const std::int64_t param = kernels::group_param_index(groups_, g, n);
    store(w_->scales_.get(), w_->quant_.scale_dtype, param, s);
    return load(w_->scales_.get(), w_->quant_.scale_dtype, param);
  }
  void zero(std::int64_t g, std::int64_t n, int z) { static_cast<std::uint8_t*>(w_->zeros_.get())[kernels::group_param_index(groups_, g, n)] = std::uint8_t(z); }
  // q of (k, n): symmetric int8 -127..127, int4 -8..7; with zero points unsigned.
  void value(std::int64_t k, std::int64_t n, int q) {
    std::uint8_t& byte = static_cast<std::uint8_t*>(w_->values_.get())[at_.row[std::size_t(k)] + at_.col[std::size_t(n)]];
    if (i4_) {
      const int stored = w_->quant_.zero_points ? q : q + 8;
      byte = std::uint8_t(n % kernels::kPanelCols < 16 ? (byte & 0xf0) | stored : (byte & 0x0f) | (stored << 4));
    } else {
      byte = std::uint8_t(q);
      if (auto* offsets = static_cast<std::int32_t*>(w_->column_offsets_.get())) offsets[n] += 128 * q;
    }
  }
  WeightsPtr done() { return WeightsPtr(std::move(w_)); }

 private:
  QuantizedPacker(std::int64_t k, std::int64_t n, const QuantSpec& spec)
      : w_(new PackedWeights()),
        groups_(k / (spec.group_size == 0 ? k : spec.group_size)),
        i4_(spec.dtype == DType::i4),
        at_(k, n, [k_pad = kernels::padded_k(spec.dtype, k), i4 = i4_](std::int64_t kk, std::int64_t nn) {
          return i4 ? kernels::i4_byte_index(k_pad, kk, nn) : kernels::tile_packed_index(DType::i8, k_pad, kk, nn);
        }) {
    w_->k_ = k, w_->n_ = n, w_->dtype_ = spec.dtype, w_->quant_ = spec;
  }
  std::shared_ptr<PackedWeights> w_;
  std::int64_t groups_;
  bool i4_;
  PackedIndex at_;
};

namespace {

Status check_quant_types(DType dtype, DType scale_dtype, std::string_view dtype_name, std::string_view scale_name) {
  if (dtype != DType::i8 && dtype != DType::i4)
    return Status::invalid_argument(fmt::format("{}: {} is not a weight quantization type, expected i8 or i4", dtype_name, to_string(dtype)));
  if (!is_floating(scale_dtype))
    return Status::invalid_argument(fmt::format("{}: {} must be f32, f16 or bf16", scale_name, to_string(scale_dtype)));
  return {};
}

}  // namespace

Result<WeightsPtr> quantize_weights(const Tensor& b, const QuantSpec& spec) {
  TESSERA_RETURN_IF_ERROR(check_weight(b));
  TESSERA_RETURN_IF_ERROR(check_quant_types(spec.dtype, spec.scale_dtype, "spec.dtype", "spec.scale_dtype"));
  const std::int64_t k = b.dim(0), n = b.dim(1), group = spec.group_size == 0 ? k : spec.group_size;
  if (group < 1 || k % group != 0)
    return Status::invalid_argument(fmt::format("spec.group_size: {} must be 0 (per channel) or a positive divisor of K = {}", spec.group_size, k));
  const bool i4 = spec.dtype == DType::i4;
  // Symmetric: q in [-qmax - 1, qmax] (int8 uses -127..127); asymmetric: q in [0, levels].
  const float qmax = i4 ? 7.0f : 127.0f, levels = i4 ? 15.0f : 255.0f;
  TESSERA_ASSIGN_OR_RETURN(QuantizedPacker packer, QuantizedPacker::make(k, n, spec));

  // Group by group, rows in order (b is usually row-major [K, N]): first
  // each column's range, then its scale and zero point, then the values.
  const auto cols = static_cast<std::size_t>(n);
  std::vector<float> lo(cols), hi(cols), scale(cols);
  std::vector<int> zero(cols);
  std::vector<float> row(cols);
  for (std::int64_t g = 0; g < packer.groups(); ++g) {
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
      scale[nn] = packer.scale(g, nn, range > 0.0f ? range : 1.0f);
      zero[nn] = spec.zero_points ? kernels::quantize_value(-lo[nn], scale[nn], 0, 0, int(levels)) : 0;
      if (spec.zero_points) packer.zero(g, nn, zero[nn]);
    }
    for (std::int64_t kk = g * group; kk < (g + 1) * group; ++kk) {
      row_of(b, kk, row);
      for (std::int64_t nn = 0; nn < n; ++nn) {
        const float v = row[std::size_t(nn)];
        packer.value(kk, nn, spec.zero_points ? kernels::quantize_value(v, scale[nn], zero[nn], 0, int(levels))
                                              : kernels::quantize_value(v, scale[nn], 0, -int(qmax) - (i4 ? 1 : 0), int(qmax)));
      }
    }
  }
  return packer.done();
}

Result<WeightsPtr> pack_quantized_weights(DType dtype, const Tensor& q, const Tensor& scales, const Tensor& zero_points) {
  const bool zp = zero_points.defined();
  for (const auto& [t, name] : {std::pair{&q, "q"}, std::pair{&scales, "scales"}}) {
    if (!t->defined()) return Status::invalid_argument(fmt::format("{}: undefined tensor", name));
    TESSERA_RETURN_IF_ERROR(t->desc().validate(name));
    TESSERA_RETURN_IF_ERROR(check_rank(t->desc(), name, 2, 2));
  }
  TESSERA_RETURN_IF_ERROR(check_quant_types(dtype, scales.dtype(), "dtype", "scales"));
  const DType q_type = zp ? DType::u8 : DType::i8;
  if (q.dtype() != q_type)
    return Status::invalid_argument(fmt::format("q: dtype {} must be {} ({})", to_string(q.dtype()), to_string(q_type),
                                                zp ? "unsigned values with zero points" : "signed values without zero points"));
  const std::int64_t k = q.dim(0), n = q.dim(1), groups = scales.dim(0);
  if (k < 1 || n < 1) return Status::invalid_argument(fmt::format("q: shape {} must have K >= 1 and N >= 1", q.shape().to_string()));
  if (groups < 1 || k % groups != 0 || scales.dim(1) != n)
    return Status::invalid_argument(fmt::format("scales: shape {} must be [groups, N = {}] with groups dividing K = {}", scales.shape().to_string(), n, k));
  if (zp) {
    TESSERA_RETURN_IF_ERROR(zero_points.desc().validate("zero_points"));
    if (zero_points.dtype() != DType::u8 || zero_points.shape() != scales.shape())
      return Status::invalid_argument(fmt::format("zero_points: {} {} must be u8 shaped like scales, {}", to_string(zero_points.dtype()),
                                                  zero_points.shape().to_string(), scales.shape().to_string()));
  }
  const bool i4 = dtype == DType::i4;
  // The ranges quantize_weights produces, which the integer rows are written
  // and tested for: symmetric int8 -127..127 (the AVX2 W8A8 row's exactness
  // argument, matmul_int8.cpp, takes |q| <= 127), int4 -8..7.
  const int lo = zp ? 0 : i4 ? -8 : -127, hi = zp ? (i4 ? 15 : 255) : (i4 ? 7 : 127);
  // Row i of q or of the zero points as ints, checked against the range.
  std::vector<int> row(static_cast<std::size_t>(n));
  const auto read_row = [&](const Tensor& t, std::string_view name, std::int64_t i) -> Status {
    const std::int64_t s0 = t.strides()[0], s1 = t.strides()[1];
    const auto copy = [&](const auto* p) {
      for (std::int64_t j = 0; j < n; ++j) row[std::size_t(j)] = p[i * s0 + j * s1];
    };
    t.dtype() == DType::u8 ? copy(t.data_as<std::uint8_t>()) : copy(t.data_as<std::int8_t>());
    for (std::int64_t j = 0; j < n; ++j)
      if (const int v = row[std::size_t(j)]; v < lo || v > hi)
        return Status::invalid_argument(fmt::format("{}: element [{}, {}] is {}, outside {}'s {} range [{}, {}]{}", name, i, j, v, to_string(dtype),
                                                    zp ? "unsigned" : "symmetric", lo, hi,
                                                    !zp && !i4 && v == -128 ? " (for -128: q + 128 as u8 with zero points 128)" : ""));
    return {};
  };
  const QuantSpec spec{.dtype = dtype, .group_size = groups == 1 ? 0 : k / groups, .scale_dtype = scales.dtype(), .zero_points = zp};
  TESSERA_ASSIGN_OR_RETURN(QuantizedPacker packer, QuantizedPacker::make(k, n, spec));
  for (std::int64_t g = 0; g < groups; ++g) {
    for (std::int64_t nn = 0; nn < n; ++nn) {
      const float s = tessera::detail::load(scales.data(), scales.dtype(), g * scales.strides()[0] + nn * scales.strides()[1]);
      if (!std::isfinite(s)) return Status::invalid_argument(fmt::format("scales: element [{}, {}] is {}; scales must be finite", g, nn, s));
      packer.scale(g, nn, s);
    }
    if (zp) {
      TESSERA_RETURN_IF_ERROR(read_row(zero_points, "zero_points", g));
      for (std::int64_t nn = 0; nn < n; ++nn) packer.zero(g, nn, row[std::size_t(nn)]);
    }
  }
  for (std::int64_t kk = 0; kk < k; ++kk) {
    TESSERA_RETURN_IF_ERROR(read_row(q, "q", kk));
    for (std::int64_t nn = 0; nn < n; ++nn) packer.value(kk, nn, row[std::size_t(nn)]);
  }
  return packer.done();
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
