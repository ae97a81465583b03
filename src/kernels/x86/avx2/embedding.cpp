#include "core/element.hpp"
#include "kernels/embedding.hpp"
#include "kernels/x86/avx2/vec.hpp"

namespace tessera::kernels::avx2 {

// Whole rows (unit column strides: see the row's supports()), 32 bytes at a
// time, streamed past the L3 where a row's start allows. Rows lie a
// vocabulary apart in the order the ids give, where the hardware prefetcher
// cannot know the next one: each 64 bytes of a row go out while the same 64
// bytes of the next id's row are requested.
void embedding(const EmbeddingArgs& a, std::int64_t i0, std::int64_t i1) {
  const std::int64_t elt = bytes_of(a.table_dtype), bytes = a.cols * elt;
  const auto row = [&](std::int64_t i) {
    return static_cast<const char*>(a.table) + tessera::detail::load_index(a.ids, a.ids_dtype, i * a.ids_stride) * a.table_row_stride * elt;
  };
  const char* src = i0 < i1 ? row(i0) : nullptr;
  for (std::int64_t i = i0; i < i1; ++i) {
    const char* next = i + 1 < i1 ? row(i + 1) : src;
    char* dst = static_cast<char*>(a.out) + i * a.out_row_stride * elt;
    copy_bytes(dst, src, bytes, a.stream_out, [&](std::int64_t b) { _mm_prefetch(next + b, _MM_HINT_T0); });
    src = next;
  }
  if (a.stream_out) _mm_sfence();
}

}  // namespace tessera::kernels::avx2
