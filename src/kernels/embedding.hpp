#pragma once
// Embedding gather family: out[i, :] = table[ids[i], :] for ids [i0, i1).
// Ids are checked by the op layer before any row is copied.
#include <cstdint>
#include <span>

#include "kernels/registry.hpp"
#include "kernels/tiling.hpp"
#include "tessera/core/dtype.hpp"

namespace tessera::kernels {

struct EmbeddingProblem {
  DType table, out, ids;
  std::int64_t n;    // elements of out
  bool unit_stride;  // table rows and out rows with unit column strides
};

struct EmbeddingArgs {
  DType table_dtype, ids_dtype;
  std::int64_t cols;
  const void* ids;
  std::int64_t ids_stride;
  const void* table;
  std::int64_t table_row_stride, table_col_stride;
  void* out;
  std::int64_t out_row_stride, out_col_stride;
  bool stream_out;  // streaming stores for out (EmbeddingTiling::stream_output)
};

struct EmbeddingTiling {
  std::int64_t ids_per_task;
  bool stream_output;  // out is larger than the L3
};

struct EmbeddingFamily {
  using Problem = EmbeddingProblem;
  using Tiling = EmbeddingTiling;
  using Run = void (*)(const EmbeddingArgs&, std::int64_t i0, std::int64_t i1);
};

std::span<const KernelRow<EmbeddingFamily>> rows(EmbeddingFamily);

namespace ref { void embedding(const EmbeddingArgs& a, std::int64_t i0, std::int64_t i1); }
namespace avx2 { void embedding(const EmbeddingArgs& a, std::int64_t i0, std::int64_t i1); }

}  // namespace tessera::kernels
