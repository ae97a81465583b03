#pragma once
// Per-thread scratch for kernels: packed panels of A and B, partial sums.
// A buffer grows to the largest request seen on its thread and is kept, so
// steady-state runs allocate nothing. Sizes are bounded by the tiling
// (a few MiB), so failure to get one is treated as fatal.
#include <cstddef>

namespace tessera::kernels {

enum class ScratchSlot { a_panel, b_panel, partial, panel_table, im2col, winograd, count };

// 64-byte aligned, at least `bytes` long, valid until the next call with this slot on this thread.
void* thread_scratch(ScratchSlot slot, std::size_t bytes);

}  // namespace tessera::kernels
