#pragma once
// Tensor: a strided view over shared storage. permute, transpose, reshape
// (where the strides allow it), slice and expand make new views and copy
// nothing; contiguous() copies only when the view is not already contiguous.
#include <cstddef>
#include <memory>
#include <span>

#include "tessera/core/shape.hpp"

namespace tessera {

// Bytes a tensor lives in: owned (64-byte aligned) or borrowed from the caller.
class Storage {
 public:
  static Result<std::shared_ptr<Storage>> allocate(std::int64_t bytes);
  // The caller keeps `data` alive and valid for `bytes` bytes as long as any tensor uses it.
  static std::shared_ptr<Storage> borrow(void* data, std::int64_t bytes);
  ~Storage();
  std::byte* data() const { return data_; }
  std::int64_t bytes() const { return bytes_; }

 private:
  Storage(std::byte* data, std::int64_t bytes, bool owned) : data_(data), bytes_(bytes), owned_(owned) {}
  std::byte* data_;
  std::int64_t bytes_;
  bool owned_;
};

class Tensor {
 public:
  Tensor() = default;
  // A new contiguous tensor; contents undefined (zeros() clears it).
  static Result<Tensor> empty(DType dtype, const Shape& shape);
  static Result<Tensor> zeros(DType dtype, const Shape& shape);
  // A view of caller-owned memory described by `desc`.
  static Result<Tensor> wrap(void* data, const TensorDesc& desc);

  bool defined() const { return storage_ != nullptr; }
  const TensorDesc& desc() const { return desc_; }
  DType dtype() const { return desc_.dtype; }
  const Shape& shape() const { return desc_.shape; }
  const Strides& strides() const { return desc_.strides; }
  int rank() const { return desc_.rank(); }
  std::int64_t dim(int i) const { return desc_.shape[i]; }
  std::int64_t numel() const { return desc_.numel(); }
  bool is_contiguous() const { return desc_.is_contiguous(); }

  // Address of element [0, ..., 0].
  void* data() const;
  template <class T>
  T* data_as() const { return static_cast<T*>(data()); }

  // Views. Each checks its arguments and names the one at fault.
  Result<Tensor> permute(std::span<const int> order) const;
  Result<Tensor> permute(std::initializer_list<int> order) const { return permute(std::span(order.begin(), order.size())); }
  Result<Tensor> transpose(int dim0, int dim1) const;
  // A view with the new shape; an error when the strides cannot express it
  // without a copy (call contiguous() first then). One dim may be -1.
  Result<Tensor> reshape(const Shape& shape) const;
  // Elements start, start+step, ... < end of `dim` (0 <= start <= end <= size, step >= 1).
  Result<Tensor> slice(int dim, std::int64_t start, std::int64_t end, std::int64_t step = 1) const;
  // Broadcast to `shape` (numpy rules): size-1 dims get stride 0, new leading dims too.
  Result<Tensor> expand(const Shape& shape) const;
  // This tensor if contiguous, else a contiguous copy.
  Result<Tensor> contiguous() const;

 private:
  Tensor(std::shared_ptr<Storage> storage, TensorDesc desc, std::int64_t offset)
      : storage_(std::move(storage)), desc_(std::move(desc)), offset_(offset) {}
  Result<Tensor> view(TensorDesc desc, std::int64_t offset) const;

  std::shared_ptr<Storage> storage_;
  TensorDesc desc_;
  std::int64_t offset_ = 0;  // in elements (i4: nibbles, kept even)
};

// Copies src into dst element by element (same dtype and shape, any strides).
Status copy(const Tensor& src, const Tensor& dst);

}  // namespace tessera
