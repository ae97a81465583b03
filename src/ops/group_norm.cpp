#include "tessera/ops/group_norm.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "core/element.hpp"
#include "kernels/group_norm.hpp"
#include "ops/common.hpp"

namespace tessera::ops {

using namespace detail;
using tessera::detail::load;
using tessera::detail::store;

namespace {

// The operands shaped like x; an absent one keeps x's strides as a stand-in.
enum Operand { kX, kResidual, kMul, kY, kSum, kOperands };
using Offsets = std::array<std::int64_t, kOperands>;

// Lines of `len` elements (`strides` apart along a line), in runs of lines
// with uniform strides (lines.inner) over the dims walked (lines.outer).
struct LineSpace {
  SplitDims<kOperands> lines;
  std::int64_t len = 1;
  Offsets strides{};
  std::int64_t count() const { return lines.outer.numel() * lines.inner; }
};

// The collapsed dims' last one is the line; the others give the lines.
LineSpace runs_of(const Shape& shape, const std::array<Strides, kOperands>& strides) {
  const auto runs = split_last(collapse<kOperands>(shape, strides));
  return {split_last(runs.outer), runs.inner, runs.inner_strides};
}

// Calls fn(offsets, n) for the lines [b, e) of `s`, in blocks of n lines with uniform strides.
template <class F>
void for_blocks(const LineSpace& s, std::int64_t b, std::int64_t e, F&& fn) {
  const auto& d = s.lines;
  while (b < e) {
    const std::int64_t i0 = b % d.inner, n = std::min(d.inner - i0, e - b);
    Offsets off = d.outer.offsets(b / d.inner);
    for (int k = 0; k < kOperands; ++k) off[k] += i0 * d.inner_strides[k];
    fn(off, n);
    b += n;
  }
}

// Count, mean and sum of squared deviations of a set of values.
struct Moments {
  double count = 0, mean = 0, m2 = 0;
};
// From the sums of d = v - shift and of d^2 over `count` values.
Moments moments(double shift, double s1, double s2, double count) {
  return {count, shift + s1 / count, std::max(0.0, s2 - s1 * s1 / count)};
}
// From per-channel sums of d = v - shift[c] and of d^2 (s1[c], s2[c]) over
// `count` values each, channels [0, channels): with e = shift[c] - mean,
// sum (v - mean)^2 = sum over c of s2 + 2 e s1 + count e^2, exact without a
// division per channel and without cancellation (no sum of v^2). Merging
// the channels' moments one by one (Chan et al.'s update) took four
// divisions a channel, in a chain: 16 k cycles for 320 channels, three
// quarters of a [1, 1, 1, 320] group norm's 6 us (AMD EPYC Zen 3).
Moments moments_of_channels(const float* shift, const double* s1, const double* s2, std::int64_t channels, double count) {
  double total = 0;
  for (std::int64_t c = 0; c < channels; ++c) total += shift[c] * count + s1[c];
  const double n = count * double(channels), mean = total / n;
  double m2 = 0;
  for (std::int64_t c = 0; c < channels; ++c) {
    const double e = shift[c] - mean;
    m2 += s2[c] + e * (2.0 * s1[c] + count * e);
  }
  return {n, mean, std::max(0.0, m2)};
}
// 1 / sqrt(var + eps); 0 for zero spread with eps = 0, so v - mean = 0 gives 0, not NaN.
double inv_std(const Moments& m, double eps) {
  const double var = m.m2 / m.count + eps;
  return var > 0 ? 1.0 / std::sqrt(var) : 0.0;
}

// v rounded to dtype t, as a store and a load would.
float rounded(float v, DType t) {
  alignas(8) std::byte buf[8]{};  // 8: the compiler cannot see t is a float type
  store(buf, t, 0, v);
  return load(buf, t, 0);
}

// The run-time tensors, by role.
struct Bound {
  std::array<char*, kOperands> data{};  // null: absent
  std::array<DType, kOperands> dtype{};
  struct Param {
    const void* data = nullptr;  // null: absent
    DType dtype = DType::f32;
    std::int64_t stride = 0;
    float at(std::int64_t c, float absent) const { return data ? load(data, dtype, c * stride) : absent; }
  } gamma, beta;

  // v at `o` as the kernels compute it: a value of the data to take deviations from.
  float value_at(const Offsets& o) const {
    float v = load(data[kX], dtype[kX], o[kX]);
    if (data[kResidual]) v += load(data[kResidual], dtype[kResidual], o[kResidual]);
    return data[kSum] ? rounded(v, dtype[kSum]) : v;
  }

  kernels::GroupNormLines lines(const Offsets& base, const Offsets& off, std::int64_t n, const LineSpace& s) const {
    auto operand = [&](int k) {
      return kernels::GroupNormOperand{data[k] ? data[k] + (base[k] + off[k]) * bytes_of(dtype[k]) : nullptr, dtype[k],
                                       s.lines.inner_strides[k], s.strides[k]};
    };
    return {operand(kX), operand(kResidual), operand(kMul), operand(kY), operand(kSum), n, s.len};
  }
};

// What plan() works out.
struct GroupNormState {
  std::vector<TensorDesc> inputs, outputs;
  std::vector<std::string_view> input_names, output_names;
  int residual = -1, gamma = -1, beta = -1, mul = -1;  // index in inputs; -1: absent
  GroupNormAttrs attrs;
  std::int64_t n = 0, c = 0, spatial = 0;  // spatial: values per channel and n
  Offsets n_strides{}, c_strides{};
  // Channels first: a group's runs (stats) and a channel's runs (apply).
  // Channels last: pixels, lines of C channels (both).
  LineSpace stats, apply;
  // The pool's work: units of (n, group) channels first, of (n, block of
  // rows_per_unit pixels) channels last; units_per_task of them per task.
  std::int64_t units = 0, units_per_task = 1, rows_per_unit = 0, blocks = 0;
  // Channels last: samples whose statistics and output are computed before
  // the next ones are read, so that the apply pass finds them in the L3.
  std::int64_t samples_per_pass = 1;
  // Channels last: the apply pass fetches the next pass's x and residual
  // into cache (GroupNormCoefs::next_x), so that pass's statistics read them
  // from there while this one's arithmetic runs; when a pass fits in the L3.
  bool fetch_next_pass = false;
  bool stream_y = false;  // y past the L3: streaming stores
  bool from_memory = false;  // the operands past the L3: the statistics read them from memory
};

class GroupNormPlan final : public Plan {
 public:
  GroupNormPlan(GroupNormState s, const kernels::KernelRow<kernels::GroupNormFamily>* row, std::int64_t bytes,
                std::int64_t flops)
      : Plan(row->name, bytes, flops), s_(std::move(s)), kernels_(row->run) {}

  std::string_view op() const override { return "group_norm"; }

  // Channels last: per unit, f64 sums (2C) and f32 partials (2C); per n, the
  // shift row (C) and the coefficients mean, scale, bias (3C).
  std::int64_t workspace_bytes() const override {
    if (!s_.attrs.channels_last) return 0;
    return s_.units * 2 * s_.c * (8 + 4) + s_.n * 4 * s_.c * 4;
  }

  Status do_run(Stream& stream, std::span<const Tensor> in, std::span<const Tensor> out, void* workspace) const override {
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), in, s_.inputs, s_.input_names));
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), out, s_.outputs, s_.output_names));
    const bool has_sum = out.size() == 2;
    for (std::size_t i = 0; i < in.size(); ++i) {
      const bool x_or_residual = i == 0 || int(i) == s_.residual;
      TESSERA_RETURN_IF_ERROR(check_overlap(out[0], "y", in[i], s_.input_names[i], i == 0 && in[i].dtype() == out[0].dtype()));
      if (has_sum)
        TESSERA_RETURN_IF_ERROR(check_overlap(out[1], "sum", in[i], s_.input_names[i], x_or_residual && in[i].dtype() == out[1].dtype()));
    }
    if (has_sum) TESSERA_RETURN_IF_ERROR(check_overlap(out[1], "sum", out[0], "y", false));
    return stream.submit(op(), [&] {
      if (s_.units == 0) return Status{};  // a dim of size 0: empty result
      const Bound t = bind(in, out);
      if (s_.attrs.channels_last)
        run_channels_last(stream.pool(), t, workspace);
      else
        run_channels_first(stream.pool(), t);
      return Status{};
    });
  }

 private:
  Bound bind(std::span<const Tensor> in, std::span<const Tensor> out) const {
    Bound t;
    auto set = [&](Operand k, const Tensor& tensor) {
      t.data[k] = const_cast<char*>(byte_ptr(tensor));
      t.dtype[k] = tensor.dtype();
    };
    set(kX, in[0]);
    set(kY, out[0]);
    if (s_.residual >= 0) set(kResidual, in[s_.residual]);
    if (s_.mul >= 0) set(kMul, in[s_.mul]);
    if (out.size() == 2) set(kSum, out[1]);
    if (s_.gamma >= 0) t.gamma = {in[s_.gamma].data(), in[s_.gamma].dtype(), in[s_.gamma].strides()[0]};
    if (s_.beta >= 0) t.beta = {in[s_.beta].data(), in[s_.beta].dtype(), in[s_.beta].strides()[0]};
    return t;
  }

  Offsets offsets_at(std::int64_t n, std::int64_t c) const {
    Offsets o;
    for (int k = 0; k < kOperands; ++k) o[k] = n * s_.n_strides[k] + c * s_.c_strides[k];
    return o;
  }

  // A unit is one (n, group): its statistics, then its channels, while the
  // group (C/G x spatial values) is still in cache.
  void run_channels_first(ThreadPool& pool, const Bound& t) const {
    const std::int64_t groups = s_.attrs.groups, cg = s_.c / groups;
    pool.parallel_for(s_.units, s_.units_per_task, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t u = b; u < e; ++u) {
        const std::int64_t n = u / groups, c0 = u % groups * cg;
        const Offsets base = offsets_at(n, c0);
        const float shift = t.value_at(base);
        double sums[2] = {0.0, 0.0};
        for_blocks(s_.stats, 0, s_.stats.count(), [&](const Offsets& off, std::int64_t lines) {
          kernels_.run_stats(t.lines(base, off, lines, s_.stats), shift, sums);
        });
        const Moments m = moments(shift, sums[0], sums[1], double(cg * s_.spatial));
        const double inv = inv_std(m, s_.attrs.eps);
        for (std::int64_t c = c0; c < c0 + cg; ++c) {
          const float mean = float(m.mean), scale = float(t.gamma.at(c, 1.0f) * inv), bias = t.beta.at(c, 0.0f);
          const kernels::GroupNormCoefs coefs{&mean, &scale, &bias, 0, s_.attrs.silu, s_.stream_y};
          const Offsets plane = offsets_at(n, c);
          for_blocks(s_.apply, 0, s_.apply.count(), [&](const Offsets& off, std::int64_t lines) {
            kernels_.apply(t.lines(plane, off, lines, s_.apply), coefs);
          });
        }
      }
    });
  }

  // A unit is a block of pixels of one n. Every pixel holds all groups, so
  // the statistics need every pixel before any y: one pass for per-channel
  // sums (per unit), a fold of units and channels into groups, then a pass
  // that applies per-channel coefficients. Samples go through the three steps
  // a few at a time (samples_per_pass), so the last step reads them from cache.
  void run_channels_last(ThreadPool& pool, const Bound& t, void* workspace) const {
    const std::int64_t C = s_.c;
    double* sums = static_cast<double*>(workspace);  // [units][2C]
    float* scratch = reinterpret_cast<float*>(sums + s_.units * 2 * C);  // [units][2C]
    float* shift = scratch + s_.units * 2 * C;  // [N][C]: pixel 0's values
    float* coefs = shift + s_.n * C;  // [N][3][C]: mean, scale, bias
    for (std::int64_t n = 0; n < s_.n; ++n)
      for (std::int64_t c = 0; c < C; ++c) shift[n * C + c] = t.value_at(offsets_at(n, c));
    for (std::int64_t n0 = 0; n0 < s_.n; n0 += s_.samples_per_pass)
      run_samples(pool, t, n0, std::min(s_.n, n0 + s_.samples_per_pass), sums, scratch, shift, coefs);
  }

  // The three steps of run_channels_last for samples [n0, n1).
  void run_samples(ThreadPool& pool, const Bound& t, std::int64_t n0, std::int64_t n1, double* sums, float* scratch,
                   const float* shift, float* coefs) const {
    const std::int64_t C = s_.c, cg = C / s_.attrs.groups;
    const std::int64_t u0 = n0 * s_.blocks, units = (n1 - n0) * s_.blocks;

    // Calls fn(unit, n, base offsets, first pixel, end pixel) for the units [b, e).
    auto for_units = [&](std::int64_t b, std::int64_t e, auto&& fn) {
      for (std::int64_t u = b; u < e; ++u) {
        const std::int64_t n = u / s_.blocks, p0 = u % s_.blocks * s_.rows_per_unit;
        fn(u, n, offsets_at(n, 0), p0, std::min(s_.spatial, p0 + s_.rows_per_unit));
      }
    };
    pool.parallel_for(units, s_.units_per_task, [&](std::int64_t b, std::int64_t e) {
      for_units(u0 + b, u0 + e, [&](std::int64_t u, std::int64_t n, const Offsets& base, std::int64_t p0, std::int64_t p1) {
        double* s = sums + u * 2 * C;
        std::fill(s, s + 2 * C, 0.0);
        for_blocks(s_.stats, p0, p1, [&](const Offsets& off, std::int64_t lines) {
          kernels::GroupNormLines l = t.lines(base, off, lines, s_.stats);
          l.from_memory = s_.from_memory;
          kernels_.column_stats(l, shift + n * C, s, scratch + u * 2 * C);
        });
      });
    });

    for (std::int64_t n = n0; n < n1; ++n) {
      float* mean = coefs + n * 3 * C;
      float* scale = mean + C;
      float* bias = scale + C;
      double* s = sums + n * s_.blocks * 2 * C;  // the blocks' sums added into the first's
      for (std::int64_t blk = 1; blk < s_.blocks; ++blk)
        for (std::int64_t c = 0; c < 2 * C; ++c) s[c] += s[blk * 2 * C + c];
      for (std::int64_t c0 = 0; c0 < C; c0 += cg) {
        const Moments m = moments_of_channels(shift + n * C + c0, s + c0, s + C + c0, cg, double(s_.spatial));
        const double inv = inv_std(m, s_.attrs.eps);
        for (std::int64_t c = c0; c < c0 + cg; ++c) {
          mean[c] = float(m.mean);
          scale[c] = float(t.gamma.at(c, 1.0f) * inv);
          bias[c] = t.beta.at(c, 0.0f);
        }
      }
    }

    pool.parallel_for(units, s_.units_per_task, [&](std::int64_t b, std::int64_t e) {
      for_units(u0 + b, u0 + e, [&](std::int64_t, std::int64_t n, const Offsets& base, std::int64_t p0, std::int64_t p1) {
        const float* mean = coefs + n * 3 * C;
        kernels::GroupNormCoefs k{mean, mean + C, mean + 2 * C, 1, s_.attrs.silu, s_.stream_y};
        if (s_.fetch_next_pass && n + s_.samples_per_pass < s_.n) {
          k.next_x = s_.samples_per_pass * s_.n_strides[kX] * bytes_of(t.dtype[kX]);
          if (t.data[kResidual]) k.next_residual = s_.samples_per_pass * s_.n_strides[kResidual] * bytes_of(t.dtype[kResidual]);
        }
        for_blocks(s_.apply, p0, p1, [&](const Offsets& off, std::int64_t lines) {
          kernels_.apply(t.lines(base, off, lines, s_.apply), k);
        });
      });
    });
  }

  GroupNormState s_;
  kernels::GroupNormKernels kernels_;
};

Status check_param(const std::optional<TensorDesc>& d, std::string_view name, std::int64_t channels) {
  if (!d) return {};
  TESSERA_RETURN_IF_ERROR(d->validate(name));
  TESSERA_RETURN_IF_ERROR(check_float(*d, name));
  TESSERA_RETURN_IF_ERROR(check_rank(*d, name, 1, 1));
  return check_same_shape(*d, name, Shape{channels}, "x's channel count");
}

Status check_like_x(const std::optional<TensorDesc>& d, std::string_view name, const TensorDesc& x, bool output) {
  if (!d) return {};
  TESSERA_RETURN_IF_ERROR(d->validate(name));
  TESSERA_RETURN_IF_ERROR(check_float(*d, name));
  TESSERA_RETURN_IF_ERROR(check_same_shape(*d, name, x.shape, "x's shape"));
  return output ? check_writable(*d, name) : Status{};
}

}  // namespace

Result<PlanPtr> GroupNorm::plan(Context& ctx, const TensorDesc& x, const std::optional<TensorDesc>& gamma,
                                const std::optional<TensorDesc>& beta, const TensorDesc& y, const GroupNormAttrs& attrs,
                                const GroupNormFusion& fusion) {
  TESSERA_RETURN_IF_ERROR(x.validate("x"));
  TESSERA_RETURN_IF_ERROR(check_float(x, "x"));
  TESSERA_RETURN_IF_ERROR(check_rank(x, "x", 2));
  const int rank = x.rank(), channel_dim = attrs.channels_last ? rank - 1 : 1;
  const std::int64_t C = x.shape[channel_dim];
  if (attrs.groups <= 0) return Status::invalid_argument(fmt::format("groups: {} is not > 0", attrs.groups));
  if (C % attrs.groups != 0)
    return Status::invalid_argument(fmt::format("groups: {} does not divide x's {} channels (dim {} of shape {})",
                                                attrs.groups, C, channel_dim, x.shape.to_string()));
  if (!std::isfinite(attrs.eps) || attrs.eps < 0)
    return Status::invalid_argument(fmt::format("eps: {} is not a finite value >= 0", attrs.eps));
  TESSERA_RETURN_IF_ERROR(check_like_x(y, "y", x, true));
  TESSERA_RETURN_IF_ERROR(check_param(gamma, "gamma", C));
  TESSERA_RETURN_IF_ERROR(check_param(beta, "beta", C));
  TESSERA_RETURN_IF_ERROR(check_like_x(fusion.residual, "residual", x, false));
  TESSERA_RETURN_IF_ERROR(check_like_x(fusion.mul, "mul", x, false));
  TESSERA_RETURN_IF_ERROR(check_like_x(fusion.sum, "sum", x, true));

  GroupNormState s;
  s.attrs = attrs;
  auto add_input = [&](const std::optional<TensorDesc>& d, std::string_view name) {
    if (!d) return -1;
    s.inputs.push_back(*d);
    s.input_names.push_back(name);
    return int(s.inputs.size()) - 1;
  };
  add_input(x, "x");
  s.residual = add_input(fusion.residual, "residual");
  s.gamma = add_input(gamma, "gamma");
  s.beta = add_input(beta, "beta");
  s.mul = add_input(fusion.mul, "mul");
  s.outputs = {y};
  s.output_names = {"y"};
  if (fusion.sum) s.outputs.push_back(*fusion.sum), s.output_names.push_back("sum");

  const std::array<const std::optional<TensorDesc>*, kOperands> given{nullptr, &fusion.residual, &fusion.mul, nullptr, &fusion.sum};
  std::array<const TensorDesc*, kOperands> descs{};
  std::array<bool, kOperands> present{};
  for (int k = 0; k < kOperands; ++k) {
    present[k] = !given[k] || given[k]->has_value();
    descs[k] = k == kY ? &y : present[k] && given[k] ? &**given[k] : &x;
  }
  Shape spatial;
  std::array<Strides, kOperands> spatial_strides, group_strides;
  Shape group = {C / attrs.groups};  // channels first: a group is [C/G, spatial...]
  for (int k = 0; k < kOperands; ++k) {
    s.n_strides[k] = descs[k]->strides[0];
    s.c_strides[k] = descs[k]->strides[channel_dim];
    group_strides[k].push_back(s.c_strides[k]);
  }
  for (int i = 1; i < rank; ++i) {
    if (i == channel_dim) continue;
    spatial.push_back(x.shape[i]);
    group.push_back(x.shape[i]);
    for (int k = 0; k < kOperands; ++k) {
      spatial_strides[k].push_back(descs[k]->strides[i]);
      group_strides[k].push_back(descs[k]->strides[i]);
    }
  }
  s.n = x.shape[0];
  s.c = C;
  s.spatial = x.numel() / std::max<std::int64_t>(1, s.n * C);
  if (attrs.channels_last) {
    s.stats.lines = split_last(collapse<kOperands>(spatial, spatial_strides));
    s.stats.len = C;
    s.stats.strides = s.c_strides;
    s.apply = s.stats;
  } else {
    s.stats = runs_of(group, group_strides);
    s.apply = runs_of(spatial, spatial_strides);
  }

  bool unit_stride = true;
  std::int64_t bytes_per_element = 0, bytes = 0;
  for (int k = 0; k < kOperands; ++k) {
    if (!present[k]) continue;
    bytes_per_element += bytes_of(descs[k]->dtype);
    bytes = saturating_add(bytes, traffic_bytes({*descs[k]}));
    for (const LineSpace* ls : {&s.stats, &s.apply}) unit_stride = unit_stride && (ls->strides[k] == 1 || ls->len <= 1);
  }
  const kernels::GroupNormProblem problem{x.numel(), bytes_per_element, unit_stride, y.dtype, attrs.silu};
  const auto* row = kernels::select<kernels::GroupNormFamily>(problem, ctx.isa());
  s.stream_y = row->tiling(problem, ctx.hw()).stream_output;
  s.from_memory = bytes > ctx.hw().l3_bytes;
  if (x.numel() > 0) {
    if (attrs.channels_last) {
      // A pass holds as many samples as the cores' L2 caches do, at least
      // one: the apply pass rereads what the stats pass read, and a reread of
      // a few MiB from the L3 is faster than one of many. Passes of a quarter
      // of the L3 (28 UNet latents) were 1.15-1.3x slower at 1 thread and
      // 1.3x at 2 than passes of one (bf16 and f32, large, interleaved).
      // Tasks are sized for one pass, the work between two waits.
      s.samples_per_pass = std::clamp<std::int64_t>(ctx.hw().l2_bytes * ctx.hw().cores / (s.spatial * C * bytes_per_element), 1, s.n);
      // The statistics read memory and the apply computes on cached data:
      // fetching ahead overlaps the two. With passes larger than the L3, the
      // lines fetched would be gone again before their pass (an SD VAE
      // decoder's 512 x 512 x 128 latents). UNet latents [16, 64, 64, 320]
      // with a residual and SiLU, 1 / 2 threads, alternating: bf16 9.5 ->
      // 8.2 ms, 5.4 -> 4.6; plain group norm bf16 4.7 -> 4.1 ms; f32 (passes
      // past this L3's 8 MiB) even.
      s.fetch_next_pass = s.samples_per_pass * s.spatial * C * bytes_per_element <= ctx.hw().l3_bytes;
      const kernels::GroupNormProblem pass{s.samples_per_pass * s.spatial * C, bytes_per_element, unit_stride, y.dtype, attrs.silu};
      const std::int64_t grain = row->tiling(pass, ctx.hw()).grain;
      s.rows_per_unit = std::clamp<std::int64_t>(grain / C, 1, s.spatial);
      s.blocks = (s.spatial + s.rows_per_unit - 1) / s.rows_per_unit;
      s.units = s.n * s.blocks;
      s.units_per_task = std::max<std::int64_t>(1, grain / (s.rows_per_unit * C));
    } else {
      const std::int64_t grain = row->tiling(problem, ctx.hw()).grain;
      s.units = s.n * attrs.groups;
      s.units_per_task = std::max<std::int64_t>(1, grain / (C / attrs.groups * s.spatial));
    }
  }

  for (const std::optional<TensorDesc>* param : {&gamma, &beta})
    if (*param) bytes = saturating_add(bytes, traffic_bytes({**param}));
  // Per element: stats sub, add, fma; apply sub, fma; silu ~4; the residual add and the multiply.
  const std::int64_t flops_per_element = 6 + (attrs.silu ? 4 : 0) + (fusion.residual ? 1 : 0) + (fusion.mul ? 1 : 0);
  return PlanPtr(std::make_shared<GroupNormPlan>(std::move(s), row, bytes, saturating_mul(flops_per_element, x.numel())));
}

namespace {
Status run_group_norm(Stream& stream, const Tensor& x, const std::optional<Tensor>& residual,
                      const std::optional<Tensor>& gamma, const std::optional<Tensor>& beta, const Tensor& y,
                      const GroupNormAttrs& attrs, const std::optional<Tensor>& mul, const std::optional<Tensor>& sum) {
  auto desc = [](const std::optional<Tensor>& t) { return t ? std::optional(t->desc()) : std::nullopt; };
  PlanKey key("group_norm", stream.context().isa());
  key.add(attrs.groups).add(attrs.eps).add(std::int64_t(attrs.channels_last)).add(std::int64_t(attrs.silu));
  std::vector<Tensor> in{x}, out{y};
  key.add(x.desc()).add(y.desc());
  for (const std::optional<Tensor>* t : {&residual, &gamma, &beta, &mul}) {
    key.add(std::int64_t(t->has_value()));
    if (*t) key.add((*t)->desc()), in.push_back(**t);
  }
  key.add(std::int64_t(sum.has_value()));
  if (sum) key.add(sum->desc()), out.push_back(*sum);
  return run_cached(
      stream, key,
      [&] {
        return GroupNorm::plan(stream.context(), x.desc(), desc(gamma), desc(beta), y.desc(), attrs,
                               {desc(residual), desc(mul), desc(sum)});
      },
      in, out);
}
}  // namespace

Status group_norm(Stream& stream, const Tensor& x, const std::optional<Tensor>& gamma,
                  const std::optional<Tensor>& beta, const Tensor& y, const GroupNormAttrs& attrs) {
  return run_group_norm(stream, x, std::nullopt, gamma, beta, y, attrs, std::nullopt, std::nullopt);
}

Status residual_group_norm(Stream& stream, const Tensor& x, const Tensor& residual, const std::optional<Tensor>& gamma,
                           const std::optional<Tensor>& beta, const Tensor& y, const GroupNormAttrs& attrs,
                           const std::optional<Tensor>& mul, const std::optional<Tensor>& sum) {
  return run_group_norm(stream, x, residual, gamma, beta, y, attrs, mul, sum);
}

}  // namespace tessera::ops
