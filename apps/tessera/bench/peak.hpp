#pragma once
// Compute peaks measured in the bench's own run: FMA f32 (AVX-512), AMX bf16
// and AMX int8, with every thread of the context busy. They move 2-3x from
// minute to minute on shared machines, so "% of peak" is only meaningful
// against a peak measured next to the GEMMs it judges.
#include <map>

#include "tessera/runtime/context.hpp"

namespace tessera::app::bench {

struct Peaks {
  double fma_f32 = 0, amx_bf16 = 0, amx_int8 = 0;  // GFLOP/s (GOP/s for int8); 0: unit absent
};

Peaks measure_peaks(Context& ctx);

}  // namespace tessera::app::bench
