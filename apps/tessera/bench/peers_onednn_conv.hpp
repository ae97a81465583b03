#pragma once
// oneDNN's convolution as the peer of `bench conv` (built only with TESSERA_HAVE_ONEDNN).
#include "bench/peers_onednn.hpp"
#include "tessera/ops/conv.hpp"

namespace tessera::app::bench {

// y = conv(x, w) by oneDNN on the caller's tensors (their data become oneDNN
// memory objects, so they must outlive the call), in its best case: x
// [N, H, W, C] and y [N, OH, OW, Cout] contiguous NHWC (format_tag::nhwc),
// f32 or bf16 alike; w the f32 weights [Cout, C, KH, KW] (OIHW), reordered
// here, once, into the layout and type the primitive picks (format_tag::any).
// The epilogue as oneDNN's own: the bias (f32 [Cout]) as the convolution's,
// activation silu as an eltwise swish post-op (alpha 1), the residual as a
// sum post-op — which adds what y holds, so the residual must be y itself.
// attrs.upsample_nearest2x: a resampling primitive (nearest) first, into a
// [N, 2H, 2W, C] buffer of its own (oneDNN fuses no resize into a
// convolution). groups must be 1 and the epilogue's scale 1. The primitives
// are made for `threads` OpenMP threads.
Result<OnednnCall> make_onednn_conv(const Tensor& x, const Tensor& w, const Tensor& y, const ops::ConvAttrs& attrs,
                                    const ops::EpilogueTensors& epilogue, int threads);

}  // namespace tessera::app::bench
