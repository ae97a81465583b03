#include "tessera/ops/conv.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <vector>

#include "kernels/depthwise_conv.hpp"
#include "kernels/im2col.hpp"
#include "kernels/matmul.hpp"
#include "kernels/scratch.hpp"
#include "kernels/winograd.hpp"
#include "ops/common.hpp"
#include "ops/epilogue.hpp"
#include "tessera/ops/elementwise.hpp"
#include "tessera/ops/layout.hpp"

namespace tessera::ops {

using namespace detail;

namespace {

using Row = kernels::KernelRow<kernels::MatmulFamily>;

// Elements between consecutive pixels of a [N, H, W, C] desc when its H and
// W collapse into one run of pixels (H * W of them per sample); none otherwise.
std::optional<std::int64_t> pixel_stride(const TensorDesc& d) {
  const std::int64_t h = d.shape[1], w = d.shape[2], sh = d.strides[1], sw = d.strides[2];
  if (h == 1) return sw;
  if (w == 1) return sh;
  if (sh == w * sw) return sw;
  return std::nullopt;
}

// The channel stride a kernel may assume: 1, or anything over a single channel.
bool unit_channels(const TensorDesc& d) { return d.shape[3] == 1 || d.strides[3] == 1; }

// What both conv plans hold of their tensors: inputs {x, [bias], [residual]}
// with their names, y, the weights and the epilogue, and the traffic model.
struct ConvTensors {
  std::vector<TensorDesc> inputs;
  std::vector<std::string_view> names;
  TensorDesc y;
  ConvWeightsPtr w;
  Epilogue epilogue;
  std::int64_t bytes = 0;

  ConvTensors(const TensorDesc& x, ConvWeightsPtr weights, const TensorDesc& out, const Epilogue& e)
      : inputs{x}, names{"x"}, y(out), w(std::move(weights)), epilogue(e) {
    bytes = saturating_add(traffic_bytes({x, y}), w->bytes());
    if (e.bias) inputs.push_back(*e.bias), names.push_back("bias"), bytes = saturating_add(bytes, traffic_bytes({*e.bias}));
    if (e.residual)
      inputs.push_back(*e.residual), names.push_back("residual"), bytes = saturating_add(bytes, traffic_bytes({*e.residual}));
  }

  // The run()-time checks: the tensors are the plan's, and y overlaps no
  // input except that it may be the residual's very view (each element is
  // read, then written).
  Status check(std::span<const Tensor> in, std::span<const Tensor> out) const {
    static constexpr std::string_view kOut[] = {"y"};
    TESSERA_RETURN_IF_ERROR(check_tensors("conv2d", in, inputs, names));
    TESSERA_RETURN_IF_ERROR(check_tensors("conv2d", out, std::span(&y, 1), kOut));
    const std::size_t residual = epilogue.residual ? in.size() - 1 : in.size();
    for (std::size_t i = 0; i < in.size(); ++i)
      TESSERA_RETURN_IF_ERROR(check_overlap(out[0], "y", in[i], names[i], i == residual));
    return {};
  }
};

// The kernels' view of packed weights.
kernels::PackedB packed_view(const PackedWeights& b) {
  return {b.dtype(), b.k(), b.n(), b.values(), b.scales(), b.quant().scale_dtype, b.zeros(), b.group_size()};
}

// The rows of `a` through `row` in calls of at most n_block columns: [c0, c1) of rows [0, rows).
void run_columns(const Row& row, const kernels::MatmulArgs& a, const kernels::MatmulTiling& tiling, std::int64_t rows,
                 std::int64_t c0, std::int64_t c1) {
  for (std::int64_t n0 = c0; n0 < c1; n0 += tiling.n_block) row.run(a, tiling, 0, rows, n0, std::min(c1, n0 + tiling.n_block));
}

// The tasks of a plan's parts in one range: part i's are [first[i], first[i + 1]).
struct TaskRanges {
  std::vector<std::int64_t> first{0};
  void add(std::int64_t tasks) { first.push_back(first.back() + tasks); }
  std::int64_t total() const { return first.back(); }
  // Task t's part and its index there.
  std::pair<std::size_t, std::int64_t> locate(std::int64_t t) const {
    std::size_t i = 0;
    while (t >= first[i + 1]) ++i;
    return {i, t - first[i]};
  }
};

// What the conv plans share: run()'s checks, then execute() on the
// stream's pool.
class ConvPlanBase : public Plan {
 public:
  ConvPlanBase(std::string_view kernel, const ConvTensors& io, std::int64_t flops) : Plan(kernel, io.bytes, flops), io_(io) {}

  std::string_view op() const override { return "conv2d"; }

  Status do_run(Stream& stream, std::span<const Tensor> in, std::span<const Tensor> out, void*) const override {
    TESSERA_RETURN_IF_ERROR(io_.check(in, out));
    return stream.submit(op(), [this, &stream, in, out] {
      execute(stream.pool(), in, out[0]);
      return Status{};
    });
  }

 protected:
  virtual void execute(ThreadPool& pool, std::span<const Tensor> in, const Tensor& y) const = 0;
  // The run's bias and residual (inputs {x, [bias], [residual]}), or null.
  const Tensor* bias_of(std::span<const Tensor> in) const { return io_.epilogue.bias ? &in[1] : nullptr; }
  const Tensor* residual_of(std::span<const Tensor> in) const { return io_.epilogue.residual ? &in.back() : nullptr; }

  ConvTensors io_;
};

// One GEMM of a conv: its rows are output pixels of a sample, in tiles
// whose input patches are gathered (im2col) or read in place (`direct`: x's
// pixels are the rows, 1x1 stride 1 without padding or upsample).
// An upsampling conv's sub-pixel phases write every other pixel of every
// other output row: rows come in runs of `run` pixels (0: a single run),
// `y_pixel` elements apart within a run and `y_run` between runs, row 0 at
// `y_at`; likewise the residual. A tile is whole runs or lies within one.
struct ConvGemm {
  kernels::Im2colGeometry im2col;
  std::int64_t k, ld;  // patch length and the gathered rows' stride (elements)
  std::int64_t pixels;  // rows per sample
  const Row* row;
  kernels::MatmulTiling tiling;  // m_block: output pixels per task; n_block: columns per kernel call
  std::int64_t n_chunk;          // output channels (of a group) per task
  std::int64_t run, y_at, y_pixel, y_run, residual_at, residual_pixel, residual_run;
  std::vector<WeightsPtr> weights;      // per group
  std::vector<kernels::PackedB> packed;  // the kernels' view of them

  std::int64_t m_tiles() const { return (pixels + tiling.m_block - 1) / tiling.m_block; }
  std::int64_t y_row(std::int64_t p) const { return kernels::run_row_offset(p, run, y_pixel, y_run); }
  std::int64_t residual_row(std::int64_t p) const { return kernels::run_row_offset(p, run, residual_pixel, residual_run); }
};

class ConvPlan final : public ConvPlanBase {
 public:
  struct Spec {
    bool direct;
    std::int64_t x_pixel;  // direct: elements between x's pixels
    std::vector<ConvGemm> gemms;  // one, or an upsampling conv's four phases
    std::int64_t flops;
  };

  ConvPlan(const ConvTensors& io, Spec s) : ConvPlanBase(s.gemms.front().row->name, io, s.flops), s_(std::move(s)) {}

 private:
  void execute(ThreadPool& pool, std::span<const Tensor> in, const Tensor& y) const override {
    const TensorDesc& x = io_.inputs[0];
    const ConvWeights& w = *io_.w;
    const Tensor *bias = bias_of(in), *res = residual_of(in);
    const std::int64_t batch = x.shape[0];
    const std::int64_t cig = w.in_channels_per_group(), cog = w.out_channels() / w.groups();
    const std::size_t xb = bytes_of(x.dtype), yb = bytes_of(io_.y.dtype);
    TaskRanges tasks;
    for (const ConvGemm& gm : s_.gemms) tasks.add(batch * gm.m_tiles() * ((cog + gm.n_chunk - 1) / gm.n_chunk));

    kernels::MatmulArgs base{};
    base.a_dtype = x.dtype;
    base.b_dtype = s_.gemms[0].packed[0].dtype;
    base.c_dtype = io_.y.dtype;
    base.a_col_stride = 1;
    base.c_col_stride = 1;
    base.ep = {io_.epilogue.scale, static_cast<kernels::Act>(io_.epilogue.activation), nullptr,
               bias ? bias->dtype() : DType::f32, nullptr, res ? res->dtype() : DType::f32, 0, 1};

    auto task = [&](std::int64_t task_index) {
      const auto [i, t] = tasks.locate(task_index);
      const ConvGemm& gm = s_.gemms[i];
      const std::int64_t m_tiles = gm.m_tiles(), n_parts = (cog + gm.n_chunk - 1) / gm.n_chunk;
      const std::int64_t n = t / (m_tiles * n_parts), mt = t / n_parts % m_tiles, part = t % n_parts;
      const std::int64_t p0 = mt * gm.tiling.m_block, rows = std::min(gm.tiling.m_block, gm.pixels - p0);
      const std::int64_t c0 = part * gm.n_chunk, c1 = std::min(cog, c0 + gm.n_chunk);
      const char* x_n = byte_ptr(in[0]) + n * x.strides[0] * std::int64_t(xb);
      void* patches = s_.direct ? nullptr : kernels::thread_scratch(kernels::ScratchSlot::im2col, std::size_t(rows * gm.ld) * xb);
      kernels::MatmulArgs a = base;
      a.k = gm.k;
      a.c_row_stride = gm.y_pixel, a.c_run = gm.run, a.c_run_stride = gm.y_run;
      a.ep.residual_row_stride = gm.residual_pixel, a.ep.residual_run_stride = gm.residual_run;
      for (std::int64_t g = 0; g < w.groups(); ++g) {
        a.packed = &gm.packed[std::size_t(g)];
        const char* x_ng = x_n + g * cig * std::int64_t(xb);
        if (s_.direct) {
          a.a = x_ng + p0 * s_.x_pixel * std::int64_t(xb);
          a.a_row_stride = s_.x_pixel;
        } else {
          kernels::im2col_rows(gm.im2col, x_ng, p0, rows, patches, gm.ld);
          a.a = patches;
          a.a_row_stride = gm.ld;
        }
        const std::int64_t out_at = n * io_.y.strides[0] + gm.y_at + gm.y_row(p0) + g * cog;
        a.c = const_cast<char*>(byte_ptr(y)) + out_at * std::int64_t(yb);
        if (bias) a.ep.bias = byte_ptr(*bias) + g * cog * std::int64_t(bytes_of(bias->dtype()));
        if (res) {
          const TensorDesc& r = res->desc();
          a.ep.residual = byte_ptr(*res) + (n * r.strides[0] + gm.residual_at + gm.residual_row(p0) + g * cog * r.strides[3]) *
                                               std::int64_t(bytes_of(r.dtype));
        }
        run_columns(*gm.row, a, gm.tiling, rows, c0, c1);
      }
    };
    pool.run_tasks(tasks.total(), task);
  }

  Spec s_;
};

// One Winograd conv of x (kernels/winograd.hpp): a 3x3 conv (stride 1, or
// stride 2 over x's four phases), or one of an upsampling conv's four 2x2
// sub-pixel phases. Its outputs go to
// y_at + row * y_row + pixel * y_pixel from y's sample start (a phase: every
// other row and pixel); likewise the residual's.
struct WinogradPart {
  // What the input transform reads, each into its own Cig columns of V's
  // rows: x, or a stride-2 conv's four phases of x (stride2_phases).
  struct Input {
    kernels::WinogradGeometry geometry;
    std::int64_t x_at;  // elements from the sample's (and group's) start
  };
  std::vector<Input> inputs;  // inputs[0].geometry: the output tiles' too
  // Per plane, the inputs whose weights are not all zero there: a range
  // [first, first + count) of them, the GEMM's K (count * Cig).
  std::vector<std::array<std::int64_t, 2>> plane_inputs;
  std::int64_t tiles;  // per sample
  const Row* row;
  kernels::MatmulTiling tiling;  // m_block: tiles per task
  std::int64_t n_chunk;          // output channels (of a group) per task
  std::int64_t y_at, y_row, y_pixel, residual_at, residual_row, residual_pixel;
  std::vector<kernels::PackedB> packed;  // [group][plane]: U's planes, f32 [count * Cig, Cog] (none: U per slice)
};

// Winograd convs: a task takes a block of output tiles of one part and
// sample and a range of output channels; per group, the input transforms
// into f32 planes, one GEMM per plane with the transformed weights (sums
// into as many more planes), and the output transform with the epilogue into y.
class WinogradConvPlan final : public ConvPlanBase {
 public:
  struct Spec {
    const kernels::KernelRow<kernels::WinogradFamily>* transforms;
    std::vector<WinogradPart> parts;
    std::int64_t ld_v, ld_m;  // row strides of the planes of V and M
    // What the parts' packed views point into; null: U made per slice from
    // the direct conv's weights (transforms->run.kernel_gemm), no packed views.
    std::shared_ptr<const std::vector<WeightsPtr>> weights;
    std::int64_t flops;
  };

  WinogradConvPlan(const ConvTensors& io, Spec s) : ConvPlanBase(s.transforms->name, io, s.flops), s_(std::move(s)) {}

 private:
  void execute(ThreadPool& pool, std::span<const Tensor> in, const Tensor& y) const override {
    const TensorDesc& x = io_.inputs[0];
    const ConvWeights& w = *io_.w;
    const Tensor *bias = bias_of(in), *res = residual_of(in);
    const std::int64_t batch = x.shape[0], cig = w.in_channels_per_group(), cog = w.out_channels() / w.groups();
    const std::int64_t xb = bytes_of(x.dtype), yb = bytes_of(io_.y.dtype);
    const std::int64_t planes = kernels::winograd_planes(s_.parts[0].inputs[0].geometry.tile);
    const auto blocks = [](const WinogradPart& part) { return (part.tiles + part.tiling.m_block - 1) / part.tiling.m_block; };
    const auto n_parts = [&](const WinogradPart& part) { return (cog + part.n_chunk - 1) / part.n_chunk; };
    TaskRanges tasks;
    for (const WinogradPart& part : s_.parts) tasks.add(batch * blocks(part) * n_parts(part));

    kernels::MatmulArgs base{};
    base.a_dtype = DType::f32;
    base.b_dtype = DType::f32;
    base.c_dtype = DType::f32;
    base.a_row_stride = s_.ld_v, base.a_col_stride = 1;
    base.c_row_stride = s_.ld_m, base.c_col_stride = 1;
    const TensorDesc* r = res ? &res->desc() : nullptr;
    const kernels::EpilogueArgs ep{io_.epilogue.scale, static_cast<kernels::Act>(io_.epilogue.activation), nullptr,
                                   bias ? bias->dtype() : DType::f32, nullptr, r ? r->dtype : DType::f32, 0, 1};

    auto task = [&](std::int64_t task_index) {
      const auto [i, t] = tasks.locate(task_index);
      const WinogradPart& part = s_.parts[i];
      const std::int64_t block = part.tiling.m_block, parts_n = n_parts(part);
      const std::int64_t n = t / (blocks(part) * parts_n), blk = t / parts_n % blocks(part), chunk = t % parts_n;
      const std::int64_t t0 = blk * block, count = std::min(block, part.tiles - t0);
      const std::int64_t c0 = chunk * part.n_chunk, c1 = std::min(cog, c0 + part.n_chunk);
      const std::int64_t v_plane = block * s_.ld_v, m_plane = block * s_.ld_m;
      auto* v = static_cast<float*>(kernels::thread_scratch(kernels::ScratchSlot::im2col, std::size_t(planes * v_plane) * 4));
      auto* m = static_cast<float*>(kernels::thread_scratch(kernels::ScratchSlot::winograd, std::size_t(planes * m_plane) * 4));
      kernels::MatmulArgs a = base;
      kernels::WinogradOutput o{nullptr, io_.y.dtype, part.y_row, part.y_pixel, ep, part.residual_row};
      o.ep.residual_row_stride = part.residual_pixel;
      for (std::int64_t g = 0; g < w.groups(); ++g) {
        for (std::size_t j = 0; j < part.inputs.size(); ++j)
          s_.transforms->run.input(part.inputs[j].geometry, byte_ptr(in[0]) + (n * x.strides[0] + part.inputs[j].x_at + g * cig) * xb,
                                   t0, count, v + std::int64_t(j) * cig, s_.ld_v, v_plane);
        if (!s_.weights) {
          s_.transforms->run.kernel_gemm(packed_view(*w.gemm_weights()[std::size_t(g)]), cig, v, s_.ld_v, v_plane, count, m,
                                         s_.ld_m, m_plane, c0, c1);
        } else {
          for (std::int64_t p = 0; p < planes; ++p) {
            const auto [first, inputs] = part.plane_inputs[std::size_t(p)];
            a.a = v + p * v_plane + first * cig;
            a.k = inputs * cig;
            a.packed = &part.packed[std::size_t(planes * g + p)];
            a.c = m + p * m_plane;
            run_columns(*part.row, a, part.tiling, count, c0, c1);
          }
        }
        o.y = const_cast<char*>(byte_ptr(y)) + (n * io_.y.strides[0] + part.y_at + g * cog) * yb;
        if (bias) o.ep.bias = byte_ptr(*bias) + g * cog * std::int64_t(bytes_of(bias->dtype()));
        if (res)
          o.ep.residual = byte_ptr(*res) + (n * r->strides[0] + part.residual_at + g * cog * r->strides[3]) * std::int64_t(bytes_of(r->dtype));
        s_.transforms->run.output(part.inputs[0].geometry, m, s_.ld_m, m_plane, t0, count, c0, c1, o);
      }
    };
    pool.run_tasks(tasks.total(), task);
  }

  Spec s_;
};

// Depthwise (groups == C == Cout): a direct kernel over channels, one task a
// range of output rows (n, oh); no GEMM, no gathered patches.
class DepthwiseConvPlan final : public ConvPlanBase {
 public:
  struct Spec {
    ConvAttrs attrs;
    const kernels::KernelRow<kernels::DepthwiseFamily>* row;
    kernels::RowTiling tiling;
  };

  DepthwiseConvPlan(const ConvTensors& io, Spec s)
      : ConvPlanBase(s.row->name, io, 2 * io.y.numel() * io.w->kernel_h() * io.w->kernel_w()), s_(std::move(s)) {}

 private:
  void execute(ThreadPool& pool, std::span<const Tensor> in, const Tensor& out) const override {
    const TensorDesc &x = io_.inputs[0], &y = io_.y;
    const ConvWeights& w = *io_.w;
    const Tensor *bias = bias_of(in), *res = residual_of(in);
    kernels::DepthwiseArgs a{x.dtype, y.dtype, x.shape[3], x.shape[1], x.shape[2], y.shape[1], y.shape[2],
                             w.kernel_h(), w.kernel_w(), s_.attrs.stride[0], s_.attrs.stride[1], s_.attrs.padding[0],
                             s_.attrs.padding[1], s_.attrs.dilation[0], s_.attrs.dilation[1], s_.attrs.upsample_nearest2x,
                             in[0].data(), x.strides[0], x.strides[1], x.strides[2],
                             w.depthwise_weights().data_as<float>(),
                             out.data(), y.strides[0], y.strides[1], y.strides[2],
                             {io_.epilogue.scale, static_cast<kernels::Act>(io_.epilogue.activation),
                              bias ? bias->data() : nullptr, bias ? bias->dtype() : DType::f32,
                              res ? res->data() : nullptr, res ? res->dtype() : DType::f32,
                              res ? res->strides()[2] : 0, 1},
                             res ? res->strides()[0] : 0, res ? res->strides()[1] : 0, s_.tiling.stream_output};
    pool.parallel_for(y.shape[0] * y.shape[1], s_.tiling.rows_per_task,
                      [&](std::int64_t r0, std::int64_t r1) { s_.row->run(a, r0, r1); });
  }

  Spec s_;
};

Status check_attrs(const ConvAttrs& a) {
  for (int i = 0; i < 2; ++i) {
    const char* dim = i == 0 ? "h" : "w";
    if (a.stride[i] < 1) return Status::invalid_argument(fmt::format("attrs.stride: {} ({}) must be >= 1", a.stride[i], dim));
    if (a.dilation[i] < 1)
      return Status::invalid_argument(fmt::format("attrs.dilation: {} ({}) must be >= 1", a.dilation[i], dim));
    if (a.padding[i] < 0) return Status::invalid_argument(fmt::format("attrs.padding: {} ({}) must be >= 0", a.padding[i], dim));
  }
  return {};
}

// The GEMM row and its tiling for a conv whose tasks are tiles of output
// pixels. A tile has the GEMM's own row block: capping it so that the
// gathered patches (rows x K) stay in L2 was measured no faster at C 320 and
// 640, and up to 1.9x slower at C 1280 (K 11520: 14-row tiles re-stream the
// 59 MB of weights from L3 for every 14 pixels).
struct GemmChoice {
  const Row* row;
  kernels::MatmulTiling tiling;
  std::int64_t n_chunk;
};

// `max_block`: a cap on the rows per task (0: none).
GemmChoice choose_gemm(Context& ctx, DType a, DType b, DType c_dtype, const ConvWeights& w, std::int64_t batch,
                       std::int64_t pixels, std::int64_t k, std::int64_t max_block = 0) {
  const std::int64_t cog = w.out_channels() / w.groups();
  const kernels::MatmulProblem problem{a, b, c_dtype, true, false, pixels, cog, k, 1, 1, 1, true};
  GemmChoice c{kernels::select<kernels::MatmulFamily>(problem, ctx.isa()), {}, 0};
  c.tiling = c.row->tiling(problem, ctx.hw());
  c.tiling.m_block = std::max<std::int64_t>(1, std::min({c.tiling.m_block, pixels, max_block > 0 ? max_block : pixels}));
  // The AVX-512 register-blocked rows read the patches in place: no packed
  // copy of A to keep in L2 per K slice, so K goes in slices of up to 1536,
  // with fewer round trips of the partial sums (AMD EPYC, 1 thread, f32 3x3
  // at C 320 / 640 / 1280: 107-109 -> 109-111 GFLOP/s; bf16 even). The
  // AVX2 row packs A and the AMX rows take tile-sized slices: theirs stay.
  if (c.row->isa >= hw::Isa::avx512 && c.row->isa < hw::Isa::amx)
    c.tiling.k_block = std::max(c.tiling.k_block, kernels::balanced_block(k, 1536, 64));
  // Few tiles come in whole rounds of the threads: 5 tiles on 2 threads
  // left one idle for a fifth of the conv (C 640 at 32 x 32, and stride 2
  // at 64 x 64: 0.75x oneDNN at 2 threads, 0.9x at 1). Tiles stay whole
  // multiples of 16 rows (the AMX row's tiles; any size suits the others).
  const std::int64_t threads = ctx.pool().threads();
  std::int64_t tiles = (pixels + c.tiling.m_block - 1) / c.tiling.m_block;
  if (batch * tiles < 8 * threads && (batch * tiles) % threads != 0) {
    while ((batch * tiles) % threads != 0) ++tiles;
    c.tiling.m_block = std::min(pixels, kernels::round_up((pixels + tiles - 1) / tiles, 16));
  }
  // Output channels: whole (a tile's patches are gathered once for all of
  // them) unless there are too few tiles to give each thread two tasks.
  const std::int64_t m_tasks = batch * ((pixels + c.tiling.m_block - 1) / c.tiling.m_block);
  const std::int64_t want = std::max<std::int64_t>(1, (2 * threads + m_tasks - 1) / m_tasks);
  const std::int64_t parts = std::min(want, kernels::panels_of(cog));
  c.n_chunk = kernels::round_up((cog + parts - 1) / parts, kernels::kPanelCols);
  c.tiling.n_block = std::min<std::int64_t>(c.n_chunk, 1024);
  return c;
}

}  // namespace

// ----------------------------------------------------------------- weights

// The taps of one sub-pixel phase of an upsampling conv along one dim: output
// index 2i + parity reads the upsampled index 2i + parity - pad + t with tap
// t, which is x's index i + ((parity - pad + t) >> 1). The phase's taps are
// those offsets from `first` on; the taps that land on the same one add up.
struct PhaseTaps {
  std::int64_t shift, first, count;  // shift = parity - pad
  PhaseTaps(std::int64_t parity, std::int64_t pad, std::int64_t k)
      : shift(parity - pad), first(shift >> 1), count(((shift + k - 1) >> 1) - first + 1) {}
  std::int64_t of(std::int64_t t) const { return ((shift + t) >> 1) - first; }  // the phase tap tap t adds into
};

// The taps of one sub-pixel phase: src [KH * KW * Cig, Cog] (tap-major, one
// tap `plane` = Cig * Cog elements) summed into dst [h.count * w.count * Cig, Cog].
void sum_phase_taps(const float* src, std::int64_t kh, std::int64_t kw, std::int64_t plane, const PhaseTaps& h,
                    const PhaseTaps& w, float* dst) {
  std::fill(dst, dst + h.count * w.count * plane, 0.0f);
  for (std::int64_t i = 0; i < kh; ++i)
    for (std::int64_t j = 0; j < kw; ++j) {
      const float* from = src + (i * kw + j) * plane;
      float* to = dst + (h.of(i) * w.count + w.of(j)) * plane;
      for (std::int64_t e = 0; e < plane; ++e) to[e] += from[e];
    }
}

// A stride-2 3x3 conv at pad 1 is four stride-1 2x2 convs, one per parity
// (a, b) of x's rows and columns, over the phase x_ab[i][j] = x[2i + a][2j +
// b]: output row o reads x's rows 2o - 1, 2o, 2o + 1, i.e. x_1's rows o - 1
// and o (taps 0 and 2) and x_0's row o (tap 1). Each phase's kernel g_ab is
// 2x2 over offsets -1 and 0 (zero where a phase has no tap), so all four run
// as Winograd F(3x3, 2x2) with the same output tiles, their products summed
// in one GEMM per plane over the phases' channels side by side. A phase
// without the offset -1 tap (parity 0) has U = G g G^T zero in plane row
// (column) 0: taken in the order below, the phases not zero in a plane are
// a range of them, 49 of 64 (phase, plane) pairs, so the GEMMs make 49
// multiplies per 3x3 output tile and channel pair where the direct conv
// makes 81.
constexpr std::array<std::array<std::int64_t, 2>, 4> kStride2Phases{{{1, 0}, {1, 1}, {0, 1}, {0, 0}}};

// The kernel tap (along one dim) of a phase's tap i (offset i - 1), or -1 for none.
std::int64_t stride2_tap(std::int64_t parity, std::int64_t i) { return parity == 1 ? 2 * i : i == 0 ? -1 : 1; }

// Plane (i, j)'s phases: [first, first + count) of kStride2Phases.
std::array<std::int64_t, 2> stride2_plane_phases(std::int64_t plane) {
  const bool row0 = plane / 4 == 0, col0 = plane % 4 == 0;
  return row0 && col0 ? std::array<std::int64_t, 2>{1, 1} : row0 ? std::array<std::int64_t, 2>{0, 2}
                                                   : col0   ? std::array<std::int64_t, 2>{1, 2}
                                                            : std::array<std::int64_t, 2>{0, 4};
}

// Per Winograd plane, the inputs whose weights are not all zero there: a
// stride-2 conv's phases (stride2_plane_phases), or the one input.
std::vector<std::array<std::int64_t, 2>> winograd_plane_inputs(bool stride2, std::int64_t planes) {
  std::vector<std::array<std::int64_t, 2>> inputs(std::size_t(planes), {0, 1});
  if (stride2)
    for (std::int64_t p = 0; p < planes; ++p) inputs[std::size_t(p)] = stride2_plane_phases(p);
  return inputs;
}

struct ConvWeights::Phases {
  struct Phase {
    PhaseTaps h, w;
    std::vector<WeightsPtr> gemm;  // per group: [h.count * w.count * Cig, Cog]
  };
  std::vector<Phase> phase;  // 2a + b: output rows of parity a, columns of parity b
  std::int64_t bytes = 0;
};

struct ConvWeights::Derived {
  std::mutex mutex;
  std::vector<std::pair<std::array<std::int64_t, 2>, std::shared_ptr<const Phases>>> phases;  // by padding
  std::vector<std::pair<std::array<std::int64_t, 4>, std::shared_ptr<const std::vector<WeightsPtr>>>> winograd;  // by (of, tile, padding)
};

Result<std::shared_ptr<const ConvWeights::Phases>> ConvWeights::upsample_phases(std::int64_t pad_h, std::int64_t pad_w) const {
  const std::lock_guard lock(derived_->mutex);
  const std::array<std::int64_t, 2> padding{pad_h, pad_w};
  for (const auto& [pad, phases] : derived_->phases)
    if (pad == padding) return phases;
  auto phases = std::make_shared<Phases>();
  for (std::int64_t a = 0; a < 2; ++a)
    for (std::int64_t b = 0; b < 2; ++b) phases->phase.push_back({PhaseTaps(a, pad_h, kh_), PhaseTaps(b, pad_w, kw_), {}});
  const std::int64_t cog = cout_ / groups_;
  for (const WeightsPtr& packed : gemm_) {
    TESSERA_ASSIGN_OR_RETURN(const Tensor taps, packed->unpack());  // f32 [KH * KW * Cig, Cog]
    const float* src = taps.data_as<float>();
    for (Phases::Phase& ph : phases->phase) {
      TESSERA_ASSIGN_OR_RETURN(Tensor sums, Tensor::empty(DType::f32, {ph.h.count * ph.w.count * cin_group_, cog}));
      sum_phase_taps(src, kh_, kw_, cin_group_ * cog, ph.h, ph.w, sums.data_as<float>());
      TESSERA_ASSIGN_OR_RETURN(WeightsPtr w, pack_weights(sums, dtype_));
      phases->bytes += w->bytes();
      ph.gemm.push_back(std::move(w));
    }
  }
  derived_->phases.emplace_back(padding, phases);
  return std::shared_ptr<const Phases>(std::move(phases));
}

Result<std::shared_ptr<const std::vector<WeightsPtr>>> ConvWeights::winograd(WinogradOf of, std::int64_t tile,
                                                                             std::int64_t pad_h, std::int64_t pad_w) const {
  const std::lock_guard lock(derived_->mutex);
  const bool upsample = of == WinogradOf::upsample_phases;
  const std::array<std::int64_t, 4> key{std::int64_t(of), tile, upsample ? pad_h : 0, upsample ? pad_w : 0};
  for (const auto& [k, planes] : derived_->winograd)
    if (k == key) return planes;
  // The kernels: this one (3x3), the four sub-pixel phases' (2x2, their
  // taps summed as upsample_phases sums them), or a stride-2 conv's four
  // input phases' (2x2, kStride2Phases); tap-major, Cig * Cog a tap.
  // The planes stay f32 whatever the weights' dtype: rounded to bf16 they
  // would put the error past the bf16 tolerance (F(2x2, 3x3), x f32, w bf16,
  // 3x3 at C 24: 0.18 against 0.15).
  const std::int64_t parts = upsample ? 4 : 1, cog = cout_ / groups_, plane_size = cin_group_ * cog;
  const std::int64_t n_planes = kernels::winograd_planes(tile);
  auto planes = std::make_shared<std::vector<WeightsPtr>>(std::size_t(parts * groups_ * n_planes));
  std::vector<float> phase_taps(std::size_t(upsample ? 4 * plane_size : 0));
  for (std::int64_t g = 0; g < groups_; ++g) {
    TESSERA_ASSIGN_OR_RETURN(const Tensor taps, gemm_[std::size_t(g)]->unpack());  // f32 [KH * KW * Cig, Cog]
    for (std::int64_t part = 0; part < parts; ++part) {
      const float* src = taps.data_as<float>();
      if (upsample) {
        sum_phase_taps(src, kh_, kw_, plane_size, PhaseTaps(part / 2, pad_h, kh_), PhaseTaps(part % 2, pad_w, kw_), phase_taps.data());
        src = phase_taps.data();
      }
      // Plane p: [count * Cig, Cog], its inputs' rows one after the other
      // (one input but for a stride-2 conv's phases).
      std::vector<Tensor> u(static_cast<std::size_t>(n_planes));
      const auto inputs = winograd_plane_inputs(of == WinogradOf::stride2_phases, n_planes);
      for (std::int64_t p = 0; p < n_planes; ++p) {
        TESSERA_ASSIGN_OR_RETURN(u[std::size_t(p)], Tensor::empty(DType::f32, {inputs[std::size_t(p)][1] * cin_group_, cog}));
      }
      for (std::int64_t e = 0; e < plane_size; ++e) {
        float kernel[9], plane[36];
        if (of != WinogradOf::stride2_phases) {
          const std::int64_t r = upsample ? 2 : kh_;
          for (std::int64_t tap = 0; tap < r * r; ++tap) kernel[tap] = src[tap * plane_size + e];
          kernels::winograd_weights(kernel, tile, plane);
          for (std::int64_t p = 0; p < n_planes; ++p) u[std::size_t(p)].data_as<float>()[e] = plane[p];
          continue;
        }
        for (std::int64_t phase = 0; phase < 4; ++phase) {
          const auto [a, b] = kStride2Phases[std::size_t(phase)];
          for (std::int64_t i = 0; i < 2; ++i)
            for (std::int64_t j = 0; j < 2; ++j) {
              const std::int64_t th = stride2_tap(a, i), tw = stride2_tap(b, j);
              kernel[2 * i + j] = th < 0 || tw < 0 ? 0.0f : src[(3 * th + tw) * plane_size + e];
            }
          kernels::winograd_weights(kernel, tile, plane);
          for (std::int64_t p = 0; p < n_planes; ++p) {
            const auto [first, count] = inputs[std::size_t(p)];
            if (phase >= first && phase < first + count) u[std::size_t(p)].data_as<float>()[(phase - first) * plane_size + e] = plane[p];
          }
        }
      }
      for (std::int64_t p = 0; p < n_planes; ++p) {
        TESSERA_ASSIGN_OR_RETURN((*planes)[std::size_t((part * groups_ + g) * n_planes + p)], pack_weights(u[std::size_t(p)], DType::f32));
      }
    }
  }
  derived_->winograd.emplace_back(key, planes);
  return std::shared_ptr<const std::vector<WeightsPtr>>(std::move(planes));
}

Result<ConvWeightsPtr> ConvWeights::pack(const Tensor& w, std::int64_t groups, DType dtype) {
  if (!w.defined()) return Status::invalid_argument("w: not defined");
  TESSERA_RETURN_IF_ERROR(check_float(w.desc(), "w"));
  if (w.rank() != 4)
    return Status::invalid_argument(fmt::format("w: rank {} (shape {}), expected [Cout, Cin / groups, KH, KW]", w.rank(), w.shape().to_string()));
  for (int i = 0; i < 4; ++i)
    if (w.dim(i) < 1) return Status::invalid_argument(fmt::format("w: shape {} has a dim < 1", w.shape().to_string()));
  if (groups < 1 || w.dim(0) % groups != 0)
    return Status::invalid_argument(fmt::format("groups: {} must be >= 1 and divide Cout = {}", groups, w.dim(0)));
  if (dtype != DType::f32 && dtype != DType::bf16)
    return Status::invalid_argument(fmt::format("dtype: {} cannot be packed for a conv, expected f32 or bf16", to_string(dtype)));
  std::shared_ptr<ConvWeights> out(new ConvWeights());
  out->derived_ = std::make_shared<Derived>();
  out->cout_ = w.dim(0), out->cin_group_ = w.dim(1), out->kh_ = w.dim(2), out->kw_ = w.dim(3);
  out->groups_ = groups, out->dtype_ = dtype;
  const std::int64_t cog = out->cout_ / groups, k = out->kh_ * out->kw_ * out->cin_group_;
  if (groups > 1 && out->cin_group_ == 1 && cog == 1) {  // depthwise: f32 [KH, KW, C] for the direct kernel
    out->depthwise_ = true;
    TESSERA_ASSIGN_OR_RETURN(Tensor taps, w.permute({2, 3, 1, 0}));  // [KH, KW, 1, C]
    TESSERA_ASSIGN_OR_RETURN(out->depthwise_w_, Tensor::empty(DType::f32, {out->kh_, out->kw_, out->cout_}));
    TESSERA_ASSIGN_OR_RETURN(Tensor dst, out->depthwise_w_.reshape({out->kh_, out->kw_, 1, out->cout_}));
    Context ctx({.threads = 1, .isa = hw::Isa::scalar});
    Stream stream(ctx);
    TESSERA_RETURN_IF_ERROR(cast(stream, taps, dst));
    return ConvWeightsPtr(std::move(out));
  }
  for (std::int64_t g = 0; g < groups; ++g) {
    // [Cog, Cig, KH, KW] -> [KH, KW, Cig, Cog] -> [K, Cog]: K in the order of a gathered patch.
    TESSERA_ASSIGN_OR_RETURN(Tensor slice, w.slice(0, g * cog, (g + 1) * cog));
    TESSERA_ASSIGN_OR_RETURN(Tensor taps, slice.permute({2, 3, 1, 0}));
    TESSERA_ASSIGN_OR_RETURN(Tensor dense, taps.contiguous());
    TESSERA_ASSIGN_OR_RETURN(Tensor kn, dense.reshape({k, cog}));
    TESSERA_ASSIGN_OR_RETURN(WeightsPtr packed, pack_weights(kn, dtype));
    out->gemm_.push_back(std::move(packed));
  }
  return ConvWeightsPtr(std::move(out));
}

std::int64_t ConvWeights::bytes() const {
  std::int64_t b = depthwise_ ? depthwise_w_.numel() * 4 : 0;
  for (const WeightsPtr& w : gemm_) b += w->bytes();
  return b;
}

Result<Shape> conv2d_output_shape(const Shape& x, const ConvWeights& w, const ConvAttrs& attrs) {
  TESSERA_RETURN_IF_ERROR(check_attrs(attrs));
  if (x.rank() != 4) return Status::invalid_argument(fmt::format("x: rank {} (shape {}), expected [N, H, W, C]", x.rank(), x.to_string()));
  if (x[3] != w.in_channels_per_group() * w.groups())
    return Status::invalid_argument(fmt::format("x: {} channels (shape {}), the weights take {} groups of {} = {}", x[3],
                                                x.to_string(), w.groups(), w.in_channels_per_group(),
                                                w.groups() * w.in_channels_per_group()));
  const std::int64_t scale = attrs.upsample_nearest2x ? 2 : 1;
  const std::int64_t k[2] = {w.kernel_h(), w.kernel_w()};
  Shape y{x[0], 0, 0, w.out_channels()};
  for (int i = 0; i < 2; ++i) {
    const std::int64_t span = attrs.dilation[i] * (k[i] - 1) + 1, in = x[1 + i] * scale + 2 * attrs.padding[i];
    if (in < span)
      return Status::invalid_argument(fmt::format("x: {} {} (padded: {}) is smaller than the dilated kernel's {}",
                                                  i == 0 ? "H" : "W", x[1 + i] * scale, in, span));
    y[1 + i] = (in - span) / attrs.stride[i] + 1;
  }
  return y;
}

// ----------------------------------------------------------------- plan

Result<PlanPtr> Conv2d::plan(Context& ctx, const TensorDesc& x, ConvWeightsPtr w, const TensorDesc& y,
                             const ConvAttrs& attrs, const Epilogue& epilogue) {
  if (!w) return Status::invalid_argument("w: no weights (null ConvWeightsPtr)");
  TESSERA_RETURN_IF_ERROR(x.validate("x"));
  TESSERA_RETURN_IF_ERROR(y.validate("y"));
  TESSERA_RETURN_IF_ERROR(check_float(x, "x"));
  TESSERA_RETURN_IF_ERROR(check_float(y, "y"));
  TESSERA_RETURN_IF_ERROR(check_rank(x, "x", 4, 4));
  if (attrs.groups != w->groups())
    return Status::invalid_argument(fmt::format("attrs.groups: {} differs from the weights' {} groups", attrs.groups, w->groups()));
  if (!unit_channels(x))
    return Status::invalid_argument(fmt::format("x: channel stride {} must be 1 (NHWC; conv2d() converts other layouts)", x.strides[3]));
  TESSERA_ASSIGN_OR_RETURN(const Shape expected, conv2d_output_shape(x.shape, *w, attrs));
  TESSERA_RETURN_IF_ERROR(check_same_shape(y, "y", expected, "[N, OH, OW, Cout] ="));
  TESSERA_RETURN_IF_ERROR(check_writable(y, "y"));
  const std::optional<std::int64_t> y_pixel = pixel_stride(y);
  if (!unit_channels(y) || !y_pixel)
    return Status::invalid_argument(fmt::format("y: strides {} must have channel stride 1 and W's stride times W as H's", y.strides.to_string()));
  TESSERA_RETURN_IF_ERROR(check_epilogue(epilogue, w->out_channels(), y, "y"));
  std::optional<std::int64_t> residual_pixel = 0;
  if (epilogue.residual) {
    residual_pixel = pixel_stride(*epilogue.residual);
    if (!unit_channels(*epilogue.residual) || !residual_pixel)
      return Status::invalid_argument(fmt::format("residual: strides {} must have channel stride 1 and W's stride times W as H's (or 0)",
                                                  epilogue.residual->strides.to_string()));
  }
  if (y.numel() == 0) return Status::invalid_argument(fmt::format("x: shape {} gives an empty output", x.shape.to_string()));
  ConvTensors io(x, w, y, epilogue);

  if (w->depthwise()) {
    DepthwiseConvPlan::Spec spec{.attrs = attrs};
    const kernels::DepthwiseProblem problem{x.dtype, y.dtype, epilogue.bias ? epilogue.bias->dtype : DType::f32,
                                            epilogue.residual ? epilogue.residual->dtype : DType::f32,
                                            y.shape[0] * y.shape[1], y.shape[2], y.shape[3]};
    spec.row = kernels::select<kernels::DepthwiseFamily>(problem, ctx.isa());
    spec.tiling = spec.row->tiling(problem, ctx.hw());
    return PlanPtr(std::make_shared<DepthwiseConvPlan>(io, std::move(spec)));
  }

  const std::int64_t kh = w->kernel_h(), kw = w->kernel_w(), cig = w->in_channels_per_group(), batch = x.shape[0];
  const std::int64_t cog = w->out_channels() / w->groups();
  const std::array<std::int64_t, 2> ones{1, 1};
  const std::int64_t res_h = epilogue.residual ? epilogue.residual->strides[1] : 0;
  const std::int64_t res_w = epilogue.residual ? epilogue.residual->strides[2] : 0;
  // Winograd, in f32 whatever the operands' dtype: F(2x2, 3x3) for a 3x3
  // conv on f32 operands, F(4x4, 3x3) (4x fewer multiplies, 3 bits less
  // accurate) for one held to the bf16 tolerance (x or weights bf16) unless
  // AMX multiplies bf16 (~10x the f32 FMA rate: the direct conv is faster);
  // F(3x3, 2x2) for the four 2x2 sub-pixel phases of an upsampling one (3x3,
  // pad 1) and for the four input phases of a stride-2 3x3 at pad 1, on f32
  // operands (through bf16 the direct conv's dot products, 2x the FMA rate,
  // outrun their 49 / 81 of the multiplies), given 28 output tiles a sample
  // at least: U (49 / 9 the weights' f32 bytes) is read once per block of
  // tiles (AMD EPYC, 1 thread, C 320 64x64 -> 32x32, 121 tiles: 18.0-18.6
  // -> 13.8-15.4 ms; C 640 at 32x32, 36 tiles: 18.0-18.1 -> 15.6-16.1 ms;
  // C 1280 at 16x16, 9 tiles and 321 MB of U: even).
  const bool phases_2x2 = PhaseTaps(0, attrs.padding[0], kh).count == 2 && PhaseTaps(1, attrs.padding[0], kh).count == 2 &&
                          PhaseTaps(0, attrs.padding[1], kw).count == 2 && PhaseTaps(1, attrs.padding[1], kw).count == 2;
  const bool through_bf16 = x.dtype == DType::bf16 || w->dtype() == DType::bf16;
  const bool up = attrs.upsample_nearest2x, k3 = kh == 3 && kw == 3;
  const bool stride2 = !up && k3 && attrs.stride == std::array<std::int64_t, 2>{2, 2} &&
                       attrs.padding == std::array<std::int64_t, 2>{1, 1} && !through_bf16 &&
                       (y.shape[1] + 2) / 3 * ((y.shape[2] + 2) / 3) >= 28;
  const std::int64_t tile = up        ? (phases_2x2 && !through_bf16 ? 3 : 0)
                            : stride2 ? 3
                            : k3 && attrs.stride == ones ? (!through_bf16 ? 2 : ctx.isa() < hw::Isa::amx ? 4 : 0)
                                                         : 0;
  if (tile && attrs.dilation == ones && cig >= 16 && cog >= 16 && (x.dtype == DType::f32 || x.dtype == DType::bf16)) {
    const std::int64_t inputs = stride2 ? 4 : 1;  // V's row: each input's Cig channels
    const kernels::WinogradProblem problem{x.dtype, y.dtype, epilogue.residual ? epilogue.residual->dtype : DType::f32, inputs * cig,
                                           cog, tile};
    const auto* transforms = kernels::select<kernels::WinogradFamily>(problem, ctx.isa());
    if (transforms && transforms->isa > hw::Isa::scalar) {  // with scalar transforms the direct conv is faster
      using Of = ConvWeights::WinogradOf;
      const Of of = up ? Of::upsample_phases : stride2 ? Of::stride2_phases : Of::kernel;
      // F(4x4, 3x3) on 16 tiles a sample or fewer (16 x 16 outputs or less)
      // whose U would not stay in L3: U made per slice beside its GEMMs
      // (kernels/winograd.hpp) instead of streamed from memory for 16 tiles'
      // arithmetic, and no copy of it kept (AMD EPYC, bf16, 2 threads: C 1280
      // at 8 x 8 8.1-9.4 -> 5.9-6.1 ms; C 640 and 1280 at 16 x 16 even to
      // 1.1x, 1 thread even; at 32 x 32, 64 tiles, 1.2-1.5x slower: V's planes
      // re-read per panel of U; C 320, U in L3, 1.1-1.2x slower).
      const std::int64_t tiles_per_sample = (y.shape[1] + 3) / 4 * ((y.shape[2] + 3) / 4);
      const bool kernel_gemm = tile == 4 && transforms->run.kernel_gemm && tiles_per_sample <= 16 &&
                               kernels::winograd_planes(4) * cig * cog * 4 > ctx.hw().l3_bytes / 2;
      std::shared_ptr<const std::vector<WeightsPtr>> u;
      if (!kernel_gemm) {
        TESSERA_ASSIGN_OR_RETURN(u, w->winograd(of, tile, attrs.padding[0], attrs.padding[1]));
      }
      const std::int64_t planes = kernels::winograd_planes(tile);
      WinogradConvPlan::Spec spec{.transforms = transforms, .weights = u};
      spec.ld_v = kernels::in_place_row_stride(inputs * cig, DType::f32);
      spec.ld_m = kernel_gemm ? kernels::padded_n(cog) : kernels::round_up(cog, 16);
      const std::int64_t block = transforms->tiling(problem, ctx.hw()).tiles;
      // Part (a, b) of an upsampling conv: output rows of parity a, columns of parity b.
      for (std::int64_t a = 0; a < (up ? 2 : 1); ++a)
        for (std::int64_t b = 0; b < (up ? 2 : 1); ++b) {
          const std::int64_t rows = up ? (y.shape[1] - a + 1) / 2 : y.shape[1];
          const std::int64_t cols = up ? (y.shape[2] - b + 1) / 2 : y.shape[2], tiles_w = (cols + tile - 1) / tile;
          const std::int64_t pad_h = up ? -PhaseTaps(a, attrs.padding[0], kh).first : attrs.padding[0];
          const std::int64_t pad_w = up ? -PhaseTaps(b, attrs.padding[1], kw).first : attrs.padding[1];
          const std::int64_t step = up ? 2 : 1;
          WinogradPart part{.tiles = (rows + tile - 1) / tile * tiles_w};
          if (stride2) {  // x's phases x[2i + a][2j + b], as conv.cpp's kStride2Phases orders them
            for (const auto& [pa, pb] : kStride2Phases)
              part.inputs.push_back({{tile, (x.shape[1] - pa + 1) / 2, (x.shape[2] - pb + 1) / 2, cig, 1, 1, rows, cols, tiles_w,
                                      2 * x.strides[1], 2 * x.strides[2], x.dtype},
                                     pa * x.strides[1] + pb * x.strides[2]});
          } else {
            part.inputs.push_back(
                {{tile, x.shape[1], x.shape[2], cig, pad_h, pad_w, rows, cols, tiles_w, x.strides[1], x.strides[2], x.dtype}, 0});
          }
          part.plane_inputs = winograd_plane_inputs(stride2, planes);
          const std::int64_t blocks = (part.tiles + block - 1) / block;  // evened out: 121 tiles as 5 x 25, not 4 x 28 + 9
          const GemmChoice gemm =
              choose_gemm(ctx, DType::f32, DType::f32, DType::f32, *w, batch, part.tiles, inputs * cig, (part.tiles + blocks - 1) / blocks);
          part.row = gemm.row, part.tiling = gemm.tiling, part.n_chunk = gemm.n_chunk;
          part.y_at = a * y.strides[1] + b * y.strides[2], part.y_row = step * y.strides[1], part.y_pixel = step * y.strides[2];
          part.residual_at = a * res_h + b * res_w, part.residual_row = step * res_h, part.residual_pixel = step * res_w;
          const std::int64_t first_plane = (2 * a + b) * w->groups() * planes;
          for (std::int64_t i = 0; u && i < w->groups() * planes; ++i) part.packed.push_back(packed_view(*(*u)[std::size_t(first_plane + i)]));
          for (const auto& [first, count] : part.plane_inputs) spec.flops += 2 * batch * part.tiles * count * cig * w->out_channels();
          spec.parts.push_back(std::move(part));
        }
      if (u) {  // the GEMMs stream U instead of the weights
        std::int64_t u_bytes = 0;
        for (const WeightsPtr& plane : *u) u_bytes += plane->bytes();
        io.bytes = saturating_add(io.bytes, u_bytes - w->bytes());
      }
      return PlanPtr(std::make_shared<WinogradConvPlan>(io, std::move(spec)));
    }
  }

  ConvPlan::Spec spec{};
  const std::optional<std::int64_t> x_pixel = pixel_stride(x);
  spec.direct = kh == 1 && kw == 1 && attrs.stride == std::array<std::int64_t, 2>{1, 1} &&
                attrs.padding == std::array<std::int64_t, 2>{0, 0} && !attrs.upsample_nearest2x && x_pixel.has_value();
  spec.x_pixel = x_pixel.value_or(0);
  const auto add_gemm = [&](const kernels::Im2colGeometry& geometry, std::int64_t pixels, const std::vector<WeightsPtr>& weights) {
    ConvGemm gm{.im2col = geometry, .k = geometry.kernel_h * geometry.kernel_w * cig, .pixels = pixels};
    gm.ld = kernels::in_place_row_stride(gm.k, x.dtype);  // the gathered rows are the GEMM's A
    const GemmChoice c = choose_gemm(ctx, x.dtype, w->dtype(), y.dtype, *w, batch, pixels, gm.k);
    gm.row = c.row, gm.tiling = c.tiling, gm.n_chunk = c.n_chunk;
    gm.weights = weights;
    for (const WeightsPtr& b : weights) gm.packed.push_back(packed_view(*b));
    spec.flops += 2 * batch * pixels * w->out_channels() * gm.k;
    spec.gemms.push_back(std::move(gm));
    return &spec.gemms.back();
  };
  const std::size_t eb = bytes_of(x.dtype);
  if (attrs.upsample_nearest2x && attrs.stride == std::array<std::int64_t, 2>{1, 1} &&
      attrs.dilation == std::array<std::int64_t, 2>{1, 1}) {
    // The sub-pixel phases: output pixel (2i + a, 2j + b) is phase 2a + b's
    // pixel (i, j), a conv of x itself.
    TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<const ConvWeights::Phases> phases, w->upsample_phases(attrs.padding[0], attrs.padding[1]));
    io.bytes = saturating_add(io.bytes, phases->bytes - w->bytes());
    for (std::int64_t a = 0; a < 2; ++a)
      for (std::int64_t b = 0; b < 2; ++b) {
        const ConvWeights::Phases::Phase& ph = phases->phase[std::size_t(2 * a + b)];
        const std::int64_t rows = (y.shape[1] - a + 1) / 2, cols = (y.shape[2] - b + 1) / 2;
        if (rows == 0 || cols == 0) continue;
        ConvGemm* gm = add_gemm({x.shape[1], x.shape[2], cols, ph.h.count, ph.w.count, 1, 1, -ph.h.first, -ph.w.first, 1, 1, cig,
                                 false, x.strides[1], x.strides[2], eb},
                                rows * cols, ph.gemm);
        gm->run = cols;
        gm->y_at = a * y.strides[1] + b * y.strides[2], gm->y_pixel = 2 * y.strides[2], gm->y_run = 2 * y.strides[1];
        gm->residual_at = a * res_h + b * res_w, gm->residual_pixel = 2 * res_w, gm->residual_run = 2 * res_h;
        gm->tiling.m_block = std::max<std::int64_t>(1, gm->tiling.m_block / cols) * cols;  // whole runs
      }
  } else {
    const std::int64_t scale = attrs.upsample_nearest2x ? 2 : 1;
    ConvGemm* gm = add_gemm({x.shape[1] * scale, x.shape[2] * scale, y.shape[2], kh, kw, attrs.stride[0], attrs.stride[1],
                             attrs.padding[0], attrs.padding[1], attrs.dilation[0], attrs.dilation[1], cig,
                             attrs.upsample_nearest2x, x.strides[1], x.strides[2], eb},
                            y.shape[1] * y.shape[2], w->gemm_weights());
    gm->run = 0, gm->y_at = 0, gm->y_pixel = *y_pixel, gm->y_run = 0;
    gm->residual_at = 0, gm->residual_pixel = *residual_pixel, gm->residual_run = 0;
  }
  return PlanPtr(std::make_shared<ConvPlan>(io, std::move(spec)));
}

// ----------------------------------------------------------------- one-shot

Status conv2d(Stream& stream, const Tensor& x, const ConvWeightsPtr& w, const Tensor& y, const ConvAttrs& attrs,
              const EpilogueTensors& e) {
  // NCHW data (an NHWC view with channel stride != 1): one visible reorder
  // into a channels-last copy, which the queued conv keeps alive.
  Tensor nhwc = x;
  if (x.defined() && x.rank() == 4 && !unit_channels(x.desc())) {
    TESSERA_ASSIGN_OR_RETURN(nhwc, Tensor::empty(x.dtype(), x.shape()));
    TESSERA_RETURN_IF_ERROR(reorder(stream, x, nhwc));
  }
  std::vector<Tensor> in = {nhwc};
  PlanKey key("conv2d", stream.context().isa());
  key.add(std::int64_t(reinterpret_cast<std::intptr_t>(w.get())));  // the plan holds the weights
  for (int i = 0; i < 2; ++i) key.add(attrs.stride[i]).add(attrs.padding[i]).add(attrs.dilation[i]);
  key.add(std::int64_t(attrs.upsample_nearest2x)).add(nhwc.desc()).add(y.desc());
  const Epilogue ep = add_epilogue(e, in, key);
  const Tensor out[] = {y};
  return run_cached(stream, key, [&] { return Conv2d::plan(stream.context(), nhwc.desc(), w, y.desc(), attrs, ep); }, in, out);
}

}  // namespace tessera::ops
