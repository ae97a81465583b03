#include "bench/peers_onednn_conv.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <exception>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>

namespace tessera::app::bench {

namespace {

using dnnl::memory;
using dt = memory::data_type;
using tag = memory::format_tag;

// oneDNN's dims are N, C, spatial whatever the layout: those of an NHWC tensor as such.
memory::dims nchw_dims(const Shape& nhwc) { return {nhwc[0], nhwc[3], nhwc[1], nhwc[2]}; }

Status check(const Tensor& x, const Tensor& w, const Tensor& y, const ops::ConvAttrs& attrs,
             const ops::EpilogueTensors& epilogue) {
  if (x.rank() != 4 || !x.is_contiguous() || (x.dtype() != DType::f32 && x.dtype() != DType::bf16))
    return Status::invalid_argument("x: oneDNN conv peer takes a contiguous f32 or bf16 [N, H, W, C]");
  if (y.rank() != 4 || !y.is_contiguous() || y.dtype() != x.dtype())
    return Status::invalid_argument("y: oneDNN conv peer takes a contiguous [N, OH, OW, Cout] of x's dtype");
  if (w.rank() != 4 || !w.is_contiguous() || w.dtype() != DType::f32 || w.dim(0) != y.dim(3) || w.dim(1) != x.dim(3))
    return Status::invalid_argument("w: oneDNN conv peer takes contiguous f32 [Cout, C, KH, KW] matching x and y");
  if (attrs.groups != 1) return Status::unsupported("attrs.groups: the oneDNN conv peer takes 1");
  if (epilogue.scale != 1.0f) return Status::unsupported("epilogue.scale: the oneDNN conv peer takes 1");
  if (epilogue.activation != ops::Activation::none && epilogue.activation != ops::Activation::silu)
    return Status::unsupported("epilogue.activation: the oneDNN conv peer takes none or silu");
  if (epilogue.bias.defined() &&
      (epilogue.bias.dtype() != DType::f32 || epilogue.bias.numel() != y.dim(3) || !epilogue.bias.is_contiguous()))
    return Status::invalid_argument("epilogue.bias: the oneDNN conv peer takes contiguous f32 [Cout]");
  if (epilogue.residual.defined() && (epilogue.residual.data() != y.data() || epilogue.residual.desc() != y.desc()))
    return Status::unsupported("epilogue.residual: oneDNN's sum post-op adds y's contents, so it must be y itself");
  return Status{};
}

// Everything one execution needs, kept alive by the call.
struct Prepared {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  bool upsample = false;
  dnnl::resampling_forward resample;
  std::unordered_map<int, memory> resample_args;
  dnnl::convolution_forward conv;
  std::unordered_map<int, memory> conv_args;
  std::string kernel;
};

void prepare(const Tensor& x, const Tensor& w, const Tensor& y, const ops::ConvAttrs& attrs,
             const ops::EpilogueTensors& epilogue, Prepared& p) {
  const dt type = x.dtype() == DType::bf16 ? dt::bf16 : dt::f32;
  const memory x_mem({nchw_dims(x.shape()), type, tag::nhwc}, p.engine, x.data());
  const memory y_mem({nchw_dims(y.shape()), type, tag::nhwc}, p.engine, y.data());
  memory conv_src = x_mem;
  std::string resample_kernel;
  if (attrs.upsample_nearest2x) {
    const memory::desc up_md({x.dim(0), x.dim(3), 2 * x.dim(1), 2 * x.dim(2)}, type, tag::nhwc);
    const dnnl::resampling_forward::primitive_desc pd(
        {dnnl::prop_kind::forward_inference, dnnl::algorithm::resampling_nearest, x_mem.get_desc(), up_md}, p.engine);
    conv_src = memory(up_md, p.engine);
    p.upsample = true;
    p.resample = dnnl::resampling_forward(pd);
    p.resample_args = {{DNNL_ARG_SRC, x_mem}, {DNNL_ARG_DST, conv_src}};
    resample_kernel = fmt::format("{} + ", pd.impl_info_str());
  }

  const memory::desc w_any({w.dim(0), w.dim(1), w.dim(2), w.dim(3)}, type, tag::any);
  const memory::desc bias_md =
      epilogue.bias.defined() ? memory::desc({y.dim(3)}, dt::f32, tag::a) : memory::desc();
  const memory::dims padding{attrs.padding[0], attrs.padding[1]};
  // convolution_auto: oneDNN picks direct or Winograd, its best. It counts dilation from 0 (no gaps), Tessera from 1.
  const dnnl::convolution_forward::desc desc(
      dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_auto, conv_src.get_desc(), w_any, bias_md,
      y_mem.get_desc(), {attrs.stride[0], attrs.stride[1]}, {attrs.dilation[0] - 1, attrs.dilation[1] - 1}, padding,
      padding);
  dnnl::post_ops post_ops;
  if (epilogue.activation == ops::Activation::silu)
    post_ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_swish, 1.0f, 0.0f);  // x * sigmoid(alpha x)
  if (epilogue.residual.defined()) post_ops.append_sum(1.0f);
  dnnl::primitive_attr attr;
  attr.set_post_ops(post_ops);
  const dnnl::convolution_forward::primitive_desc pd(desc, attr, p.engine);
  p.conv = dnnl::convolution_forward(pd);
  p.kernel = resample_kernel + pd.impl_info_str();

  // The weights in the primitive's layout, reordered once (also rounding to bf16).
  memory plain_w({{w.dim(0), w.dim(1), w.dim(2), w.dim(3)}, dt::f32, tag::oihw}, p.engine, w.data());
  memory packed_w(pd.weights_desc(), p.engine);
  dnnl::reorder(plain_w, packed_w).execute(p.stream, plain_w, packed_w);
  p.stream.wait();

  p.conv_args = {{DNNL_ARG_SRC, conv_src}, {DNNL_ARG_WEIGHTS, packed_w}, {DNNL_ARG_DST, y_mem}};
  if (epilogue.bias.defined())
    p.conv_args.emplace(DNNL_ARG_BIAS, memory(bias_md, p.engine, epilogue.bias.data()));
}

}  // namespace

Result<OnednnCall> make_onednn_conv(const Tensor& x, const Tensor& w, const Tensor& y, const ops::ConvAttrs& attrs,
                                    const ops::EpilogueTensors& epilogue, int threads) {
  TESSERA_RETURN_IF_ERROR(check(x, w, y, attrs, epilogue));
  try {
    omp_set_num_threads(threads);  // before the primitives are made: they size their blocking for it
    auto p = std::make_shared<Prepared>();
    prepare(x, w, y, attrs, epilogue, *p);
    return onednn_call(p->kernel, threads, [p] {
      if (p->upsample) p->resample.execute(p->stream, p->resample_args);
      p->conv.execute(p->stream, p->conv_args);
      p->stream.wait();
    });
  } catch (const std::exception& e) {
    return Status::internal(fmt::format("oneDNN convolution: {}", e.what()));
  }
}

}  // namespace tessera::app::bench
