#include "tessera/core/aligned.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>

namespace tessera {

void* aligned_alloc_bytes(std::size_t bytes, std::size_t alignment) {
  void* p = nullptr;
  if (bytes >= kHugePage) {
    // Large buffers (weights, KV caches, activations) on 2 MiB pages where
    // the kernel allows it (transparent huge pages, "madvise" being the
    // common mode): one TLB entry covers 512x the bytes, which kernels
    // reading rows 4 KiB or more apart miss on every row (decode attention:
    // one head's K rows are a token apart), and streams are not cut at every
    // 4 KiB. AMD EPYC, Zen 4, alternating, tensors past the L3: bench
    // membound f32 relu 1 thread 25-26 -> 42-43 GB/s, add 21-23 -> 28-30,
    // rms_norm 20-26 -> 27-32, transpose_2d 2 threads 17-23 -> 28-30; bench
    // attention decode_b1_kv4096 cold f32 1 thread 9.9-10.2 -> 11.3-11.6
    // GB/s, 2 threads 17.7-18.8 -> 20.3-21.7.
    // Whole huge pages: at most 2 MiB more per buffer, which a touched huge
    // page may back (PyTorch's THP allocator rounds the same way from 2 MB).
    const std::size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    if (posix_memalign(&p, std::max(alignment, kHugePage), rounded) != 0) return nullptr;
    madvise(p, rounded, MADV_HUGEPAGE);  // advice: ignored where huge pages are off
    return p;
  }
  // posix_memalign accepts size 0; keep a valid, unique pointer for empty tensors.
  if (posix_memalign(&p, alignment, bytes == 0 ? alignment : bytes) != 0) return nullptr;
  return p;
}

void aligned_free(void* p) { std::free(p); }

}  // namespace tessera
