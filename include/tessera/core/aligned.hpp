#pragma once
// 64-byte aligned allocation: a cache line and one AVX-512 register.
#include <cstddef>
#include <memory>

namespace tessera {

inline constexpr std::size_t kAlignment = 64;
// From this size on, buffers start on a 2 MiB boundary and are advised onto
// 2 MiB pages (aligned.cpp).
inline constexpr std::size_t kHugePage = std::size_t(2) << 20;

// Returns nullptr when the memory cannot be had; release with aligned_free.
void* aligned_alloc_bytes(std::size_t bytes, std::size_t alignment = kAlignment);
void aligned_free(void* p);

struct AlignedDeleter {
  void operator()(void* p) const { aligned_free(p); }
};
using AlignedBuffer = std::unique_ptr<void, AlignedDeleter>;

}  // namespace tessera
