#include "tessera/ops/matmul.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/element.hpp"
#include "kernels/matmul.hpp"
#include "ops/common.hpp"
#include "ops/epilogue.hpp"
#include "runtime/log_format.hpp"
#include "tessera/ops/elementwise.hpp"

namespace tessera::ops {

using namespace detail;

namespace {

using Row = kernels::KernelRow<kernels::MatmulFamily>;

// Where the matrices of a batch are: batch dims walked for operands
// (a, b, c, residual), and the strides inside one matrix. Linear has no b:
// its slot walks QuantizedLinear's a_scales (b_rs: from row to row).
struct Geometry {
  StridedDims<4> batch;
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t a_rs = 0, a_cs = 0, b_rs = 0, b_cs = 0, c_rs = 0, c_cs = 0, r_rs = 0, r_cs = 0;
};

// The tiling parameters each row's kernel reads, as the grain its tiling
// function produces them in and its kernel accepts (0: the kernel does not
// read the parameter). AMX, bf16 dot and int8 VNNI: K in whole tile steps
// of B's layout; AMX: 16-row A tiles; every row: N in whole packed panels
// (tasks index panels by n0). The register-blocked rows accept any M block
// (14 rows is their micro-tile); the f32 rows any K block (16 is their
// tiling's step). Decode (M <= 4) takes all its rows and all of K at once;
// the int4 and weight-only int8 VNNI rows take all of K and their rows in
// passes of 4. The reference row is not tuned.
struct TilingGrains {
  kernels::MatmulFamily::Run run;
  std::int64_t m_block, n_block, k_block;
};
constexpr TilingGrains kTilingGrains[] = {
    {kernels::avx512::matmul_decode, 0, kernels::kPanelCols, 0},
    {kernels::avx512_bf16::matmul_i4_vnni, 4, kernels::kPanelCols, 0},
    {kernels::avx512_bf16::matmul_w8_vnni, 4, kernels::kPanelCols, 0},
    {kernels::amx::matmul_int8, 16, kernels::kPanelCols, kernels::kI8KStep},
    {kernels::amx::matmul_bf16, 16, kernels::kPanelCols, kernels::kBf16KStep},
    {kernels::avx512_bf16::matmul_int8_vnni, 14, kernels::kPanelCols, kernels::kI8KStep},
    {kernels::avx512_bf16::matmul_bf16_dot, 14, kernels::kPanelCols, kernels::kBf16KStep},
    {kernels::avx512::matmul_f32, 14, kernels::kPanelCols, 16},
    {kernels::avx2::matmul_f32, 14, kernels::kPanelCols, 16},
};

// One tunable parameter of a plan: a positive multiple of `grain` up to
// `limit`, the value that covers the whole dimension (one block of rows or
// of columns, all of K); larger values act exactly as the limit does.
struct TilingParam {
  std::string_view name;
  std::int64_t kernels::MatmulTiling::*field;
  std::int64_t grain, limit;

  bool valid(std::int64_t v) const { return v >= grain && v <= limit && v % grain == 0; }
  // What `t` sets this parameter to, as a value of the grid. The rows'
  // tilings give multiples of the grain, or values past the whole dimension.
  std::int64_t value(const kernels::MatmulTiling& t) const {
    return std::min(kernels::round_up(std::max<std::int64_t>(t.*field, 1), grain), limit);
  }
  // From a quarter to four times `v`, rounded to the grid; `v` among them.
  std::vector<std::int64_t> candidates(std::int64_t v) const {
    std::vector<std::int64_t> out{v};
    for (auto [num, den] : {std::pair<std::int64_t, std::int64_t>{1, 4}, {1, 2}, {3, 4}, {3, 2}, {2, 1}, {4, 1}}) {
      const std::int64_t scaled = std::min(saturating_mul(v, num) / den, limit);
      out.push_back(std::clamp((scaled + grain / 2) / grain * grain, grain, limit));
    }
    std::ranges::sort(out);
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }
};

// The parameters `row` reads, for an M x N x K problem; none for rows not tuned.
std::vector<TilingParam> tiling_params(const Row& row, std::int64_t m, std::int64_t n, std::int64_t k) {
  std::vector<TilingParam> params;
  for (const TilingGrains& grains : kTilingGrains) {
    if (grains.run != row.run) continue;
    auto add = [&](std::string_view name, std::int64_t kernels::MatmulTiling::*field, std::int64_t grain, std::int64_t dim) {
      if (grain > 0) params.push_back({name, field, grain, kernels::round_up(std::max<std::int64_t>(dim, 1), grain)});
    };
    add("m_block", &kernels::MatmulTiling::m_block, grains.m_block, m);
    add("n_block", &kernels::MatmulTiling::n_block, grains.n_block, n);
    add("k_block", &kernels::MatmulTiling::k_block, grains.k_block, k);
  }
  return params;
}

class GemmPlan final : public Plan {
 public:
  struct Spec {
    std::string_view op;
    std::vector<TensorDesc> inputs;  // a, [b], [bias], [residual]
    std::vector<std::string_view> names;
    TensorDesc c;
    const Row* row;
    kernels::MatmulTiling tiling;
    Geometry g;
    Epilogue epilogue;
    WeightsPtr weights;
    // W8A8: the pre-pass that quantizes A's rows into the workspace (the
    // best one under the context's ISA ceiling); null otherwise.
    decltype(&kernels::ref::w8a8_quantize_rows) quantize_a = nullptr;
    // QuantizedLinear: A comes as int8 with its scales (inputs[1]), copied
    // into the workspace in the layout quantize_a writes.
    bool a_prequantized = false;
    bool int8_a() const { return quantize_a || a_prequantized; }
    // A converted once into the workspace, where each of several tasks
    // along N would pack (and round) its own rows per K slice: the pre-pass
    // (kernels::round_a_rows, copy_a_rows; null: none), the dtype it
    // writes, its blocks' width, and whether its rows stand in for A, read
    // in place (the register-blocked rows: one block as wide as K, rows
    // spread over L1), or come as MatmulArgs::a_bf16 (AMX: blocks of its K
    // slice).
    decltype(&kernels::amx::round_a_rows) a_pass = nullptr;
    DType a_pass_dtype = DType::bf16;
    std::int64_t a_pass_slice = 0;
    bool a_pass_as_a = false;
    std::int64_t bytes = 0;
    std::string tuning_key;  // "": the row has no tiling to tune
    // LinearOptions::dynamic_rows: a and c (and the residual) are 2-D and
    // may come with fewer rows than g.m; the bytes and FLOPs stay g.m's.
    // a_scales_per_row: QuantizedLinear's a_scales are [g.m, 1], so theirs too.
    bool dynamic_rows = false;
    bool a_scales_per_row = false;
  };

  explicit GemmPlan(Spec s)
      : Plan(s.row->name, s.bytes,
             saturating_mul(saturating_mul(2 * s.g.batch.numel(), s.g.m), saturating_mul(s.g.n, s.g.k))),
        s_(std::move(s)) {
    if (s_.weights) {
      const PackedWeights& w = *s_.weights;
      packed_ = {w.dtype(), w.k(), w.n(), w.values(), w.scales(), w.quant().scale_dtype, w.zeros(), w.group_size(), w.column_offsets()};
    }
  }

  std::string_view op() const override { return s_.op; }

  std::string tuning_key() const override { return s_.tuning_key; }
  std::vector<TuningParam> tuning_params() const override {
    std::vector<TuningParam> out;
    for (const TilingParam& p : tiling_params(*s_.row, s_.g.m, s_.g.n, s_.g.k)) {
      const std::int64_t value = p.value(s_.tiling);
      out.push_back({p.name, value, p.candidates(value)});
    }
    return out;
  }

  // The pre-pass's rows of A: W8A8's int8 rows, then one f32 scale per
  // row; or the AMX row's bf16 blocks.
  std::int64_t workspace_bytes() const override {
    const std::int64_t matrices = s_.g.batch.numel();
    if (s_.int8_a()) return q_values_bytes() + matrices * pre_rows() * 4;
    return s_.a_pass ? matrices * a_pass_matrix_elems() * std::int64_t(bytes_of(s_.a_pass_dtype)) : 0;
  }

  Status do_run(Stream& stream, std::span<const Tensor> in, std::span<const Tensor> out, void* workspace) const override {
    static constexpr std::string_view kOut[] = {"c"};
    const std::size_t n_in = in.size(), residual = s_.epilogue.residual ? n_in - 1 : n_in;
    Geometry g = s_.g;
    std::vector<TensorDesc> inputs = s_.inputs;
    TensorDesc c = s_.c;
    if (s_.dynamic_rows && !in.empty()) {  // the rows a brings, up to the planned M
      g.m = in[0].rank() == 2 ? in[0].dim(0) : -1;
      if (g.m < 0 || g.m > s_.g.m)
        return Status::invalid_argument(fmt::format("{}: a: shape {}: a dynamic-rows plan takes [M <= {}, {}]", op(),
                                                    in[0].shape().to_string(), s_.g.m, s_.g.k));
      inputs[0].shape[0] = c.shape[0] = g.m;
      if (s_.a_scales_per_row) inputs[1].shape[0] = g.m;
      if (s_.epilogue.residual) inputs.back().shape[0] = g.m;
    }
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), in, inputs, s_.names));
    TESSERA_RETURN_IF_ERROR(check_tensors(op(), out, std::span(&c, 1), kOut));
    for (std::size_t i = 0; i < n_in; ++i)
      TESSERA_RETURN_IF_ERROR(check_overlap(out[0], "c", in[i], s_.names[i], i == residual));
    return stream.submit(op(), [&] {
      execute(stream.pool(), g, in, out[0], workspace);
      return Status{};
    });
  }

 private:
  std::int64_t pre_rows() const { return kernels::round_up(s_.g.m, 16); }  // AMX reads A in 16-row tiles
  // W8A8: [batch][pre_rows()][q_stride()], K in whole lines. Rows a multiple
  // of 1 KiB apart (K = 4096) would fall in the same few L1 sets, so that a
  // tile's 16 rows (a micro-tile's 14) evict each other: a line of padding
  // spreads them (AMX, M = 128 and 512: 1.3x faster).
  std::int64_t q_stride() const {
    const std::int64_t stride = kernels::round_up(std::max<std::int64_t>(s_.g.k, 1), 64);
    return stride % 1024 == 0 ? stride + 64 : stride;
  }
  std::int64_t q_values_bytes() const { return kernels::round_up(s_.g.batch.numel() * pre_rows() * q_stride(), 64); }
  // A after the pre-pass: per matrix, its columns in blocks of
  // s_.a_pass_slice, each pre_rows() rows. AMX: the row's K slice, so that
  // the 32 rows a block of C reads per slice lie together, as a task's own
  // copy put them (read with a row stride of 8 KiB, even from L2, tiles were
  // 10 % slower).
  std::int64_t a_pass_blocks() const { return (s_.g.k + s_.a_pass_slice - 1) / s_.a_pass_slice; }
  std::int64_t a_pass_matrix_elems() const { return a_pass_blocks() * pre_rows() * s_.a_pass_slice; }

  // rows(p, matrix, m0, m1) for the rows of every matrix of the batch, once,
  // split over the pool. The workspace is laid out for the planned M (s_.g);
  // `g` holds the rows of this run.
  template <class Rows>
  void pre_pass(ThreadPool& pool, const Geometry& g, const kernels::MatmulArgs& args, const char* a, Rows&& rows) const {
    const std::int64_t grain = std::max<std::int64_t>(1, (64 << 10) / std::max<std::int64_t>(g.k, 1));
    pool.parallel_for(g.batch.numel() * g.m, grain, [&](std::int64_t b, std::int64_t e) {
      while (b < e) {
        const std::int64_t matrix = b / g.m, m0 = b % g.m, m1 = std::min(g.m, m0 + (e - b));
        kernels::MatmulArgs p = args;
        p.a = a + g.batch.offsets(matrix)[0] * bytes_of(args.a_dtype);
        rows(p, matrix, m0, m1);
        b += m1 - m0;
      }
    });
  }

  void execute(ThreadPool& pool, const Geometry& g, std::span<const Tensor> in, const Tensor& c, void* workspace) const {
    const TensorDesc& a = s_.inputs[0];
    const bool has_b = !s_.weights;
    std::size_t next = has_b || s_.a_prequantized ? 2 : 1;
    const Tensor* bias = s_.epilogue.bias ? &in[next++] : nullptr;
    const Tensor* res = s_.epilogue.residual ? &in[next] : nullptr;
    kernels::MatmulArgs args{};
    args.a_dtype = a.dtype;
    args.b_dtype = has_b ? s_.inputs[1].dtype : packed_.dtype;
    args.c_dtype = s_.c.dtype;
    args.k = g.k;
    args.a_row_stride = g.a_rs, args.a_col_stride = g.a_cs;
    args.b_row_stride = g.b_rs, args.b_col_stride = g.b_cs;
    args.packed = has_b ? nullptr : &packed_;
    args.c_row_stride = g.c_rs, args.c_col_stride = g.c_cs;
    args.ep = {s_.epilogue.scale, static_cast<kernels::Act>(s_.epilogue.activation), bias ? bias->data() : nullptr,
               bias ? bias->dtype() : DType::f32, nullptr, res ? res->dtype() : DType::f32, g.r_rs, g.r_cs};
    // The pre-passes, into the workspace (a caller may pass it unasked). Rows
    // past M, up to the 16-row tiles the kernels read, are zero.
    const std::int64_t tile_rows = kernels::round_up(g.m, 16), ldq = q_stride();
    auto* q = s_.int8_a() ? static_cast<std::int8_t*>(workspace) : nullptr;
    auto* q_scales = q ? reinterpret_cast<float*>(q + q_values_bytes()) : nullptr;
    if (q) {
      for (std::int64_t matrix = 0; matrix < g.batch.numel(); ++matrix)
        std::memset(q + (matrix * pre_rows() + g.m) * ldq, 0, std::size_t((tile_rows - g.m) * ldq));
      pre_pass(pool, g, args, byte_ptr(in[0]), [&](const kernels::MatmulArgs& p, std::int64_t matrix, std::int64_t m0,
                                                   std::int64_t m1) {
        const std::int64_t row = matrix * pre_rows() + m0;
        if (s_.quantize_a) s_.quantize_a(p, m0, m1, q + row * ldq, ldq, q_scales + row);
        else copy_quantized_rows(p, in[1], g.batch.offsets(matrix)[1] + m0 * g.b_rs, g.b_rs, m0, m1, q + row * ldq, ldq, q_scales + row);
      });
    }
    args.a_q_stride = ldq;
    auto* a_pass = s_.a_pass ? static_cast<char*>(workspace) : nullptr;
    const std::int64_t slice = s_.a_pass_slice, a_pass_elem = bytes_of(s_.a_pass_dtype);
    const std::int64_t a_pass_matrix_bytes = a_pass ? a_pass_matrix_elems() * a_pass_elem : 0;
    if (a_pass) {
      for (std::int64_t block = 0; block < g.batch.numel() * a_pass_blocks(); ++block)
        std::memset(a_pass + (block * pre_rows() + g.m) * slice * a_pass_elem, 0, std::size_t((tile_rows - g.m) * slice * a_pass_elem));
      pre_pass(pool, g, args, byte_ptr(in[0]), [&](const kernels::MatmulArgs& p, std::int64_t matrix, std::int64_t m0,
                                                   std::int64_t m1) {
        s_.a_pass(p, m0, m1, a_pass + matrix * a_pass_matrix_bytes, pre_rows(), slice);
      });
      if (s_.a_pass_as_a) args.a_dtype = s_.a_pass_dtype, args.a_row_stride = slice, args.a_col_stride = 1;
    }
    args.a_bf16_rows = pre_rows(), args.a_bf16_slice = slice;
    // A C larger than L3 cannot stay cached for its reader: written with
    // streaming stores (AMD EPYC, bf16 linear 4096 x 320 -> 2560 into f32,
    // 42 MB, then GEGLU over it, alternating: 1 thread 45-48 -> 39-42 ms, 2
    // threads 23-25 -> 21-22 ms; C of 21 MB (L3 32 MB): the linear 5 % faster
    // but its reader as much slower, so the line stays at L3).
    args.stream_c = saturating_mul(g.batch.numel(), g.m * g.n * std::int64_t(bytes_of(args.c_dtype))) > hw::info().l3_bytes;
    const kernels::MatmulTiling& t = s_.tiling;
    const std::int64_t mb = (g.m + t.m_block - 1) / t.m_block, nb = (g.n + t.n_block - 1) / t.n_block;
    const std::int64_t per_matrix = mb * nb;
    auto task_fn = [&](std::int64_t task) {
      const auto off = g.batch.offsets(task / per_matrix);
      const std::int64_t tile = task % per_matrix, m0 = tile / nb * t.m_block, n0 = tile % nb * t.n_block;
      kernels::MatmulArgs p = args;
      const char* a_rows = a_pass ? a_pass + task / per_matrix * a_pass_matrix_bytes : nullptr;
      p.a = a_rows && s_.a_pass_as_a ? a_rows : byte_ptr(in[0]) + off[0] * bytes_of(a.dtype);
      if (has_b) p.b = byte_ptr(in[1]) + off[1] * bytes_of(args.b_dtype);
      if (q) {
        p.a_q = q + task / per_matrix * pre_rows() * ldq;
        p.a_scales = q_scales + task / per_matrix * pre_rows();
      }
      if (a_rows && !s_.a_pass_as_a) p.a_bf16 = reinterpret_cast<const std::uint16_t*>(a_rows);
      p.c = const_cast<char*>(byte_ptr(c)) + off[2] * bytes_of(args.c_dtype);
      if (res) p.ep.residual = byte_ptr(*res) + off[3] * bytes_of(res->dtype());
      s_.row->run(p, t, m0, std::min(g.m, m0 + t.m_block), n0, std::min(g.n, n0 + t.n_block));
    };
    pool.run_tasks(g.batch.numel() * per_matrix, task_fn);
  }

  // QuantizedLinear's pre-pass: rows [m0, m1) of int8 A as quantize_a
  // writes them (zero past K, -128 as -127: the kernels' range), and their
  // scales, the first at `scale_offset` elements into `scales`, the next
  // `scale_stride` on.
  static void copy_quantized_rows(const kernels::MatmulArgs& p, const Tensor& scales, std::int64_t scale_offset,
                                  std::int64_t scale_stride, std::int64_t m0, std::int64_t m1, std::int8_t* q,
                                  std::int64_t ldq, float* q_scales) {
    const auto* a = static_cast<const std::int8_t*>(p.a);
    for (std::int64_t m = m0; m < m1; ++m) {
      std::int8_t* row = q + (m - m0) * ldq;
      for (std::int64_t k = 0; k < p.k; ++k) row[k] = std::max<std::int8_t>(a[m * p.a_row_stride + k * p.a_col_stride], -127);
      std::memset(row + p.k, 0, std::size_t(ldq - p.k));
      q_scales[m - m0] = tessera::detail::load(scales.data(), scales.dtype(), scale_offset + (m - m0) * scale_stride);
    }
  }

  Spec s_;
  kernels::PackedB packed_{};
};

Status check_output(const TensorDesc& c, const Shape& expected) {
  TESSERA_RETURN_IF_ERROR(check_same_shape(c, "c", expected, "the expected output shape"));
  return check_writable(c, "c");
}

// The residual's strides over the output shape (zeros when there is none).
Strides residual_strides(const Epilogue& e, const TensorDesc& c) {
  return e.residual ? e.residual->strides : Strides::filled(c.rank(), 0);
}

// The key a plan's tiling is tuned under: its row, dtypes (a, b, c; b as
// stored), how B comes (raw, packed, or packed with W8A8 activations), the
// problem, and the threads that split it, since a setting tuned for one
// thread count says little about another.
std::string tuning_key(const Row& row, const kernels::MatmulProblem& p, std::int64_t batch, int threads) {
  const std::string_view b_form = !p.b_packed ? "raw" : p.quantize_a ? "w8a8" : "packed";
  return fmt::format("{}:{}.{}.{}:{}:b{}:m{}:n{}:k{}:t{}", row.name, to_string(p.a), to_string(p.b), to_string(p.c),
                     b_form, batch, p.m, p.n, p.k, threads);
}

// Sets the plan's tuning key, and its tiling to the one `tessera tune`
// stored under it when every value is one the row accepts.
void apply_tuning(Context& ctx, const kernels::MatmulProblem& problem, GemmPlan::Spec& spec) {
  const std::vector<TilingParam> params = tiling_params(*spec.row, problem.m, problem.n, problem.k);
  if (params.empty()) return;
  spec.tuning_key = tuning_key(*spec.row, problem, spec.g.batch.numel(), ctx.pool().threads());
  const std::optional<std::vector<std::int64_t>> stored = ctx.tuning().find(spec.tuning_key);
  if (!stored) return;
  if (stored->size() != params.size()) {
    TESSERA_LOG_AT(LogLevel::warn, "tuning file {}: key {}: {} values, expected {}; the default tiling is used",
                   ctx.tuning().path(), spec.tuning_key, stored->size(), params.size());
    return;
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    const TilingParam& p = params[i];
    if (!p.valid((*stored)[i])) {
      TESSERA_LOG_AT(LogLevel::warn,
                     "tuning file {}: key {}: {} = {} is not a multiple of {} in [{}, {}]; the default tiling is used",
                     ctx.tuning().path(), spec.tuning_key, p.name, (*stored)[i], p.grain, p.grain, p.limit);
      return;
    }
  }
  for (std::size_t i = 0; i < params.size(); ++i) spec.tiling.*params[i].field = (*stored)[i];
}

Result<PlanPtr> finish(Context& ctx, GemmPlan::Spec spec) {
  const Geometry& g = spec.g;
  const kernels::MatmulProblem problem{spec.inputs[0].dtype,
                                       spec.weights ? spec.weights->dtype() : spec.inputs[1].dtype,
                                       spec.c.dtype,
                                       spec.weights != nullptr,
                                       spec.int8_a(),
                                       g.m,
                                       g.n,
                                       g.k,
                                       g.a_cs,
                                       spec.weights ? 1 : g.b_cs,
                                       g.c_cs,
                                       !spec.epilogue.residual || g.r_cs == 1 || g.n <= 1,
                                       spec.weights ? spec.weights->group_size() : 0};
  spec.row = kernels::select<kernels::MatmulFamily>(problem, ctx.isa());
  spec.tiling = spec.row->tiling(problem, ctx.hw());
  apply_tuning(ctx, problem, spec);
  // Converting A once pays where a block of rows meets several tasks along N.
  if (g.n <= spec.tiling.n_block || spec.int8_a()) return PlanPtr(std::make_shared<GemmPlan>(std::move(spec)));
  if (spec.row->run == kernels::amx::matmul_bf16) {
    if (!kernels::amx_reads_a_in_place(problem.a, g.a_rs, g.a_cs, g.m, g.k)) {
      spec.a_pass = kernels::amx::round_a_rows;
      spec.a_pass_slice = kernels::amx_k_slice(spec.tiling.k_block, g.k, kernels::kBf16KStep);
    }
    return PlanPtr(std::make_shared<GemmPlan>(std::move(spec)));
  }
  // The register-blocked rows, where they would pack A: A of another dtype
  // than theirs, or rows a multiple of 4 KiB apart (their L1 sets shared),
  // converted once into rows they read in place. AMD EPYC Turin, 11 rounds
  // alternating in one process, time with over without at 1 / 2 threads:
  // bf16 weights and f32 A (AVX512-BF16), [128, 2048] x [2048, 11264] 0.96 /
  // 0.96, [128, 5632] x [5632, 2048] 0.88 / 0.85, [128, 2048] x [2048,
  // 2048] 0.87 / 0.92, [512, 4096] x [4096, 4096] 0.98 / 0.96, [32, 4096] x
  // [4096, 4096] 0.92 / 0.97; bf16 A 0.94-1.0 / 1.0-1.03. f32 weights and
  // A: [128, 5632] x [5632, 2048] 0.88 / 0.91, [128, 4096] x [4096, 4096]
  // 0.93 / 0.94, [128, 2048] x [2048, 11264] 0.96 / 1.01, M = 512 0.99 /
  // 0.99, M = 16 0.95 / 0.98, M = 32 1.02 (even with the order's drift).
  const bool bf16_dot = spec.row->run == kernels::avx512_bf16::matmul_bf16_dot;
  if (!bf16_dot && spec.row->run != kernels::avx512::matmul_f32) return PlanPtr(std::make_shared<GemmPlan>(std::move(spec)));
  const DType t = bf16_dot ? DType::bf16 : DType::f32;
  const std::int64_t unit = bf16_dot ? 2 : 1;
  if (g.k % unit == 0 && !kernels::blocked_reads_a_in_place(problem.a, t, g.a_rs, g.a_cs, g.k, unit)) {
    spec.a_pass = bf16_dot ? kernels::avx512_bf16::round_a_rows : kernels::avx512::copy_a_rows;
    spec.a_pass_dtype = t;
    // bf16 rows come zero-padded to whole K steps.
    spec.a_pass_slice = kernels::in_place_row_stride(bf16_dot ? kernels::round_up(g.k, kernels::kBf16KStep) : g.k, t);
    spec.a_pass_as_a = true;
  }
  return PlanPtr(std::make_shared<GemmPlan>(std::move(spec)));
}

// Appends the epilogue's tensors to the inputs and counts the bytes every
// tensor moves (packed weights add theirs).
void add_epilogue_inputs(GemmPlan::Spec& spec) {
  if (spec.epilogue.bias) spec.inputs.push_back(*spec.epilogue.bias), spec.names.push_back("bias");
  if (spec.epilogue.residual) spec.inputs.push_back(*spec.epilogue.residual), spec.names.push_back("residual");
  std::int64_t bytes = traffic_bytes({spec.c});
  for (const TensorDesc& d : spec.inputs) bytes = saturating_add(bytes, traffic_bytes({d}));
  spec.bytes = spec.weights ? saturating_add(bytes, spec.weights->bytes()) : bytes;
}

TensorDesc batch_part(const TensorDesc& d) {
  TensorDesc out{d.dtype, {}, {}};
  for (int i = 0; i + 2 < d.rank(); ++i) out.shape.push_back(d.shape[i]), out.strides.push_back(d.strides[i]);
  return out;
}

}  // namespace

Result<PlanPtr> Matmul::plan(Context& ctx, const TensorDesc& a, const TensorDesc& b, const TensorDesc& c,
                             const Epilogue& epilogue) {
  TESSERA_RETURN_IF_ERROR(a.validate("a"));
  TESSERA_RETURN_IF_ERROR(b.validate("b"));
  TESSERA_RETURN_IF_ERROR(c.validate("c"));
  TESSERA_RETURN_IF_ERROR(check_float(a, "a"));
  TESSERA_RETURN_IF_ERROR(check_float(b, "b"));
  TESSERA_RETURN_IF_ERROR(check_rank(a, "a", 2));
  TESSERA_RETURN_IF_ERROR(check_rank(b, "b", 2));
  TESSERA_RETURN_IF_ERROR(check_rank(c, "c", 2));
  if (c.dtype != DType::f32 && c.dtype != a.dtype && c.dtype != b.dtype)
    return Status::invalid_argument(fmt::format("c: dtype {} must be f32, a's {} or b's {}", to_string(c.dtype), to_string(a.dtype), to_string(b.dtype)));
  const std::int64_t m = a.shape[a.rank() - 2], k = a.shape[a.rank() - 1], n = b.shape[b.rank() - 1];
  if (b.shape[b.rank() - 2] != k)
    return Status::invalid_argument(fmt::format("b: shape {} has K = {} rows, expected a's K = {} (a is {})",
                                                b.shape.to_string(), b.shape[b.rank() - 2], k, a.shape.to_string()));
  const TensorDesc ab = batch_part(a), bb = batch_part(b);
  Result<Shape> batch = broadcast_shapes(ab.shape, bb.shape);
  if (!batch.ok())
    return Status::invalid_argument(fmt::format("b: batch dims {} do not broadcast with a's batch dims {}", bb.shape.to_string(), ab.shape.to_string()));
  Shape expected = *batch;
  expected.push_back(m);
  expected.push_back(n);
  TESSERA_RETURN_IF_ERROR(check_output(c, expected));
  TESSERA_RETURN_IF_ERROR(check_epilogue(epilogue, n, c, "c"));

  GemmPlan::Spec spec{.op = "matmul", .inputs = {a, b}, .names = {"a", "b"}, .c = c, .epilogue = epilogue};
  add_epilogue_inputs(spec);
  const TensorDesc cb = batch_part(c), rb = batch_part(TensorDesc{c.dtype, c.shape, residual_strides(epilogue, c)});
  Geometry& g = spec.g;
  g.batch = collapse<4>(*batch, {broadcast_strides(ab, *batch), broadcast_strides(bb, *batch), cb.strides, rb.strides});
  g.m = m, g.n = n, g.k = k;
  const int ra = a.rank(), rbk = b.rank(), rc = c.rank();
  g.a_rs = a.strides[ra - 2], g.a_cs = a.strides[ra - 1];
  g.b_rs = b.strides[rbk - 2], g.b_cs = b.strides[rbk - 1];
  g.c_rs = c.strides[rc - 2], g.c_cs = c.strides[rc - 1];
  const Strides rs = residual_strides(epilogue, c);
  g.r_rs = rs[rc - 2], g.r_cs = rs[rc - 1];
  return finish(ctx, std::move(spec));
}

Status matmul(Stream& stream, const Tensor& a, const Tensor& b, const Tensor& c, const EpilogueTensors& e) {
  std::vector<Tensor> in = {a, b};
  PlanKey key("matmul", stream.context().isa());
  key.add(a.desc()).add(b.desc()).add(c.desc());
  const Epilogue ep = add_epilogue(e, in, key);
  const Tensor out[] = {c};
  return run_cached(stream, key, [&] { return Matmul::plan(stream.context(), a.desc(), b.desc(), c.desc(), ep); }, in, out);
}

// ----------------------------------------------------------------- Linear

namespace {

// Linear and QuantizedLinear (a_scales: A's scales, a int8).
Result<PlanPtr> plan_linear(Context& ctx, const TensorDesc& a, const TensorDesc* a_scales, WeightsPtr w,
                            const TensorDesc& c, const Epilogue& epilogue, const LinearOptions& options) {
  if (!w) return Status::invalid_argument("w: no weights (null WeightsPtr)");
  TESSERA_RETURN_IF_ERROR(a.validate("a"));
  TESSERA_RETURN_IF_ERROR(c.validate("c"));
  if (!a_scales) TESSERA_RETURN_IF_ERROR(check_float(a, "a"));
  else if (a.dtype != DType::i8)
    return Status::invalid_argument(fmt::format("a: dtype {}: quantized activations are i8", to_string(a.dtype)));
  else if (options.quantize_activations)
    return Status::invalid_argument("options.quantize_activations: quantized_linear's a is quantized already");
  TESSERA_RETURN_IF_ERROR(check_float(c, "c"));
  TESSERA_RETURN_IF_ERROR(check_rank(a, "a", 1));
  const std::int64_t k = a.shape[a.rank() - 1], n = w->n();
  if (k != w->k())
    return Status::invalid_argument(fmt::format("a: last dim {} (shape {}) must equal the weights' K = {}", k, a.shape.to_string(), w->k()));
  const bool int8_a = options.quantize_activations || a_scales;
  if (int8_a && w->dtype() != DType::i4 && (w->dtype() != DType::i8 || w->quant().zero_points || w->group_size() != w->k()))
    return Status::invalid_argument(fmt::format(
        "{}: needs int4 weights (W4A8), or int8 weights quantized per output channel (group_size 0) without zero points (W8A8)",
        a_scales ? "w" : "options.quantize_activations"));
  Shape expected = a.shape;
  expected[expected.rank() - 1] = n;
  TESSERA_RETURN_IF_ERROR(check_output(c, expected));
  TESSERA_RETURN_IF_ERROR(check_epilogue(epilogue, n, c, "c"));
  if (options.dynamic_rows && (a.rank() != 2 || (epilogue.residual && epilogue.residual->rank() != 2)))
    return Status::invalid_argument(fmt::format("options.dynamic_rows: a ({}) and the residual must be 2-D [M, K]", a.shape.to_string()));
  const int r = a.rank();
  Strides ss = Strides::filled(r, 0);  // a_scales over a's shape
  if (a_scales) {
    TESSERA_RETURN_IF_ERROR(a_scales->validate("a_scales"));
    TESSERA_RETURN_IF_ERROR(check_float(*a_scales, "a_scales"));
    Shape per_row = a.shape;
    per_row[r - 1] = 1;
    TESSERA_ASSIGN_OR_RETURN(ss, check_broadcasts_to(*a_scales, "a_scales", per_row, "a's shape with K as 1,"));
  }

  GemmPlan::Spec spec{.op = a_scales ? "quantized_linear" : "linear", .inputs = {a}, .names = {"a"}, .c = c, .epilogue = epilogue, .weights = w};
  spec.dynamic_rows = options.dynamic_rows;
  if (a_scales) spec.inputs.push_back(*a_scales), spec.names.push_back("a_scales");
  spec.a_scales_per_row = options.dynamic_rows && a_scales && a_scales->rank() == 2 && a_scales->shape[0] == a.shape[0];
  spec.a_prequantized = a_scales != nullptr;
  if (options.quantize_activations) spec.quantize_a = kernels::w8a8_quantizer(ctx.isa()).run;
  add_epilogue_inputs(spec);
  // Leading dims of a, c and the residual collapse (usually to one): the
  // last collapsed dim is M, the rest is the batch.
  Shape lead;
  Strides sa, sq, sc, sr;
  const Strides rs = residual_strides(epilogue, c);
  for (int i = 0; i + 1 < r; ++i)
    lead.push_back(a.shape[i]), sa.push_back(a.strides[i]), sq.push_back(ss[i]), sc.push_back(c.strides[i]), sr.push_back(rs[i]);
  const auto split = split_last(collapse<4>(lead, {sa, sq, sc, sr}));
  Geometry& g = spec.g;
  g.batch = split.outer;
  g.m = split.inner, g.n = n, g.k = k;
  g.a_rs = split.inner_strides[0], g.a_cs = a.strides[r - 1];
  g.b_rs = split.inner_strides[1];
  g.c_rs = split.inner_strides[2], g.c_cs = c.strides[r - 1];
  g.r_rs = split.inner_strides[3], g.r_cs = rs[r - 1];
  return finish(ctx, std::move(spec));
}

}  // namespace

Result<PlanPtr> Linear::plan(Context& ctx, const TensorDesc& a, WeightsPtr w, const TensorDesc& c,
                             const Epilogue& epilogue, const LinearOptions& options) {
  return plan_linear(ctx, a, nullptr, std::move(w), c, epilogue, options);
}

Result<PlanPtr> QuantizedLinear::plan(Context& ctx, const TensorDesc& a, const TensorDesc& a_scales, WeightsPtr w,
                                      const TensorDesc& c, const Epilogue& epilogue, const LinearOptions& options) {
  return plan_linear(ctx, a, &a_scales, std::move(w), c, epilogue, options);
}

namespace {

// Dynamic shapes: 2-D activations are planned for their bucket of rows
// (Context::token_bucket), so every token count of a bucket shares a plan.
// The rows planned (a's and c's descs set to them, options.dynamic_rows
// on), or -1 for a plan of a's own rows.
std::int64_t bucket_rows(Context& ctx, const Tensor& a, const Tensor& c, const EpilogueTensors& e, TensorDesc& a_desc,
                         TensorDesc& c_desc, LinearOptions& options) {
  const bool two_d = a.rank() == 2 && c.rank() == 2 && (!e.residual.defined() || e.residual.rank() == 2);
  const std::int64_t bucket = two_d ? ctx.token_bucket(a.dim(0)) : 0;
  if (bucket == 0) return -1;
  a_desc.shape[0] = c_desc.shape[0] = bucket;
  options.dynamic_rows = true;
  return bucket;
}

}  // namespace

Status linear(Stream& stream, const Tensor& a, const WeightsPtr& w, const Tensor& c, const EpilogueTensors& e,
              const LinearOptions& options) {
  Context& ctx = stream.context();
  LinearOptions opt = options;
  TensorDesc a_desc = a.desc(), c_desc = c.desc();
  const std::int64_t planned_rows = bucket_rows(ctx, a, c, e, a_desc, c_desc, opt);
  std::vector<Tensor> in = {a};
  PlanKey key("linear", ctx.isa());
  // The weights by identity: the plan holds them, so the address stays theirs while the entry lives.
  key.add(std::int64_t(reinterpret_cast<std::intptr_t>(w.get()))).add(std::int64_t(opt.quantize_activations));
  key.add(std::int64_t(opt.dynamic_rows)).add(a_desc).add(c_desc);
  const Epilogue ep = add_epilogue(e, in, key, planned_rows);
  const Tensor out[] = {c};
  return run_cached(stream, key, [&] { return Linear::plan(ctx, a_desc, w, c_desc, ep, opt); }, in, out);
}

Status quantized_linear(Stream& stream, const Tensor& a, const Tensor& a_scales, const WeightsPtr& w, const Tensor& c,
                        const EpilogueTensors& e) {
  Context& ctx = stream.context();
  LinearOptions opt;
  TensorDesc a_desc = a.desc(), s_desc = a_scales.desc(), c_desc = c.desc();
  const std::int64_t planned_rows = bucket_rows(ctx, a, c, e, a_desc, c_desc, opt);
  // Per-token scales [M, 1] follow the rows (one per token also at M = 1:
  // the same values either way).
  if (planned_rows >= 0 && s_desc.rank() == 2 && s_desc.shape[0] == a.dim(0)) s_desc.shape[0] = planned_rows;
  std::vector<Tensor> in = {a, a_scales};
  PlanKey key("quantized_linear", ctx.isa());
  key.add(std::int64_t(reinterpret_cast<std::intptr_t>(w.get()))).add(std::int64_t(opt.dynamic_rows));
  key.add(a_desc).add(s_desc).add(c_desc);
  const Epilogue ep = add_epilogue(e, in, key, planned_rows);
  const Tensor out[] = {c};
  return run_cached(stream, key, [&] { return QuantizedLinear::plan(ctx, a_desc, s_desc, w, c_desc, ep, opt); }, in, out);
}

}  // namespace tessera::ops
