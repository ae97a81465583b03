#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "core/element.hpp"
#include "core/strided.hpp"
#include "kernels/reorder.hpp"
#include "kernels/unary.hpp"
#include "support/harness.hpp"

namespace tessera::testing {
namespace {

// Copies are exact: every element of `got` holds x's element at the same
// index, bit for bit (converted with the scalar round-to-nearest-even where
// the dtypes differ).
::testing::AssertionResult same_elements(const Tensor& got, const Tensor& x) {
  if (!(got.shape() == x.shape()))
    return ::testing::AssertionFailure() << "shape " << got.shape().to_string() << " vs " << x.shape().to_string();
  const auto dims = detail::collapse<2>(x.shape(), {x.strides(), got.strides()});
  const std::int64_t xs = bytes_of(x.dtype()), gs = bytes_of(got.dtype());
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const auto off = dims.offsets(i);
    char want[8] = {};
    if (x.dtype() == got.dtype())
      std::memcpy(want, static_cast<const char*>(x.data()) + off[0] * xs, std::size_t(xs));
    else
      detail::store(want, got.dtype(), 0, detail::load(x.data(), x.dtype(), off[0]));
    if (std::memcmp(want, static_cast<const char*>(got.data()) + off[1] * gs, std::size_t(gs)) != 0)
      return ::testing::AssertionFailure() << "element " << i << " (row-major) differs: got "
                                           << detail::load(got.data(), got.dtype(), off[1]) << ", expected "
                                           << detail::load(want, got.dtype(), 0);
  }
  return ::testing::AssertionSuccess();
}

// Distinct bit patterns in every byte-addressable dtype (integers, and 16-bit
// floats including NaN payloads), deterministic in `seed`.
Tensor pattern_tensor(DType dtype, const Shape& shape, std::uint64_t seed) {
  Tensor t = zeros(dtype, shape);
  auto* p = static_cast<unsigned char*>(t.data());
  std::uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (std::int64_t i = 0; i < (t.numel() * bits_of(dtype) + 7) / 8; ++i, s = s * 6364136223846793005ull + 1442695040888963407ull)
    p[i] = static_cast<unsigned char>(s >> 56);
  return t;
}

Tensor view(Result<Tensor> r) { return value_or_die(std::move(r)); }

class LayoutTest : public IsaTest {
 protected:
  // Runs reorder at the test's ISA and at scalar into zeroed copies of y's
  // layout; both must equal x element for element.
  void check_reorder(const Tensor& x, const Tensor& y, const Tensor& y_ref) {
    ASSERT_TRUE(ops::reorder(stream_, x, y).ok());
    ASSERT_TRUE(ops::reorder(ref_stream_, x, y_ref).ok());
    EXPECT_TRUE(same_elements(y, x));
    EXPECT_TRUE(same_elements(y_ref, x));
  }
};

const std::vector<std::pair<DType, DType>> kDtypePairs = {
    {DType::f32, DType::f32},  {DType::bf16, DType::bf16}, {DType::f16, DType::f16}, {DType::f32, DType::bf16},
    {DType::bf16, DType::f32}, {DType::f32, DType::f16},   {DType::f16, DType::f32}, {DType::f16, DType::bf16},
    {DType::bf16, DType::f16}};

TEST_P(LayoutTest, Transpose2D) {
  const std::vector<std::pair<std::int64_t, std::int64_t>> sizes = {
      {1, 1}, {1, 1000}, {1000, 1}, {3, 17}, {17, 3}, {64, 64}, {255, 1000}, {1000, 255}, {1000, 3}, {3, 1000}, {520, 1031}};
  for (auto [xt, yt] : kDtypePairs)
    for (auto [r, c] : sizes) {
      if (r * c > 300000 && xt != yt) continue;  // the large case once per dtype
      SCOPED_TRACE(fmt::format("{} -> {} [{}, {}]", to_string(xt), to_string(yt), r, c));
      Tensor x = view(random_tensor(xt, {r, c}, 1).transpose(0, 1));
      check_reorder(x, zeros(yt, {c, r}), zeros(yt, {c, r}));
      // and into a transposed destination from a contiguous source
      Tensor xc = random_tensor(xt, {r, c}, 2);
      check_reorder(xc, view(zeros(yt, {c, r}).transpose(0, 1)), view(zeros(yt, {c, r}).transpose(0, 1)));
    }
}

// The streaming-store paths run only past the L3 (hundreds of MiB here), so
// they are called directly: every row of this level, stream_y on, against
// the reference row on the same block.
TEST_P(LayoutTest, StreamingTransposeRowsMatchTheReference) {
  for (auto [xt, yt] : kDtypePairs)
    for (auto [r, c] : std::vector<std::pair<std::int64_t, std::int64_t>>{{70, 37}, {32, 16}, {5, 3}, {96, 64}}) {
      SCOPED_TRACE(fmt::format("{} -> {} [{}, {}]", to_string(xt), to_string(yt), r, c));
      Tensor x = random_tensor(xt, {r, c}, 7);
      Tensor y = zeros(yt, {c, r}), ref = zeros(yt, {c, r});
      kernels::ReorderArgs args{xt, yt, r, c, x.data(), c, 1, y.data(), 1, r, true};
      const kernels::ReorderProblem problem{kernels::ReorderMode::transpose, xt, yt, r, c, r * c};
      const auto* row = kernels::select<kernels::ReorderFamily>(problem, GetParam());
      row->run(args);
      args.y = ref.data();
      kernels::ref::reorder(args);
      EXPECT_TRUE(identical(y, ref)) << row->name;
    }
}

// Rows copied with streaming stores: y rows that start anywhere within a
// line (the aligned lines stream, the head and tail are masked).
TEST_P(LayoutTest, StreamingCopyRowsMatchTheReference) {
  for (DType dt : {DType::f32, DType::bf16})
    for (std::int64_t cols : {1L, 15L, 64L, 333L})
      for (std::int64_t shift : {0L, 1L, 7L}) {
        SCOPED_TRACE(fmt::format("{} cols={} y shifted by {}", to_string(dt), cols, shift));
        const std::int64_t rows = 3, ld = cols + 9;
        Tensor x = random_tensor(dt, {rows, cols}, 9);
        Tensor y = zeros(dt, {rows * ld + shift}), ref = zeros(dt, {rows * ld + shift});
        kernels::ReorderArgs args{dt, dt, rows, cols, x.data(), cols, 1, static_cast<char*>(y.data()) + shift * bytes_of(dt), ld, 1, true};
        const kernels::ReorderProblem problem{kernels::ReorderMode::copy, dt, dt, rows, cols, rows * cols};
        const auto* row = kernels::select<kernels::ReorderFamily>(problem, GetParam());
        row->run(args);
        args.y = static_cast<char*>(ref.data()) + shift * bytes_of(dt);
        kernels::ref::reorder(args);
        EXPECT_TRUE(identical(y, ref)) << row->name;
      }
}

TEST_P(LayoutTest, StreamingElementwiseRowsMatchTheReference) {
  for (DType dt : kFloatTypes)
    for (std::int64_t n : {1L, 17L, 100L, 1000L}) {
      SCOPED_TRACE(fmt::format("{} n={}", to_string(dt), n));
      Tensor x = random_tensor(dt, {n}, 8, -4.0f, 4.0f);
      Tensor y = zeros(dt, {n}), ref = zeros(dt, {n});
      kernels::UnaryArgs args{kernels::Act::silu, dt, dt, n, x.data(), 1, y.data(), 1, true};
      const kernels::UnaryProblem problem{kernels::Act::silu, dt, dt, 1, 1, n};
      kernels::select<kernels::UnaryFamily>(problem, GetParam())->run(args);
      args.y = ref.data();
      kernels::ref::unary(args);
      EXPECT_TRUE(close(y, ref, tolerance_for(dt)));
    }
}

TEST_P(LayoutTest, Permute4D) {
  struct Case {
    Shape shape;
    std::vector<int> order;
  };
  const std::vector<Case> cases = {
      {{2, 16, 9, 13}, {0, 2, 3, 1}},   // NCHW -> NHWC
      {{2, 9, 13, 16}, {0, 3, 1, 2}},   // NHWC -> NCHW
      {{1, 3, 224, 17}, {0, 2, 3, 1}},  // few channels
      {{2, 33, 4, 64}, {0, 2, 1, 3}},   // [B,S,H,D] -> [B,H,S,D]
      {{2, 4, 33, 64}, {0, 2, 1, 3}},   // and back
      {{3, 5, 7, 11}, {3, 2, 1, 0}},    // full reversal
  };
  for (auto [xt, yt] : kDtypePairs)
    for (const Case& c : cases) {
      SCOPED_TRACE(fmt::format("{} -> {} {} order {} {} {} {}", to_string(xt), to_string(yt), c.shape.to_string(), c.order[0],
                               c.order[1], c.order[2], c.order[3]));
      Tensor x = random_tensor(xt, c.shape, 3);
      Tensor permuted = view(x.permute(c.order));
      Tensor y = zeros(yt, permuted.shape()), ref = zeros(yt, permuted.shape());
      ASSERT_TRUE(ops::permute(stream_, x, c.order, y).ok());
      ASSERT_TRUE(ops::permute(ref_stream_, x, c.order, ref).ok());
      EXPECT_TRUE(same_elements(y, permuted));
      EXPECT_TRUE(same_elements(ref, permuted));
    }
}

TEST_P(LayoutTest, StridedSourcesAndDestinations) {
  for (auto [xt, yt] : kDtypePairs) {
    SCOPED_TRACE(fmt::format("{} -> {}", to_string(xt), to_string(yt)));
    Tensor big = random_tensor(xt, {9, 40, 35}, 4);
    // sliced with a step on the inner dim (no unit stride in x)
    Tensor stepped = view(big.slice(2, 1, 34, 2));
    check_reorder(stepped, zeros(yt, stepped.shape()), zeros(yt, stepped.shape()));
    // sliced rows into a destination with gaps between rows
    Tensor rows = view(big.slice(1, 3, 38));
    check_reorder(rows, padded_copy(zeros(yt, rows.shape()), 5), padded_copy(zeros(yt, rows.shape()), 5));
    // a permuted, sliced source into a differently permuted destination
    Tensor src = view(view(big.slice(0, 2, 9)).permute({2, 0, 1}));
    Tensor dst = view(zeros(yt, {src.dim(2), src.dim(0), src.dim(1)}).permute({1, 2, 0}));
    Tensor dst_ref = view(zeros(yt, {src.dim(2), src.dim(0), src.dim(1)}).permute({1, 2, 0}));
    check_reorder(src, dst, dst_ref);
    // a broadcast source (stride 0) materialized
    Tensor row = random_tensor(xt, {1, 35}, 5);
    Tensor wide = view(row.expand({6, 35}));
    check_reorder(wide, zeros(yt, {6, 35}), zeros(yt, {6, 35}));
    // a destination with no unit stride: every other element of a wider buffer
    Tensor holes = view(zeros(yt, {9, 70}).slice(1, 0, 70, 2));
    Tensor holes_ref = view(zeros(yt, {9, 70}).slice(1, 0, 70, 2));
    check_reorder(random_tensor(xt, {9, 35}, 6), holes, holes_ref);
  }
}

// 16-bit floats of one dtype move as raw bits: signaling NaN payloads too.
TEST_P(LayoutTest, SameDtypeIsBitExact) {
  for (DType dt : kFloatTypes) {
    Tensor x = pattern_tensor(dt, {37, 53}, 7);
    Tensor xt = view(x.transpose(0, 1));
    check_reorder(xt, zeros(dt, xt.shape()), zeros(dt, xt.shape()));
    check_reorder(x, padded_copy(zeros(dt, x.shape())), padded_copy(zeros(dt, x.shape())));
  }
}

TEST_P(LayoutTest, IntegerDtypesByteCopy) {
  for (DType dt : {DType::i8, DType::u8, DType::i32, DType::i64}) {
    SCOPED_TRACE(to_string(dt));
    Tensor x = pattern_tensor(dt, {2, 19, 70}, 8);
    check_reorder(x, zeros(dt, x.shape()), zeros(dt, x.shape()));
    Tensor permuted = view(x.permute({0, 2, 1}));
    check_reorder(permuted, zeros(dt, permuted.shape()), zeros(dt, permuted.shape()));
    Tensor stepped = view(x.slice(2, 0, 70, 3));
    check_reorder(stepped, padded_copy(zeros(dt, stepped.shape())), padded_copy(zeros(dt, stepped.shape())));
  }
  // i4: contiguous to contiguous moves the packed bytes.
  Tensor x4 = pattern_tensor(DType::i4, {6, 10}, 9), y4 = zeros(DType::i4, {6, 10});
  ASSERT_TRUE(ops::reorder(stream_, x4, y4).ok());
  EXPECT_EQ(std::memcmp(x4.data(), y4.data(), 30), 0);
}

TEST_P(LayoutTest, ZeroSizedReorder) {
  Tensor x = zeros(DType::f32, {0, 5}), y = zeros(DType::bf16, {5, 0});
  EXPECT_TRUE(ops::reorder(stream_, view(x.transpose(0, 1)), y).ok());
}

TEST_P(LayoutTest, ConcatSplitRoundTrip) {
  struct Case {
    std::vector<Shape> pieces;
    int axis;
  };
  const std::vector<Case> cases = {
      {{{2, 5, 7}, {3, 5, 7}, {1, 5, 7}}, 0},
      {{{2, 1, 7}, {2, 6, 7}, {2, 17, 7}}, 1},
      {{{4, 5, 3}, {4, 5, 64}, {4, 5, 1}}, 2},
      {{{4, 5, 3}, {4, 5, 9}}, -1},
      {{{4, 2, 3}, {4, 5, 3}}, -2},
      {{{4, 0, 3}, {4, 5, 3}, {4, 0, 3}}, 1},  // zero-sized pieces
      {{{64, 300}, {64, 700}}, 1},
  };
  for (DType dt : kFloatTypes)
    for (const Case& c : cases) {
      SCOPED_TRACE(fmt::format("{} axis {} first piece {}", to_string(dt), c.axis, c.pieces[0].to_string()));
      const int axis = c.axis < 0 ? c.axis + c.pieces[0].rank() : c.axis;
      std::vector<Tensor> in;
      Shape whole = c.pieces[0];
      whole[axis] = 0;
      for (std::size_t i = 0; i < c.pieces.size(); ++i) {
        in.push_back(random_tensor(dt, c.pieces[i], 10 + i));
        whole[axis] += c.pieces[i][axis];
      }
      in[0] = padded_copy(in[0]);  // one strided input
      Tensor y = zeros(dt, whole), ref = zeros(dt, whole);
      ASSERT_TRUE(ops::concat(stream_, in, c.axis, y).ok());
      ASSERT_TRUE(ops::concat(ref_stream_, in, c.axis, ref).ok());
      EXPECT_TRUE(same_elements(y, ref));
      std::int64_t start = 0;
      std::vector<Tensor> out;
      for (const Tensor& t : in) {
        EXPECT_TRUE(same_elements(view(y.slice(axis, start, start + t.dim(axis))), t));
        start += t.dim(axis);
        out.push_back(zeros(dt, t.shape()));
      }
      out.back() = padded_copy(out.back());  // one strided output
      ASSERT_TRUE(ops::split(stream_, y, c.axis, out).ok());
      for (std::size_t i = 0; i < in.size(); ++i) EXPECT_TRUE(same_elements(out[i], in[i]));
    }
}

TEST_P(LayoutTest, ConcatConvertsAndTransposesPieces) {
  // NCHW pieces (one transposed view) into an NHWC-ordered concat over channels, f32 -> bf16.
  Tensor a = random_tensor(DType::f32, {2, 7, 9, 3}, 20);
  Tensor b = view(random_tensor(DType::f32, {2, 7, 5, 9}, 21).permute({0, 1, 3, 2}));
  Tensor y = zeros(DType::bf16, {2, 7, 9, 8}), ref = zeros(DType::bf16, {2, 7, 9, 8});
  const Tensor in[] = {a, b};
  ASSERT_TRUE(ops::concat(stream_, in, 3, y).ok());
  ASSERT_TRUE(ops::concat(ref_stream_, in, 3, ref).ok());
  EXPECT_TRUE(same_elements(y, ref));
  EXPECT_TRUE(same_elements(view(y.slice(3, 0, 3)), a));
  EXPECT_TRUE(same_elements(view(y.slice(3, 3, 8)), b));
}

// The ONNX Pad definition, element by element.
Tensor pad_expected(const Tensor& x, const ops::PadAttrs& attrs) {
  Shape shape = x.shape();
  for (int d = 0; d < x.rank(); ++d) shape[d] += attrs.before[std::size_t(d)] + attrs.after[std::size_t(d)];
  Tensor y = zeros(x.dtype(), shape);
  const auto dims = detail::collapse<1>(shape, {y.strides()});
  for (std::int64_t i = 0; i < y.numel(); ++i) {
    std::int64_t rem = i, x_off = 0;
    bool inside = true;
    for (int d = x.rank() - 1; d >= 0; --d) {
      const std::int64_t n = x.dim(d);
      std::int64_t j = rem % shape[d] - attrs.before[std::size_t(d)];
      rem /= shape[d];
      if (j < 0 || j >= n) {
        if (attrs.mode == ops::PadMode::constant) inside = false;
        else if (attrs.mode == ops::PadMode::edge) j = j < 0 ? 0 : n - 1;
        else j = j < 0 ? -j : 2 * (n - 1) - j;
      }
      x_off += j * x.strides()[d];
    }
    detail::store(y.data(), y.dtype(), dims.offsets(i)[0], inside ? detail::load(x.data(), x.dtype(), x_off) : attrs.value);
  }
  return y;
}

TEST_P(LayoutTest, PadAllModes) {
  for (DType dt : kFloatTypes)
    for (auto mode : {ops::PadMode::constant, ops::PadMode::reflect, ops::PadMode::edge}) {
      const std::vector<std::pair<Shape, ops::PadAttrs>> cases = {
          {{17}, {.before = {3}, .after = {16}, .mode = mode, .value = 1.5f}},
          {{2, 3, 9, 13}, {.before = {0, 0, 1, 1}, .after = {0, 0, 1, 1}, .mode = mode, .value = -2.0f}},
          {{5, 6, 7}, {.before = {2, 0, 3}, .after = {4, 5, 0}, .mode = mode, .value = 0.25f}},
          {{4, 200}, {.before = {1, 0}, .after = {0, 0}, .mode = mode}},
      };
      for (const auto& [shape, attrs] : cases) {
        SCOPED_TRACE(fmt::format("{} mode {} shape {}", to_string(dt), int(mode), shape.to_string()));
        Tensor x = random_tensor(dt, shape, 30);
        if (shape.rank() > 1) x = padded_copy(x);  // a strided x
        Tensor want = pad_expected(x, attrs);
        Tensor y = zeros(dt, want.shape()), ref = zeros(dt, want.shape());
        ASSERT_TRUE(ops::pad(stream_, x, y, attrs).ok());
        ASSERT_TRUE(ops::pad(ref_stream_, x, ref, attrs).ok());
        EXPECT_TRUE(same_elements(y, want));
        EXPECT_TRUE(same_elements(ref, want));
      }
    }
  // integer dtype, constant value in range; conversion f32 -> bf16 with edge borders
  Tensor xi = pattern_tensor(DType::i32, {3, 4}, 31), yi = zeros(DType::i32, {5, 7});
  ASSERT_TRUE(ops::pad(stream_, xi, yi, {.before = {1, 2}, .after = {1, 1}, .value = -7}).ok());
  EXPECT_EQ(yi.data_as<std::int32_t>()[0], -7);
  EXPECT_EQ(yi.data_as<std::int32_t>()[1 * 7 + 2], xi.data_as<std::int32_t>()[0]);
  Tensor xf = random_tensor(DType::f32, {3, 4}, 32);
  const ops::PadAttrs edge{.before = {1, 1}, .after = {2, 0}, .mode = ops::PadMode::edge};
  Tensor yb = zeros(DType::bf16, {6, 5});
  ASSERT_TRUE(ops::pad(stream_, xf, yb, edge).ok());
  EXPECT_TRUE(same_elements(yb, pad_expected(xf, edge)));
}

TEST_P(LayoutTest, GatherAxes) {
  for (DType it : {DType::i32, DType::i64}) {
    Tensor x = random_tensor(DType::f32, {6, 5, 8}, 40);
    Tensor indices = zeros(it, {2, 3});
    const std::int64_t values[] = {0, 5, -1, 2, -6, 3};  // negatives count from the end
    for (int axis : {0, 1, -1}) {
      SCOPED_TRACE(fmt::format("{} axis {}", to_string(it), axis));
      const int a = axis < 0 ? axis + 3 : axis;
      const std::int64_t n = x.dim(a);
      for (int i = 0; i < 6; ++i) {
        const std::int64_t v = values[i] % n;  // keep in [-n, n)
        if (it == DType::i32) indices.data_as<std::int32_t>()[i] = std::int32_t(v);
        else indices.data_as<std::int64_t>()[i] = v;
      }
      Shape shape;
      for (int d = 0; d < a; ++d) shape.push_back(x.dim(d));
      shape.push_back(2), shape.push_back(3);
      for (int d = a + 1; d < 3; ++d) shape.push_back(x.dim(d));
      // x, and the same values laid out with x's dims reversed in memory (slabs not contiguous)
      const Tensor strided = view(view(view(x.transpose(0, 2)).contiguous()).transpose(0, 2));
      for (const Tensor& src : {x, strided}) {
        Tensor y = zeros(DType::f32, shape), ref = zeros(DType::f32, shape);
        ASSERT_TRUE(ops::gather(stream_, src, indices, axis, y).ok());
        ASSERT_TRUE(ops::gather(ref_stream_, src, indices, axis, ref).ok());
        EXPECT_TRUE(same_elements(y, ref));
        // y[.., k, ..] is x's slice at the wrapped index.
        for (int k = 0; k < 6; ++k) {
          std::int64_t v = detail::load_index(indices.data(), it, k);
          if (v < 0) v += n;
          Tensor got = view(view(y.slice(a, k / 3, k / 3 + 1)).slice(a + 1, k % 3, k % 3 + 1));
          Tensor want = view(src.slice(a, v, v + 1));
          EXPECT_TRUE(same_elements(view(got.reshape(want.shape())), want)) << "k " << k;
        }
      }
    }
  }
}

TEST_P(LayoutTest, GatherOutOfRangeIsAnError) {
  Tensor x = random_tensor(DType::f32, {4, 3}, 41);
  Tensor indices = zeros(DType::i64, {3});
  Tensor y = zeros(DType::f32, {3, 3});
  indices.data_as<std::int64_t>()[1] = 4;
  Status s = ops::gather(stream_, x, indices, 0, y);
  EXPECT_TRUE(fails_naming(s, "indices"));
  EXPECT_NE(s.message().find("4"), std::string::npos);
  indices.data_as<std::int64_t>()[1] = -5;
  EXPECT_TRUE(fails_naming(ops::gather(stream_, x, indices, 0, y), "indices"));
  (void)stream_.synchronize();
}

INSTANTIATE_TEST_SUITE_P(Isa, LayoutTest, ::testing::ValuesIn(isa_levels()), isa_name);

// ------------------------------------------------------------------- errors

TEST(LayoutErrors, PlanChecksNameTheArgument) {
  Context ctx;
  auto d = [](DType t, const Shape& s) { return TensorDesc::contiguous(t, s); };
  const TensorDesc f = d(DType::f32, {4, 6});

  // reorder
  EXPECT_TRUE(fails_naming(ops::Reorder::plan(ctx, d(DType::f32, {-1, 6}), f), "x"));
  EXPECT_TRUE(fails_naming(ops::Reorder::plan(ctx, f, d(DType::f32, {6, 4})), "y"));
  EXPECT_TRUE(fails_naming(ops::Reorder::plan(ctx, f, d(DType::i32, {4, 6})), "y"));
  EXPECT_TRUE(fails_naming(ops::Reorder::plan(ctx, d(DType::i8, {4, 6}), d(DType::u8, {4, 6})), "y"));
  EXPECT_TRUE(fails_naming(ops::Reorder::plan(ctx, f, TensorDesc{DType::f32, {4, 6}, {0, 1}}), "y"));
  EXPECT_TRUE(fails_naming(ops::Reorder::plan(ctx, TensorDesc{DType::i4, {4, 6}, {12, 1}}, d(DType::i4, {4, 6})), "x"));
  EXPECT_TRUE(fails_naming(ops::Reorder::plan(ctx, d(DType::i4, {4, 6}), TensorDesc{DType::i4, {4, 6}, {12, 1}}), "y"));
  EXPECT_TRUE(fails_naming(ops::Reorder::plan(ctx, d(DType::i4, {3}), d(DType::i4, {3})), "x"));

  // concat
  const TensorDesc pieces[] = {d(DType::f32, {4, 2}), d(DType::f32, {4, 4})};
  EXPECT_TRUE(ops::Concat::plan(ctx, pieces, 1, f).ok());
  EXPECT_TRUE(fails_naming(ops::Concat::plan(ctx, {}, 1, f), "inputs"));
  EXPECT_TRUE(fails_naming(ops::Concat::plan(ctx, pieces, 2, f), "axis"));
  EXPECT_TRUE(fails_naming(ops::Concat::plan(ctx, pieces, -3, f), "axis"));
  EXPECT_TRUE(fails_naming(ops::Concat::plan(ctx, pieces, 0, f), "inputs[0]"));
  EXPECT_TRUE(fails_naming(ops::Concat::plan(ctx, pieces, 1, d(DType::f32, {4, 7})), "y"));
  const TensorDesc bad_rank[] = {d(DType::f32, {4, 2}), d(DType::f32, {4, 4, 1})};
  EXPECT_TRUE(fails_naming(ops::Concat::plan(ctx, bad_rank, 1, f), "inputs[1]"));
  const TensorDesc bad_dtype[] = {d(DType::f32, {4, 2}), d(DType::i32, {4, 4})};
  EXPECT_TRUE(fails_naming(ops::Concat::plan(ctx, bad_dtype, 1, f), "y"));
  EXPECT_TRUE(fails_naming(ops::Concat::plan(ctx, pieces, 1, TensorDesc{DType::f32, {4, 6}, {0, 1}}), "y"));
  const TensorDesc invalid[] = {d(DType::f32, {4, 2}), d(DType::f32, {4, -4})};
  EXPECT_TRUE(fails_naming(ops::Concat::plan(ctx, invalid, 1, f), "inputs[1]"));

  // split
  EXPECT_TRUE(ops::Split::plan(ctx, f, -1, pieces).ok());
  EXPECT_TRUE(fails_naming(ops::Split::plan(ctx, f, 1, {}), "outputs"));
  EXPECT_TRUE(fails_naming(ops::Split::plan(ctx, f, 5, pieces), "axis"));
  EXPECT_TRUE(fails_naming(ops::Split::plan(ctx, d(DType::f32, {4, 7}), 1, pieces), "x"));
  const TensorDesc overlapping[] = {d(DType::f32, {4, 2}), TensorDesc{DType::f32, {4, 4}, {0, 1}}};
  EXPECT_TRUE(fails_naming(ops::Split::plan(ctx, f, 1, overlapping), "outputs[1]"));

  // pad
  const ops::PadAttrs ok{.before = {1, 0}, .after = {0, 2}};
  EXPECT_TRUE(ops::Pad::plan(ctx, f, d(DType::f32, {5, 8}), ok).ok());
  EXPECT_TRUE(fails_naming(ops::Pad::plan(ctx, f, d(DType::f32, {5, 8}), {.before = {1}, .after = {0, 2}}), "before"));
  EXPECT_TRUE(fails_naming(ops::Pad::plan(ctx, f, d(DType::f32, {5, 8}), {.before = {1, 0}, .after = {0}}), "after"));
  EXPECT_TRUE(fails_naming(ops::Pad::plan(ctx, f, d(DType::f32, {3, 8}), {.before = {-1, 0}, .after = {0, 2}}), "before"));
  EXPECT_TRUE(fails_naming(ops::Pad::plan(ctx, f, d(DType::f32, {4, 5}), {.before = {0, 0}, .after = {0, -1}}), "after"));
  EXPECT_TRUE(fails_naming(ops::Pad::plan(ctx, f, d(DType::f32, {5, 9}), ok), "y"));
  EXPECT_TRUE(fails_naming(ops::Pad::plan(ctx, f, TensorDesc{DType::f32, {5, 8}, {8, 0}}, ok), "y"));
  const std::int64_t huge = std::numeric_limits<std::int64_t>::max() - 2;
  EXPECT_TRUE(fails_naming(ops::Pad::plan(ctx, f, f, {.before = {huge, 0}, .after = {0, 0}}), "before"));
  EXPECT_TRUE(fails_naming(ops::Pad::plan(ctx, f, d(DType::f32, {12, 6}), {.before = {4, 0}, .after = {4, 0}, .mode = ops::PadMode::reflect}),
                           "before"));
  EXPECT_TRUE(fails_naming(ops::Pad::plan(ctx, d(DType::f32, {0, 6}), d(DType::f32, {1, 6}), {.before = {0, 0}, .after = {1, 0}, .mode = ops::PadMode::edge}),
                           "after"));
  EXPECT_TRUE(fails_naming(ops::Pad::plan(ctx, d(DType::i8, {4, 6}), d(DType::i8, {5, 8}), {.before = {1, 0}, .after = {0, 2}, .value = 0.5f}),
                           "value"));
  EXPECT_TRUE(fails_naming(ops::Pad::plan(ctx, d(DType::u8, {4, 6}), d(DType::u8, {5, 8}), {.before = {1, 0}, .after = {0, 2}, .value = 256}),
                           "value"));
  EXPECT_TRUE(fails_naming(ops::Pad::plan(ctx, d(DType::i4, {4, 6}), d(DType::i4, {5, 8}), ok), "x"));
  EXPECT_TRUE(fails_naming(ops::Pad::plan(ctx, d(DType::i8, {4, 6}), d(DType::i32, {5, 8}), ok), "y"));

  // gather
  const TensorDesc idx = d(DType::i64, {3});
  EXPECT_TRUE(ops::Gather::plan(ctx, f, idx, 1, d(DType::f32, {4, 3})).ok());
  EXPECT_TRUE(fails_naming(ops::Gather::plan(ctx, f, d(DType::f32, {3}), 1, d(DType::f32, {4, 3})), "indices"));
  EXPECT_TRUE(fails_naming(ops::Gather::plan(ctx, f, idx, 2, d(DType::f32, {4, 3})), "axis"));
  EXPECT_TRUE(fails_naming(ops::Gather::plan(ctx, d(DType::f32, {}), idx, 0, d(DType::f32, {3})), "x"));
  EXPECT_TRUE(fails_naming(ops::Gather::plan(ctx, f, idx, 1, d(DType::f32, {3, 4})), "y"));
  EXPECT_TRUE(fails_naming(ops::Gather::plan(ctx, f, idx, 1, d(DType::bf16, {4, 3})), "y"));
  EXPECT_TRUE(fails_naming(ops::Gather::plan(ctx, f, idx, 1, TensorDesc{DType::f32, {4, 3}, {0, 1}}), "y"));
  EXPECT_TRUE(fails_naming(ops::Gather::plan(ctx, d(DType::i4, {4, 6}), idx, 1, d(DType::i4, {4, 3})), "x"));
  EXPECT_TRUE(fails_naming(ops::Gather::plan(ctx, d(DType::f32, {2, 2, 2, 2, 2, 2}), d(DType::i32, {1, 1, 1, 1}), 0,
                                             d(DType::f32, {1, 1, 1, 1, 2, 2, 2, 2})),
                           "indices"));
}

TEST(LayoutErrors, RunChecksOverlapAndOutputs) {
  Context ctx;
  Stream stream(ctx);
  Tensor x = random_tensor(DType::f32, {4, 6}, 50);
  EXPECT_TRUE(fails_naming(ops::reorder(stream, x, x), "y"));
  Tensor y = zeros(DType::f32, {4, 6});
  Tensor a = view(y.slice(1, 0, 4)), b = view(y.slice(1, 2, 6));
  const Tensor overlapping[] = {a, b};
  Tensor src = zeros(DType::f32, {4, 8});
  EXPECT_TRUE(fails_naming(ops::split(stream, src, 1, overlapping), "outputs[1]"));
  const int order[] = {1, 0};
  EXPECT_TRUE(ops::permute(stream, x, order, zeros(DType::f32, {6, 4})).ok());
  (void)stream.synchronize();
}

}  // namespace
}  // namespace tessera::testing
