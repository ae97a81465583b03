#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "kernels/norm.hpp"
#include "support/harness.hpp"

namespace tessera::testing {
namespace {

enum class Op { rms, layer, add_rms, add_layer };
const Op kOps[] = {Op::rms, Op::layer, Op::add_rms, Op::add_layer};

std::string_view name(Op op) {
  switch (op) {
    case Op::rms: return "rms_norm";
    case Op::layer: return "layer_norm";
    case Op::add_rms: return "add_rms_norm";
    case Op::add_layer: return "add_layer_norm";
  }
  return "";
}
bool adds(Op op) { return op == Op::add_rms || op == Op::add_layer; }
bool has_beta(Op op) { return op == Op::layer || op == Op::add_layer; }

// One op through its one-shot function. residual and sum are used by the add
// variants only, beta by the layer variants only.
Status run(Stream& s, Op op, const Tensor& x, const Tensor& residual, const std::optional<Tensor>& gamma,
           const std::optional<Tensor>& beta, const Tensor& y, const Tensor& sum, float eps = 1e-5f, int axis = -1) {
  const ops::NormAttrs attrs{.eps = eps, .axis = axis};
  switch (op) {
    case Op::rms: return ops::rms_norm(s, x, gamma, y, attrs);
    case Op::layer: return ops::layer_norm(s, x, gamma, beta, y, attrs);
    case Op::add_rms: return ops::add_rms_norm(s, x, residual, gamma, y, sum, attrs);
    case Op::add_layer: return ops::add_layer_norm(s, x, residual, gamma, beta, y, sum, attrs);
  }
  return Status{};
}

class NormTest : public IsaTest {
 protected:
  // Runs op at this ISA on the given (maybe strided) inputs and at scalar on
  // contiguous copies of them, into fresh outputs of x's shape and dtype, and
  // compares y and sum.
  void expect_matches_reference(Op op, const Tensor& x, const Tensor& residual, const std::optional<Tensor>& gamma,
                                const std::optional<Tensor>& beta, float eps = 1e-5f) {
    const DType dt = x.dtype();
    const auto clone_of = [](const std::optional<Tensor>& t) { return t ? std::optional(clone(*t)) : std::nullopt; };
    Tensor y = zeros(dt, x.shape()), sum = zeros(dt, x.shape());
    Tensor ry = zeros(dt, x.shape()), rsum = zeros(dt, x.shape());
    ASSERT_TRUE(run(stream_, op, x, residual, gamma, beta, y, sum, eps).ok());
    ASSERT_TRUE(run(ref_stream_, op, clone(x), clone(residual), clone_of(gamma), clone_of(beta), ry, rsum, eps).ok());
    EXPECT_TRUE(close(y, ry, tolerance_for(dt, x.dim(x.rank() - 1))));
    if (adds(op)) {
      EXPECT_TRUE(close(sum, rsum, tolerance_for(dt)));
    }
  }
};

TEST_P(NormTest, MatchesReference) {
  for (Op op : kOps) {
    for (DType dt : kFloatTypes) {
      for (std::int64_t cols : kRowLengths) {
        for (std::int64_t rows : {1L, 7L, 128L}) {
          SCOPED_TRACE(fmt::format("{} {} rows={} cols={}", name(op), to_string(dt), rows, cols));
          expect_matches_reference(op, random_tensor(dt, {rows, cols}, 1, -3.0f, 3.0f), random_tensor(dt, {rows, cols}, 2, -3.0f, 3.0f),
                                   random_tensor(dt, {cols}, 3), random_tensor(dt, {cols}, 4));
        }
      }
    }
  }
}

TEST_P(NormTest, WithoutAffineAndMixedDtypes) {
  for (Op op : kOps) {
    for (std::int64_t cols : {17L, 1000L}) {
      for (bool with_gamma : {false, true}) {
        for (bool with_beta : {false, true}) {
          if (with_beta && !has_beta(op)) continue;
          SCOPED_TRACE(fmt::format("{} cols={} gamma={} beta={}", name(op), cols, with_gamma, with_beta));
          const auto gamma = with_gamma ? std::optional(random_tensor(DType::f32, {cols}, 3)) : std::nullopt;
          const auto beta = with_beta ? std::optional(random_tensor(DType::f32, {cols}, 4)) : std::nullopt;
          expect_matches_reference(op, random_tensor(DType::f32, {5, cols}, 1), random_tensor(DType::f32, {5, cols}, 2), gamma, beta);
        }
      }
    }
  }
  // bf16 activations, f32 parameters, f16 residual, f32 output and sum.
  Tensor x = random_tensor(DType::bf16, {9, 300}, 5), res = random_tensor(DType::f16, {9, 300}, 6);
  Tensor g = random_tensor(DType::f32, {300}, 7), b = random_tensor(DType::f32, {300}, 8);
  Tensor y = zeros(DType::f32, {9, 300}), sum = zeros(DType::f32, {9, 300});
  Tensor ry = zeros(DType::f32, {9, 300}), rsum = zeros(DType::f32, {9, 300});
  ASSERT_TRUE(ops::add_layer_norm(stream_, x, res, g, b, y, sum).ok());
  ASSERT_TRUE(ops::add_layer_norm(ref_stream_, x, res, g, b, ry, rsum).ok());
  EXPECT_TRUE(close(y, ry, tolerance_for(DType::f32, 300)));
  EXPECT_TRUE(close(sum, rsum, tolerance_for(DType::f32)));
}

TEST_P(NormTest, StridedViews) {
  for (Op op : kOps) {
    SCOPED_TRACE(name(op));
    // Rows with gaps in every operand, outputs too (a 3-D batch).
    Tensor x = random_tensor(DType::f32, {2, 5, 96}, 3), res = random_tensor(DType::f32, {2, 5, 96}, 4);
    Tensor g = random_tensor(DType::f32, {96}, 5), b = random_tensor(DType::f32, {96}, 6);
    Tensor y = padded_copy(zeros(DType::f32, x.shape())), sum = padded_copy(zeros(DType::f32, x.shape()), 5);
    Tensor ry = zeros(DType::f32, x.shape()), rsum = zeros(DType::f32, x.shape());
    ASSERT_TRUE(run(stream_, op, padded_copy(x), padded_copy(res, 7), g, b, y, sum).ok());
    ASSERT_TRUE(run(ref_stream_, op, x, res, g, b, ry, rsum).ok());
    EXPECT_TRUE(close(y, ry, tolerance_for(DType::f32, 96)));
    if (adds(op)) {
      EXPECT_TRUE(close(sum, rsum, tolerance_for(DType::f32)));
    }
    // Column stride > 1 (a transposed view), and every other gamma element.
    Tensor xt = value_or_die(random_tensor(DType::f32, {33, 19}, 7).transpose(0, 1));
    Tensor rt = value_or_die(random_tensor(DType::f32, {33, 19}, 8).transpose(0, 1));
    Tensor gs = value_or_die(random_tensor(DType::f32, {66}, 9).slice(0, 0, 66, 2));
    expect_matches_reference(op, xt, rt, gs, b.slice(0, 0, 33).value());
  }
}

// Over several trailing dims (axis; ONNX LayerNormalization, PyTorch's
// normalized_shape): what the op over one dim gives on x as [rows, their
// product] and gamma and beta flattened (at scalar), also for a view whose
// rows are apart (every other entry of a bigger batch).
TEST_P(NormTest, SeveralTrailingDims) {
  for (Op op : kOps)
    for (DType dt : {DType::f32, DType::bf16})
      for (int axis : {1, -2, 0})
        for (bool apart : {false, true}) {
          SCOPED_TRACE(fmt::format("{} {} axis {} apart {}", name(op), to_string(dt), axis, apart));
          const Shape shape{2, 3, 4, 40};
          const int from = axis < 0 ? axis + 4 : axis;
          Shape normalized;
          std::int64_t cols = 1;
          for (int i = from; i < 4; ++i) normalized.push_back(shape[i]), cols *= shape[i];
          Tensor x = random_tensor(dt, shape, 1, -3.0f, 3.0f), res = random_tensor(dt, shape, 2, -3.0f, 3.0f);
          if (apart && from == 0) continue;  // no view of x is apart then
          if (apart) x = value_or_die(random_tensor(dt, {4, 3, 4, 40}, 1, -3.0f, 3.0f).slice(0, 0, 4, 2));
          Tensor g = random_tensor(dt, normalized, 3), b = random_tensor(dt, normalized, 4);
          Tensor y = zeros(dt, shape), sum = zeros(dt, shape), ry = zeros(dt, {960 / cols, cols}), rsum = zeros(dt, ry.shape());
          const Status st = run(stream_, op, x, res, g, b, y, sum, 1e-5f, axis);
          ASSERT_TRUE(st.ok()) << st.to_string();
          ASSERT_TRUE(run(ref_stream_, op, value_or_die(clone(x).reshape(ry.shape())), value_or_die(res.reshape(ry.shape())),
                          value_or_die(g.reshape({cols})), value_or_die(b.reshape({cols})), ry, rsum).ok());
          EXPECT_TRUE(close(value_or_die(y.reshape(ry.shape())), ry, tolerance_for(dt, cols)));
          if (adds(op)) {
            EXPECT_TRUE(close(value_or_die(sum.reshape(ry.shape())), rsum, tolerance_for(dt)));
          }
        }
}

TEST_P(NormTest, InPlace) {
  Tensor g = random_tensor(DType::f32, {100}, 3), b = random_tensor(DType::f32, {100}, 4);
  for (Op op : kOps) {
    SCOPED_TRACE(name(op));
    Tensor x = padded_copy(random_tensor(DType::f32, {6, 100}, 1)), res = random_tensor(DType::f32, {6, 100}, 2);
    Tensor ry = zeros(DType::f32, x.shape()), rsum = zeros(DType::f32, x.shape());
    ASSERT_TRUE(run(ref_stream_, op, x, res, g, b, ry, rsum).ok());
    // y over x.
    Tensor xy = padded_copy(x), sum = zeros(DType::f32, x.shape());
    ASSERT_TRUE(run(stream_, op, xy, res, g, b, xy, sum).ok());
    EXPECT_TRUE(close(xy, ry, tolerance_for(DType::f32, 100)));
    if (!adds(op)) continue;
    EXPECT_TRUE(close(sum, rsum, tolerance_for(DType::f32)));
    // sum over x, and sum over residual.
    Tensor xs = padded_copy(x), y = zeros(DType::f32, x.shape());
    ASSERT_TRUE(run(stream_, op, xs, res, g, b, y, xs).ok());
    EXPECT_TRUE(close(y, ry, tolerance_for(DType::f32, 100)));
    EXPECT_TRUE(close(xs, rsum, tolerance_for(DType::f32)));
    Tensor rs = clone(res);
    ASSERT_TRUE(run(stream_, op, x, rs, g, b, y, rs).ok());
    EXPECT_TRUE(close(y, ry, tolerance_for(DType::f32, 100)));
    EXPECT_TRUE(close(rs, rsum, tolerance_for(DType::f32)));
  }
}

TEST_P(NormTest, TransposedOperandsThroughContiguousCopies) {
  // x, residual, y and sum strided along the normalized dim (transposed
  // views): this level's row on contiguous copies; in place too (y over x,
  // sum over residual).
  Tensor g = random_tensor(DType::f32, {37}, 3), b = random_tensor(DType::f32, {37}, 4);
  auto transposed = [](std::uint64_t seed) { return value_or_die(random_tensor(DType::f32, {37, 9}, seed).transpose(0, 1)); };
  for (Op op : kOps) {
    SCOPED_TRACE(name(op));
    const Tensor x = transposed(1), res = transposed(2);
    Tensor ry = zeros(DType::f32, {9, 37}), rsum = zeros(DType::f32, {9, 37});
    ASSERT_TRUE(run(ref_stream_, op, x, res, g, b, ry, rsum).ok());
    Tensor y = transposed(5), sum = transposed(6);
    ASSERT_TRUE(run(stream_, op, x, res, g, b, y, sum).ok());
    EXPECT_TRUE(close(y, ry, tolerance_for(DType::f32, 37)));
    Tensor xy = transposed(1), rs = transposed(2);
    ASSERT_TRUE(run(stream_, op, xy, rs, g, b, xy, rs).ok());
    EXPECT_TRUE(close(xy, ry, tolerance_for(DType::f32, 37)));
    if (!adds(op)) continue;
    EXPECT_TRUE(close(sum, rsum, tolerance_for(DType::f32)));
    EXPECT_TRUE(close(rs, rsum, tolerance_for(DType::f32)));
  }
}

TEST_P(NormTest, ConstantRowsGiveBeta) {
  // A constant row has no spread: y is beta (0 for RMSNorm on zeros), also
  // with eps = 0, where the naive formula divides 0 by 0.
  Tensor g = random_tensor(DType::f32, {40}, 3), b = random_tensor(DType::f32, {40}, 4);
  for (Op op : kOps) {
    for (float eps : {0.0f, 1e-5f}) {
      SCOPED_TRACE(fmt::format("{} eps={}", name(op), eps));
      const bool layer = has_beta(op);
      Tensor x = zeros(DType::f32, {3, 40}), res = zeros(DType::f32, {3, 40});
      if (layer)
        for (std::int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = 1.5f + float(i / 40) * 1e6f;
      Tensor y = random_tensor(DType::f32, {3, 40}, 5), sum = zeros(DType::f32, {3, 40});
      ASSERT_TRUE(run(stream_, op, x, res, g, b, y, sum, eps).ok());
      for (std::int64_t i = 0; i < y.numel(); ++i)
        ASSERT_EQ(y.data_as<float>()[i], layer ? b.data_as<float>()[i % 40] : 0.0f) << "element " << i;
    }
  }
}

TEST_P(NormTest, HugeValues) {
  // |x| ~ 1e20: the squares overflow f32, not the f64 statistics.
  for (Op op : kOps) {
    SCOPED_TRACE(name(op));
    expect_matches_reference(op, random_tensor(DType::f32, {3, 100}, 11, 1e20f, 3e20f), random_tensor(DType::f32, {3, 100}, 12, -1e20f, 1e20f),
                             random_tensor(DType::f32, {100}, 13), random_tensor(DType::f32, {100}, 14));
  }
}

TEST_P(NormTest, FusedEqualsAddThenNorm) {
  for (DType dt : kFloatTypes) {
    for (std::int64_t cols : {3L, 255L, 4096L}) {
      SCOPED_TRACE(fmt::format("{} cols={}", to_string(dt), cols));
      Tensor x = random_tensor(dt, {7, cols}, 1, -3.0f, 3.0f), res = random_tensor(dt, {7, cols}, 2, -3.0f, 3.0f);
      Tensor g = random_tensor(dt, {cols}, 3), b = random_tensor(dt, {cols}, 4);
      Tensor sum = zeros(dt, x.shape()), y = zeros(dt, x.shape());
      Tensor sum2 = zeros(dt, x.shape()), y2 = zeros(dt, x.shape());
      ASSERT_TRUE(ops::add(stream_, x, res, sum2).ok());
      EXPECT_TRUE(ops::add_rms_norm(stream_, x, res, g, y, sum).ok());
      EXPECT_TRUE(ops::rms_norm(stream_, sum2, g, y2).ok());
      EXPECT_TRUE(identical(sum, sum2));
      EXPECT_TRUE(identical(y, y2)) << "rms";
      EXPECT_TRUE(ops::add_layer_norm(stream_, x, res, g, b, y, sum).ok());
      EXPECT_TRUE(ops::layer_norm(stream_, sum2, g, b, y2).ok());
      EXPECT_TRUE(identical(sum, sum2));
      EXPECT_TRUE(identical(y, y2)) << "layer";
    }
  }
}

TEST_P(NormTest, NoRowsIsEmpty) {
  Tensor g = random_tensor(DType::f32, {8}, 3);
  for (Op op : kOps) {
    SCOPED_TRACE(name(op));
    for (const Shape& shape : {Shape{0, 8}, Shape{2, 0, 8}}) {
      Tensor x = zeros(DType::f32, shape), y = zeros(DType::f32, shape), sum = zeros(DType::f32, shape);
      EXPECT_TRUE(run(stream_, op, x, x, g, g, y, sum).ok());
    }
  }
}

TEST_P(NormTest, KernelChoiceAndTraffic) {
  const TensorDesc x = TensorDesc::contiguous(DType::f32, {4, 32}), g = TensorDesc::contiguous(DType::f32, {32});
  const std::string_view simd = ctx_.isa() >= hw::Isa::avx512 ? "norm_avx512" : ctx_.isa() >= hw::Isa::avx2 ? "norm_avx2" : "norm_ref";
  auto plan = value_or_die(ops::AddRmsNorm::plan(ctx_, x, x, g, x, x));
  EXPECT_EQ(plan->kernel(), simd);
  EXPECT_EQ(plan->bytes_moved(), 4 * 512 + 128);  // x, residual, y and sum once each, and gamma
  // A column stride > 1: this level's row on a contiguous copy of x in the
  // workspace (plan_with_unit_rows), the copy's write and read counted.
  const TensorDesc xt{DType::f32, {4, 32}, {1, 4}};
  const ops::PlanPtr strided = value_or_die(ops::LayerNorm::plan(ctx_, xt, g, g, x));
  EXPECT_EQ(strided->kernel(), simd);
  const bool copied = ctx_.isa() > hw::Isa::scalar;
  EXPECT_EQ(strided->workspace_bytes() > 0, copied);
  EXPECT_EQ(strided->bytes_moved(), 2 * 512 + 2 * 128 + (copied ? 2 * 512 : 0));
  // x broadcast over rows (stride 0) is read once.
  const TensorDesc xb{DType::f32, {4, 32}, {0, 1}};
  EXPECT_EQ(value_or_die(ops::RmsNorm::plan(ctx_, xb, std::nullopt, x))->bytes_moved(), 128 + 512);
}

// Streaming stores for y (and the sum) run only past the L3, so the rows are
// called directly: this level's row with stream_y on against the reference,
// with parameters stored as f32, bf16 or f16 (converted once per task) or
// absent, with and without a residual.
TEST_P(NormTest, StreamingRowsWithEveryParameterType) {
  struct Params {
    std::optional<DType> gamma, beta;
  };
  const Params params[] = {{DType::f32, DType::f32}, {DType::bf16, DType::f16}, {DType::bf16, std::nullopt}, {std::nullopt, std::nullopt}};
  using kernels::NormKind;
  for (NormKind kind : {NormKind::rms, NormKind::layer})
    for (DType dt : {DType::f32, DType::bf16})
      for (const Params& pr : params)
        for (std::int64_t cols : {64L, 300L})
          for (bool residual : {false, true})
            for (std::int64_t block_rows : {std::int64_t(1), kernels::kNormOutputRows}) {
              if (kind == NormKind::rms && pr.beta) continue;
              SCOPED_TRACE(fmt::format("{} {} cols={} gamma={} beta={} residual={} output rows={}", kind == NormKind::rms ? "rms" : "layer",
                                       to_string(dt), cols, pr.gamma ? to_string(*pr.gamma) : "-",
                                       pr.beta ? to_string(*pr.beta) : "-", residual, block_rows));
              // 7 rows: a block of 4 and one of 3; 32 columns at a time across a block.
              const std::int64_t rows = 7;
              const Tensor x = random_tensor(dt, {rows, cols}, 1, -3.0f, 3.0f);
              const Tensor res = random_tensor(dt, {rows, cols}, 4, -3.0f, 3.0f);
              const Tensor g = random_tensor(pr.gamma.value_or(DType::f32), {cols}, 2);
              const Tensor b = random_tensor(pr.beta.value_or(DType::f32), {cols}, 3);
              Tensor y = zeros(dt, {rows, cols}), ref = zeros(dt, {rows, cols});
              Tensor sum = zeros(dt, {rows, cols}), ref_sum = zeros(dt, {rows, cols});
              kernels::NormArgs args{.kind = kind, .x_dtype = dt, .residual_dtype = dt, .sum_dtype = dt,
                                     .gamma_dtype = pr.gamma.value_or(dt), .beta_dtype = pr.beta.value_or(dt), .y_dtype = dt,
                                     .cols = cols, .x = x.data(), .x_row_stride = cols, .x_col_stride = 1,
                                     .residual = residual ? res.data() : nullptr, .residual_row_stride = cols,
                                     .residual_col_stride = 1, .sum = residual ? sum.data() : nullptr, .sum_row_stride = cols,
                                     .sum_col_stride = 1, .gamma = pr.gamma ? g.data() : nullptr, .gamma_stride = 1,
                                     .beta = pr.beta ? b.data() : nullptr, .beta_stride = 1,
                                     .y = y.data(), .y_row_stride = cols, .y_col_stride = 1, .eps = 1e-5f, .stream_y = true,
                                     .output = {block_rows, block_rows == 1 ? cols : 32}};
              const kernels::RowProblem problem{dt, dt, args.gamma_dtype, rows, cols, true};
              const auto* row = kernels::select<kernels::NormFamily>(problem, GetParam());
              row->run(args, 0, rows);
              args.y = ref.data();
              if (residual) args.sum = ref_sum.data();
              kernels::ref::norm(args, 0, rows);
              EXPECT_TRUE(close(y, ref, tolerance_for(dt, cols))) << row->name;
              if (residual) {
                EXPECT_TRUE(close(sum, ref_sum, tolerance_for(dt))) << row->name;
                // In place: the sum over x, then y over x.
                Tensor xs = clone(x), xy = clone(x);
                args.x = xs.data(), args.sum = xs.data(), args.y = y.data();
                row->run(args, 0, rows);
                EXPECT_TRUE(close(xs, ref_sum, tolerance_for(dt))) << row->name;
                EXPECT_TRUE(close(y, ref, tolerance_for(dt, cols))) << row->name;
                args.x = xy.data(), args.sum = sum.data(), args.y = xy.data();
                row->run(args, 0, rows);
                EXPECT_TRUE(close(xy, ref, tolerance_for(dt, cols))) << row->name;
                // A residual of another type (f32 for bf16 x, bf16 for f32 x).
                const Tensor res_other = random_tensor(dt == DType::f32 ? DType::bf16 : DType::f32, {rows, cols}, 5, -3.0f, 3.0f);
                args.x = x.data(), args.residual = res_other.data(), args.residual_dtype = res_other.dtype(), args.sum = sum.data();
                args.y = y.data();
                row->run(args, 0, rows);
                args.y = ref.data(), args.sum = ref_sum.data();
                kernels::ref::norm(args, 0, rows);
                EXPECT_TRUE(close(y, ref, tolerance_for(dt, cols))) << row->name;
                EXPECT_TRUE(close(sum, ref_sum, tolerance_for(dt))) << row->name;
              }
            }
}

INSTANTIATE_TEST_SUITE_P(Isa, NormTest, ::testing::ValuesIn(isa_levels()), isa_name);

TEST(NormErrors, PlanNamesTheArgument) {
  Context ctx;
  const auto d = [](DType t, const Shape& s) { return TensorDesc::contiguous(t, s); };
  const TensorDesc x = d(DType::f32, {4, 8}), g = d(DType::f32, {8});
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  // x
  EXPECT_TRUE(fails_naming(ops::RmsNorm::plan(ctx, d(DType::i32, {4, 8}), g, x), "x"));
  EXPECT_TRUE(fails_naming(ops::RmsNorm::plan(ctx, d(DType::f32, {}), g, x), "x"));
  EXPECT_TRUE(fails_naming(ops::RmsNorm::plan(ctx, d(DType::f32, {4, 0}), d(DType::f32, {0}), d(DType::f32, {4, 0})), "x"));
  EXPECT_TRUE(fails_naming(ops::AddLayerNorm::plan(ctx, d(DType::f32, {4, 0}), d(DType::f32, {4, 0}), std::nullopt, std::nullopt,
                                                   d(DType::f32, {4, 0}), d(DType::f32, {4, 0})), "x"));
  // gamma and beta
  EXPECT_TRUE(fails_naming(ops::RmsNorm::plan(ctx, x, d(DType::f32, {7}), x), "gamma"));
  EXPECT_TRUE(fails_naming(ops::RmsNorm::plan(ctx, x, d(DType::i8, {8}), x), "gamma"));
  EXPECT_TRUE(fails_naming(ops::LayerNorm::plan(ctx, x, d(DType::f32, {1, 8}), g, x), "gamma"));
  EXPECT_TRUE(fails_naming(ops::LayerNorm::plan(ctx, x, g, d(DType::f32, {9}), x), "beta"));
  EXPECT_TRUE(fails_naming(ops::LayerNorm::plan(ctx, x, std::nullopt, d(DType::u8, {8}), x), "beta"));
  EXPECT_TRUE(fails_naming(ops::AddLayerNorm::plan(ctx, x, x, g, d(DType::f32, {4, 8}), x, x), "beta"));
  // residual
  EXPECT_TRUE(fails_naming(ops::AddRmsNorm::plan(ctx, x, d(DType::f32, {4, 7}), g, x, x), "residual"));
  EXPECT_TRUE(fails_naming(ops::AddRmsNorm::plan(ctx, x, d(DType::f32, {1, 8}), g, x, x), "residual"));
  EXPECT_TRUE(fails_naming(ops::AddLayerNorm::plan(ctx, x, d(DType::i8, {4, 8}), g, g, x, x), "residual"));
  // y and sum
  const TensorDesc rows_overlap{DType::f32, {4, 8}, {0, 1}};  // every row at the same address
  EXPECT_TRUE(fails_naming(ops::RmsNorm::plan(ctx, x, g, d(DType::f32, {8, 4})), "y"));
  EXPECT_TRUE(fails_naming(ops::LayerNorm::plan(ctx, x, g, g, d(DType::i32, {4, 8})), "y"));
  EXPECT_TRUE(fails_naming(ops::LayerNorm::plan(ctx, x, g, g, rows_overlap), "y"));
  EXPECT_TRUE(fails_naming(ops::AddRmsNorm::plan(ctx, x, x, g, x, d(DType::f32, {4, 9})), "sum"));
  EXPECT_TRUE(fails_naming(ops::AddRmsNorm::plan(ctx, x, x, g, x, d(DType::i8, {4, 8})), "sum"));
  EXPECT_TRUE(fails_naming(ops::AddLayerNorm::plan(ctx, x, x, g, g, x, rows_overlap), "sum"));
  // axis, and several normalized dims
  const TensorDesc x3 = d(DType::f32, {2, 4, 8});
  EXPECT_TRUE(fails_naming(ops::RmsNorm::plan(ctx, x3, d(DType::f32, {4, 8}), x3, {.axis = 3}), "axis"));
  EXPECT_TRUE(fails_naming(ops::RmsNorm::plan(ctx, x3, d(DType::f32, {4, 8}), x3, {.axis = -4}), "axis"));
  EXPECT_TRUE(fails_naming(ops::RmsNorm::plan(ctx, x3, d(DType::f32, {32}), x3, {.axis = 1}), "gamma"));  // shaped as the dims
  EXPECT_TRUE(ops::RmsNorm::plan(ctx, x3, d(DType::f32, {4, 8}), x3, {.axis = 1}).ok());
  const TensorDesc gaps{DType::f32, {2, 4, 8}, {64, 9, 1}};  // rows of 8 one element apart: no single run
  EXPECT_TRUE(fails_naming(ops::RmsNorm::plan(ctx, gaps, d(DType::f32, {4, 8}), x3, {.axis = 1}), "x"));
  EXPECT_TRUE(fails_naming(ops::RmsNorm::plan(ctx, x3, d(DType::f32, {4, 8}), gaps, {.axis = 1}), "y"));
  EXPECT_TRUE(fails_naming(ops::RmsNorm::plan(ctx, d(DType::f32, {2, 0, 8}), d(DType::f32, {0, 8}), d(DType::f32, {2, 0, 8}), {.axis = 1}),
                           "x"));
  // eps
  for (float eps : {-1.0f, nan, inf}) {
    EXPECT_TRUE(fails_naming(ops::RmsNorm::plan(ctx, x, g, x, {.eps = eps}), "eps"));
    EXPECT_TRUE(fails_naming(ops::LayerNorm::plan(ctx, x, g, g, x, {.eps = eps}), "eps"));
    EXPECT_TRUE(fails_naming(ops::AddRmsNorm::plan(ctx, x, x, g, x, x, {.eps = eps}), "eps"));
    EXPECT_TRUE(fails_naming(ops::AddLayerNorm::plan(ctx, x, x, g, g, x, x, {.eps = eps}), "eps"));
  }
}

TEST(NormErrors, RunRejectsOverlapsAndWrongTensors) {
  Context ctx;
  Stream stream(ctx);
  Tensor x = random_tensor(DType::f32, {4, 8}, 1), res = random_tensor(DType::f32, {4, 8}, 2);
  Tensor g = random_tensor(DType::f32, {8}, 3), y = zeros(DType::f32, {4, 8}), sum = zeros(DType::f32, {4, 8});
  // y over x, shifted by one row: not the same view.
  Tensor wide = random_tensor(DType::f32, {5, 8}, 4);
  Tensor top = value_or_die(wide.slice(0, 0, 4)), bottom = value_or_die(wide.slice(0, 1, 5));
  EXPECT_TRUE(fails_naming(ops::rms_norm(stream, top, g, bottom), "y"));
  EXPECT_TRUE(fails_naming(ops::layer_norm(stream, top, g, std::nullopt, bottom), "y"));
  // y over gamma.
  Tensor row = value_or_die(y.slice(0, 0, 1));
  EXPECT_TRUE(fails_naming(ops::rms_norm(stream, value_or_die(x.slice(0, 0, 1)), value_or_die(row.reshape({8})), row), "y"));
  // y over residual, sum over y, sum shifted over x.
  EXPECT_TRUE(fails_naming(ops::add_rms_norm(stream, x, res, g, res, sum), "y"));
  EXPECT_TRUE(fails_naming(ops::add_layer_norm(stream, x, res, g, g, y, y), "sum"));
  EXPECT_TRUE(fails_naming(ops::add_rms_norm(stream, top, res, g, y, bottom), "sum"));
  // run() with tensors that do not match the plan.
  auto plan = value_or_die(ops::AddRmsNorm::plan(ctx, x.desc(), res.desc(), g.desc(), y.desc(), sum.desc()));
  EXPECT_TRUE(plan->run(stream, {x, res, g}, {y, sum}).ok());
  EXPECT_TRUE(fails_naming(plan->run(stream, {x, res, random_tensor(DType::f32, {9}, 5)}, {y, sum}), "gamma"));
  EXPECT_TRUE(fails_naming(plan->run(stream, {x, res, g}, {y, zeros(DType::bf16, {4, 8})}), "sum"));
}

}  // namespace
}  // namespace tessera::testing
