#include "tessera/core/aligned.hpp"

#include <cstdlib>

namespace tessera {

void* aligned_alloc_bytes(std::size_t bytes, std::size_t alignment) {
  void* p = nullptr;
  // posix_memalign accepts size 0; keep a valid, unique pointer for empty tensors.
  if (posix_memalign(&p, alignment, bytes == 0 ? alignment : bytes) != 0) return nullptr;
  return p;
}

void aligned_free(void* p) { std::free(p); }

}  // namespace tessera
