// oneDNN's memory-bound primitives as peers of `bench membound`.
#include <fmt/format.h>
#include <omp.h>

#include <exception>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>

#include "bench/peers_onednn.hpp"

namespace tessera::app::bench {

namespace {

using dnnl::memory;
using dt = memory::data_type;
using Args = std::unordered_map<int, memory>;

Result<dt> onednn_type(DType t) {
  switch (t) {
    case DType::f32: return dt::f32;
    case DType::bf16: return dt::bf16;
    case DType::f16: return dt::f16;
    case DType::i8: return dt::s8;
    case DType::u8: return dt::u8;
    case DType::i32: return dt::s32;
    default: return Status::unsupported(fmt::format("oneDNN has no {} memory", to_string(t)));
  }
}

// The tensor's dims, type and strides as a oneDNN memory desc.
Result<memory::desc> desc_of(const Tensor& t) {
  TESSERA_ASSIGN_OR_RETURN(dt type, onednn_type(t.dtype()));
  memory::dims dims, strides;
  for (int i = 0; i < t.rank(); ++i) dims.push_back(t.dim(i)), strides.push_back(t.strides()[i]);
  return memory::desc(dims, type, strides);
}

// Everything one execution needs, kept alive by the call.
struct Prepared {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  dnnl::primitive primitive;
  Args args;
  std::string kernel;
};

std::optional<dnnl::algorithm> eltwise_algorithm(std::string_view name) {
  using a = dnnl::algorithm;
  if (name == "eltwise_relu") return a::eltwise_relu;
  if (name == "eltwise_gelu_erf") return a::eltwise_gelu_erf;
  if (name == "eltwise_gelu_tanh") return a::eltwise_gelu_tanh;
  if (name == "eltwise_swish" || name == "eltwise_quick_gelu") return a::eltwise_swish;
  if (name == "eltwise_logistic") return a::eltwise_logistic;
  if (name == "eltwise_tanh") return a::eltwise_tanh;
  if (name == "eltwise_exp") return a::eltwise_exp;
  return std::nullopt;
}

// Makes the primitive of `spec` and binds the tensors to its arguments.
Status prepare(const OnednnMemboundSpec& spec, Prepared& p) {
  const auto fwd = dnnl::prop_kind::forward_inference;
  auto mem = [&](const Tensor& t) -> Result<memory> {
    TESSERA_ASSIGN_OR_RETURN(memory::desc d, desc_of(t));
    return memory(d, p.engine, t.data());
  };
  if (spec.inputs.empty()) return Status::invalid_argument("inputs: oneDNN primitives need at least one");
  TESSERA_ASSIGN_OR_RETURN(memory src, mem(spec.inputs[0]));
  TESSERA_ASSIGN_OR_RETURN(memory dst, mem(spec.output));
  const memory::desc& sd = src.get_desc();
  const memory::desc& dd = dst.get_desc();
  const std::string& name = spec.primitive;
  const int axis = spec.axis < 0 ? spec.inputs[0].rank() + spec.axis : spec.axis;
  if (auto alg = eltwise_algorithm(name)) {
    // swish is x * sigmoid(alpha x): silu at 1, quick_gelu at 1.702.
    const float alpha = name == "eltwise_swish" ? 1.0f : name == "eltwise_quick_gelu" ? 1.702f : 0.0f;
    dnnl::eltwise_forward::primitive_desc pd({fwd, *alg, sd, alpha, 0.0f}, p.engine);
    p.primitive = dnnl::eltwise_forward(pd), p.kernel = pd.impl_info_str();
    p.args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}};
  } else if (name == "binary_add" || name == "binary_mul") {
    TESSERA_ASSIGN_OR_RETURN(memory src1, mem(spec.inputs.at(1)));
    const auto alg = name == "binary_add" ? dnnl::algorithm::binary_add : dnnl::algorithm::binary_mul;
    dnnl::binary::primitive_desc pd({alg, sd, src1.get_desc(), dd}, p.engine);
    p.primitive = dnnl::binary(pd), p.kernel = pd.impl_info_str();
    p.args = {{DNNL_ARG_SRC_0, src}, {DNNL_ARG_SRC_1, src1}, {DNNL_ARG_DST, dst}};
  } else if (name == "softmax") {
    dnnl::softmax_forward::primitive_desc pd({fwd, sd, axis}, p.engine);
    p.primitive = dnnl::softmax_forward(pd), p.kernel = pd.impl_info_str();
    p.args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}};
  } else if (name == "logsoftmax") {
    dnnl::logsoftmax_forward::primitive_desc pd({fwd, sd, axis}, p.engine);
    p.primitive = dnnl::logsoftmax_forward(pd), p.kernel = pd.impl_info_str();
    p.args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}};
  } else if (name == "layer_norm") {
    TESSERA_ASSIGN_OR_RETURN(memory scale, mem(spec.inputs.at(1)));
    TESSERA_ASSIGN_OR_RETURN(memory shift, mem(spec.inputs.at(2)));
    const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
    dnnl::layer_normalization_forward::primitive_desc pd({fwd, sd, spec.eps, flags}, p.engine);
    p.primitive = dnnl::layer_normalization_forward(pd), p.kernel = pd.impl_info_str();
    p.args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}, {DNNL_ARG_SCALE, scale}, {DNNL_ARG_SHIFT, shift}};
  } else if (name == "reorder") {
    dnnl::reorder::primitive_desc pd(p.engine, sd, p.engine, dd);
    p.primitive = dnnl::reorder(pd), p.kernel = pd.impl_info_str();
    p.args = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}};
  } else if (name == "resampling_nearest" || name == "resampling_linear") {
    const auto alg = name == "resampling_nearest" ? dnnl::algorithm::resampling_nearest : dnnl::algorithm::resampling_linear;
    dnnl::resampling_forward::primitive_desc pd({fwd, alg, sd, dd}, p.engine);
    p.primitive = dnnl::resampling_forward(pd), p.kernel = pd.impl_info_str();
    p.args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}};
  } else if (name == "reduction_sum" || name == "reduction_l2") {
    // reduction_norm_lp_sum: (sum of |x|^p)^(1/p), p the first parameter, eps the second.
    const bool l2 = name == "reduction_l2";
    dnnl::reduction::primitive_desc pd({l2 ? dnnl::algorithm::reduction_norm_lp_sum : dnnl::algorithm::reduction_sum, sd, dd,
                                        l2 ? 2.0f : 0.0f, 0.0f},
                                       p.engine);
    p.primitive = dnnl::reduction(pd), p.kernel = pd.impl_info_str();
    p.args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}};
  } else if (name == "concat") {
    std::vector<memory::desc> descs;
    p.args = {{DNNL_ARG_DST, dst}};
    for (std::size_t i = 0; i < spec.inputs.size(); ++i) {
      TESSERA_ASSIGN_OR_RETURN(memory m, mem(spec.inputs[i]));
      descs.push_back(m.get_desc());
      p.args.emplace(DNNL_ARG_MULTIPLE_SRC + int(i), m);
    }
    dnnl::concat::primitive_desc pd(dd, axis, descs, p.engine);
    p.primitive = dnnl::concat(pd), p.kernel = pd.impl_info_str();
  } else {
    return Status::invalid_argument(fmt::format("primitive: no oneDNN peer named '{}'", name));
  }
  return Status{};
}

}  // namespace

Result<OnednnCall> make_onednn_membound(const OnednnMemboundSpec& spec, int threads) {
  try {
    omp_set_num_threads(threads);
    auto p = std::make_shared<Prepared>();
    TESSERA_RETURN_IF_ERROR(prepare(spec, *p));
    return onednn_call(p->kernel, threads, [p] {
      p->primitive.execute(p->stream, p->args);
      p->stream.wait();
    });
  } catch (const std::exception& e) {
    return Status::internal(fmt::format("oneDNN {}: {}", spec.primitive, e.what()));
  }
}

}  // namespace tessera::app::bench
