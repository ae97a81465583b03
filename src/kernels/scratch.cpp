#include "kernels/scratch.hpp"

#include <cstdio>
#include <cstdlib>

#include "tessera/core/aligned.hpp"

namespace tessera::kernels {

void* thread_scratch(ScratchSlot slot, std::size_t bytes) {
  struct Buffer {
    AlignedBuffer data;
    std::size_t size = 0;
  };
  thread_local Buffer buffers[static_cast<int>(ScratchSlot::count)];
  Buffer& b = buffers[static_cast<int>(slot)];
  if (b.size < bytes) {
    b.data.reset();
    b.data.reset(aligned_alloc_bytes(bytes));
    if (!b.data) {
      std::fprintf(stderr, "tessera: out of memory for %zu bytes of kernel scratch\n", bytes);
      std::abort();
    }
    b.size = bytes;
  }
  return b.data.get();
}

}  // namespace tessera::kernels
