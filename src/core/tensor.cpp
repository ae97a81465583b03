#include "tessera/core/tensor.hpp"

#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "core/strided.hpp"
#include "tessera/core/aligned.hpp"

namespace tessera {

Result<std::shared_ptr<Storage>> Storage::allocate(std::int64_t bytes) {
  if (bytes < 0) return Status::invalid_argument(fmt::format("storage: size {} bytes, expected >= 0", bytes));
  void* p = aligned_alloc_bytes(std::size_t(bytes));
  if (!p) return Status::out_of_memory(fmt::format("storage: cannot allocate {} bytes", bytes));
  return std::shared_ptr<Storage>(new Storage(static_cast<std::byte*>(p), bytes, true));
}

std::shared_ptr<Storage> Storage::borrow(void* data, std::int64_t bytes) {
  return std::shared_ptr<Storage>(new Storage(static_cast<std::byte*>(data), bytes, false));
}

Storage::~Storage() {
  if (owned_) aligned_free(data_);
}

Result<Tensor> Tensor::empty(DType dtype, const Shape& shape) {
  TensorDesc desc = TensorDesc::contiguous(dtype, shape);
  TESSERA_RETURN_IF_ERROR(desc.validate("shape"));
  TESSERA_ASSIGN_OR_RETURN(auto storage, Storage::allocate(desc.span_bytes()));
  return Tensor(std::move(storage), std::move(desc), 0);
}

Result<Tensor> Tensor::zeros(DType dtype, const Shape& shape) {
  TESSERA_ASSIGN_OR_RETURN(Tensor t, empty(dtype, shape));
  std::memset(t.storage_->data(), 0, std::size_t(t.storage_->bytes()));
  return t;
}

Result<Tensor> Tensor::wrap(void* data, const TensorDesc& desc) {
  TESSERA_RETURN_IF_ERROR(desc.validate("desc"));
  if (data == nullptr && desc.numel() > 0) return Status::invalid_argument("data: null pointer for a non-empty tensor");
  return Tensor(Storage::borrow(data, desc.span_bytes()), desc, 0);
}

void* Tensor::data() const {
  if (!storage_) return nullptr;
  return storage_->data() + offset_ * bits_of(desc_.dtype) / 8;
}

Result<Tensor> Tensor::view(TensorDesc desc, std::int64_t offset) const {
  if (desc.dtype == DType::i4 && offset % 2 != 0)
    return Status::unsupported("i4 view: a view must start on a byte boundary (even element offset)");
  if (desc.dtype == DType::i4 && desc.rank() > 0 && desc.shape[desc.rank() - 1] > 1 && desc.strides[desc.rank() - 1] != 1)
    return Status::unsupported("i4 view: the last dim must stay contiguous (stride 1)");
  return Tensor(storage_, std::move(desc), offset);
}

namespace {
Status check_dim(const Tensor& t, int dim, std::string_view arg) {
  if (dim < 0 || dim >= t.rank())
    return Status::invalid_argument(fmt::format("{}: {} is out of range for a tensor of rank {}", arg, dim, t.rank()));
  return {};
}
}  // namespace

Result<Tensor> Tensor::permute(std::span<const int> order) const {
  if (int(order.size()) != rank())
    return Status::invalid_argument(fmt::format("order: has {} entries, expected the tensor's rank {}", order.size(), rank()));
  TensorDesc d{dtype(), Shape::filled(rank(), 0), Strides::filled(rank(), 0)};
  std::array<bool, kMaxRank> seen{};
  for (int i = 0; i < rank(); ++i) {
    TESSERA_RETURN_IF_ERROR(check_dim(*this, order[i], "order"));
    if (seen[order[i]]) return Status::invalid_argument(fmt::format("order: dim {} appears twice", order[i]));
    seen[order[i]] = true;
    d.shape[i] = shape()[order[i]];
    d.strides[i] = strides()[order[i]];
  }
  return view(std::move(d), offset_);
}

Result<Tensor> Tensor::transpose(int dim0, int dim1) const {
  TESSERA_RETURN_IF_ERROR(check_dim(*this, dim0, "dim0"));
  TESSERA_RETURN_IF_ERROR(check_dim(*this, dim1, "dim1"));
  std::array<int, kMaxRank> order{};
  for (int i = 0; i < rank(); ++i) order[i] = i;
  std::swap(order[dim0], order[dim1]);
  return permute(std::span<const int>(order.data(), std::size_t(rank())));
}

Result<Tensor> Tensor::reshape(const Shape& new_shape) const {
  if (new_shape.rank() > kMaxRank) return Status::invalid_argument(fmt::format("shape: rank must be at most {}", kMaxRank));
  // Resolve -1 and check the element count.
  Shape target = new_shape;
  int infer = -1;
  std::int64_t known = 1;
  for (int i = 0; i < target.rank(); ++i) {
    if (target[i] == -1) {
      if (infer >= 0) return Status::invalid_argument("shape: only one dim may be -1");
      infer = i;
    } else if (target[i] < 0) {
      return Status::invalid_argument(fmt::format("shape: dim {} is {}, expected >= 0 or -1", i, target[i]));
    } else if (__builtin_mul_overflow(known, target[i], &known)) {
      return Status::out_of_range(fmt::format("shape: element count of {} overflows int64", target.to_string()));
    }
  }
  const std::int64_t n = numel();
  if (infer >= 0) {
    if (known == 0 || n % known != 0)
      return Status::invalid_argument(fmt::format("shape: cannot infer -1 in {} for {} elements", target.to_string(), n));
    target[infer] = n / known;
  } else if (known != n) {
    return Status::invalid_argument(
        fmt::format("shape: {} has {} elements, the tensor {} has {}", target.to_string(), known, shape().to_string(), n));
  }
  if (n == 0) return view(TensorDesc::contiguous(dtype(), target), offset_);

  // Walk old dims in chunks that are contiguous among themselves; each chunk
  // must be covered exactly by a run of new dims, which then get strides
  // inside that chunk. Otherwise the view needs a copy.
  Strides out = Strides::filled(target.rank(), 0);
  int oi = rank() - 1, ni = target.rank() - 1;
  while (oi >= 0 || ni >= 0) {
    // Skip size-1 dims on both sides.
    if (oi >= 0 && shape()[oi] == 1) { --oi; continue; }
    if (ni >= 0 && target[ni] == 1) { out[ni] = 1; --ni; continue; }
    if (oi < 0 || ni < 0) break;
    // Chunk: old dims [lo, oi] contiguous with each other.
    std::int64_t chunk = shape()[oi];
    const std::int64_t base_stride = strides()[oi];
    int lo = oi, last = oi;  // `last`: innermost non-1 dim merged so far
    while (lo > 0) {
      const int j = lo - 1;
      if (shape()[j] != 1) {
        std::int64_t next = 0;
        if (__builtin_mul_overflow(strides()[last], shape()[last], &next) || strides()[j] != next) break;
        chunk *= shape()[j];
        last = j;
      }
      lo = j;
    }
    // Consume new dims until their product reaches chunk.
    std::int64_t prod = 1, stride = base_stride;
    while (ni >= 0 && prod < chunk) {
      out[ni] = stride;
      stride *= target[ni];
      prod *= target[ni];
      --ni;
    }
    if (prod != chunk)
      return Status::invalid_argument(fmt::format("shape: {} cannot be a view of strides {} (call contiguous() first)",
                                                  target.to_string(), strides().to_string()));
    oi = lo - 1;
  }
  return view(TensorDesc{dtype(), target, out}, offset_);
}

Result<Tensor> Tensor::slice(int dim, std::int64_t start, std::int64_t end, std::int64_t step) const {
  TESSERA_RETURN_IF_ERROR(check_dim(*this, dim, "dim"));
  const std::int64_t size = shape()[dim];
  if (step < 1) return Status::invalid_argument(fmt::format("step: {} is not >= 1", step));
  if (start < 0 || start > size)
    return Status::out_of_range(fmt::format("start: {} is outside [0, {}] for dim {}", start, size, dim));
  if (end < start || end > size)
    return Status::out_of_range(fmt::format("end: {} is outside [start={}, {}] for dim {}", end, start, size, dim));
  TensorDesc d = desc_;
  d.shape[dim] = end == start ? 0 : (end - start - 1) / step + 1;
  // With one element or none the stride is never applied: keep it, and do
  // not let a huge step overflow it.
  if (d.shape[dim] > 1 && __builtin_mul_overflow(strides()[dim], step, &d.strides[dim]))
    return Status::out_of_range(fmt::format("step: {} times stride {} overflows int64", step, strides()[dim]));
  return view(std::move(d), offset_ + start * strides()[dim]);
}

Result<Tensor> Tensor::expand(const Shape& target) const {
  if (target.rank() < rank() || target.rank() > kMaxRank)
    return Status::invalid_argument(fmt::format("shape: {} has lower rank than the tensor {}", target.to_string(), shape().to_string()));
  if (dtype() == DType::i4) return Status::unsupported("shape: i4 tensors cannot be broadcast");
  TensorDesc d{dtype(), target, Strides::filled(target.rank(), 0)};
  const int lead = target.rank() - rank();
  for (int i = 0; i < target.rank(); ++i) {
    if (target[i] < 0) return Status::invalid_argument(fmt::format("shape: dim {} is {}, expected >= 0", i, target[i]));
    if (i < lead) continue;
    const std::int64_t have = shape()[i - lead];
    if (have == target[i]) {
      d.strides[i] = strides()[i - lead];
    } else if (have != 1) {
      return Status::invalid_argument(
          fmt::format("shape: cannot broadcast {} to {} (dim {}: {} vs {})", shape().to_string(), target.to_string(), i, have, target[i]));
    }
  }
  return view(std::move(d), offset_);
}

Result<Tensor> Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  TESSERA_ASSIGN_OR_RETURN(Tensor out, empty(dtype(), shape()));
  TESSERA_RETURN_IF_ERROR(copy(*this, out));
  return out;
}

Status copy(const Tensor& src, const Tensor& dst) {
  if (!src.defined() || !dst.defined()) return Status::invalid_argument("copy: src and dst must be defined tensors");
  if (src.dtype() != dst.dtype())
    return Status::invalid_argument(fmt::format("dst: dtype {} differs from src dtype {}", to_string(dst.dtype()), to_string(src.dtype())));
  if (!(src.shape() == dst.shape()))
    return Status::invalid_argument(fmt::format("dst: shape {} differs from src shape {}", dst.shape().to_string(), src.shape().to_string()));
  if (src.numel() == 0) return {};
  auto loop = detail::collapse<2>(src.shape(), {src.strides(), dst.strides()});
  if (loop.rank == 0) {  // a single element
    loop.rank = 1;
    loop.shape[0] = 1;
    loop.strides[0][0] = loop.strides[1][0] = 1;
  }
  const int r = loop.rank - 1;
  const std::int64_t inner = loop.shape[r], ss = loop.strides[0][r], ds = loop.strides[1][r];
  const std::int64_t outer = loop.numel() / inner;
  auto* s = static_cast<const std::byte*>(src.data());
  auto* d = static_cast<std::byte*>(dst.data());
  if (src.dtype() == DType::i4) {
    // i4 views always keep a contiguous, byte-aligned last dim.
    if (ss != 1 || ds != 1 || loop.rank > 1 || inner % 2 != 0)
      return Status::unsupported("copy: i4 tensors are copied only when both are contiguous with an even element count");
    std::memcpy(d, s, std::size_t(inner / 2));
    return {};
  }
  const std::int64_t esize = bits_of(src.dtype()) / 8;
  loop.rank = r;  // the outer dims
  for (std::int64_t o = 0; o < outer; ++o) {
    const auto off = loop.offsets(o);
    const std::byte* sp = s + off[0] * esize;
    std::byte* dp = d + off[1] * esize;
    if (ss == 1 && ds == 1) {
      std::memmove(dp, sp, std::size_t(inner * esize));
    } else {
      for (std::int64_t i = 0; i < inner; ++i) std::memcpy(dp + i * ds * esize, sp + i * ss * esize, std::size_t(esize));
    }
  }
  return {};
}

}  // namespace tessera
