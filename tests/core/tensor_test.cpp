#include <cstring>

#include "support/harness.hpp"
#include "tessera/core/aligned.hpp"

namespace tessera::testing {
namespace {

TEST(Shape, NumelAndValidation) {
  EXPECT_EQ(*checked_numel({2, 3, 4}, "x"), 24);
  EXPECT_EQ(*checked_numel({}, "x"), 1);
  EXPECT_EQ(*checked_numel({5, 0}, "x"), 0);
  EXPECT_TRUE(fails_naming(checked_numel({-1, 2}, "x"), "x"));
  EXPECT_TRUE(fails_naming(checked_numel({std::int64_t(1) << 32, std::int64_t(1) << 32}, "x"), "x"));
  EXPECT_TRUE(fails_naming(TensorDesc::contiguous(DType::f32, {1, 2, 3, 4, 5, 6, 7, 8, 9}).validate("x"), "x"));
  // The element count fits, but the byte span of a huge stride does not.
  EXPECT_TRUE(fails_naming(TensorDesc{DType::f32, {4, 2}, {std::int64_t(1) << 62, 1}}.validate("w"), "w"));
  EXPECT_TRUE(TensorDesc::contiguous(DType::f32, {2, 3}).is_contiguous());
  EXPECT_FALSE((TensorDesc{DType::f32, {2, 3}, {1, 2}}.is_contiguous()));
  EXPECT_EQ((TensorDesc{DType::f32, {2, 3}, {4, 1}}.span_bytes()), (4 + 2 + 1) * 4);
  EXPECT_EQ(TensorDesc::contiguous(DType::i4, {2, 3}).span_bytes(), 3);
}

// Small buffers start on a cache line; large ones on a 2 MiB boundary, the
// start of a huge page (aligned.cpp), also through the memory pool.
TEST(Tensor, LargeBuffersStartOnHugePages) {
  auto offset = [](const void* p, std::size_t a) { return reinterpret_cast<std::uintptr_t>(p) % a; };
  Tensor small = value_or_die(Tensor::empty(DType::f32, {3, 5}));
  EXPECT_EQ(offset(small.data(), kAlignment), 0u);
  Tensor large = value_or_die(Tensor::empty(DType::bf16, {std::int64_t(kHugePage) / 2 + 3}));  // just past 2 MiB
  EXPECT_EQ(offset(large.data(), kHugePage), 0u);
  std::memset(large.data(), 0x5a, large.desc().span_bytes());  // all of it writable
  MemoryPool pool;
  MemoryPool::Block block = value_or_die(pool.allocate(std::int64_t(3 * kHugePage + 1)));
  EXPECT_EQ(offset(block.data(), kHugePage), 0u);
  std::memset(block.data(), 0x5a, block.bytes());
}

TEST(Tensor, ViewsShareStorage) {
  Tensor t = random_tensor(DType::f32, {2, 3, 4}, 1);
  Tensor p = value_or_die(t.permute({2, 0, 1}));
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Strides{1, 12, 4}));
  EXPECT_EQ(p.data(), t.data());
  Tensor s = value_or_die(t.slice(2, 1, 4, 2));  // elements 1, 3
  EXPECT_EQ(s.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(s.data_as<float>(), t.data_as<float>() + 1);
  EXPECT_EQ(s.strides(), (Strides{12, 4, 2}));
  Tensor e = value_or_die(value_or_die(t.slice(0, 0, 1)).expand({5, 3, 4}));
  EXPECT_EQ(e.strides()[0], 0);
  Tensor r = value_or_die(t.reshape({6, -1}));
  EXPECT_EQ(r.shape(), (Shape{6, 4}));
  EXPECT_EQ(r.data(), t.data());
}

TEST(Tensor, ReshapeOfStridedViews) {
  Tensor t = random_tensor(DType::f32, {4, 6, 8}, 2);
  // Slicing dim 0 keeps dims 1 and 2 contiguous: merging them is a view.
  Tensor s = value_or_die(t.slice(0, 1, 3));
  Tensor r = value_or_die(s.reshape({2, 48}));
  EXPECT_EQ(r.strides(), (Strides{48, 1}));
  // Splitting a dim is always a view.
  EXPECT_EQ(value_or_die(s.reshape({2, 2, 3, 8})).strides(), (Strides{48, 24, 8, 1}));
  // Merging across a transpose is not: the message says to call contiguous().
  Tensor tr = value_or_die(t.transpose(1, 2));
  Result<Tensor> bad = tr.reshape({4, 48});
  EXPECT_TRUE(fails_naming(bad, "shape"));
  Tensor c = value_or_die(tr.contiguous());
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_TRUE(close(c, tr, {0, 0, 1.0}));
  EXPECT_TRUE(value_or_die(c.reshape({4, 48})).is_contiguous());
  // Size-1 dims anywhere.
  EXPECT_EQ(value_or_die(t.reshape({1, 4, 1, 48, 1})).shape(), (Shape{1, 4, 1, 48, 1}));
}

TEST(Tensor, ViewErrorsNameTheArgument) {
  Tensor t = random_tensor(DType::f32, {2, 3}, 3);
  EXPECT_TRUE(fails_naming(t.permute({0, 0}), "order"));
  EXPECT_TRUE(fails_naming(t.permute({0}), "order"));
  EXPECT_TRUE(fails_naming(t.transpose(0, 2), "dim1"));
  EXPECT_TRUE(fails_naming(t.reshape({4, 2}), "shape"));
  EXPECT_TRUE(fails_naming(t.reshape({-1, -1}), "shape"));
  EXPECT_TRUE(fails_naming(t.slice(1, 2, 1), "end"));
  EXPECT_TRUE(fails_naming(t.slice(1, 4, 4), "start"));
  EXPECT_TRUE(fails_naming(t.slice(1, 0, 3, 0), "step"));
  EXPECT_TRUE(fails_naming(t.slice(5, 0, 1), "dim"));
  EXPECT_TRUE(fails_naming(t.expand({4, 3}), "shape"));
  EXPECT_TRUE(fails_naming(Tensor::empty(DType::f32, {-2}), "shape"));
  EXPECT_TRUE(fails_naming(Tensor::wrap(nullptr, TensorDesc::contiguous(DType::f32, {2})), "data"));
  EXPECT_TRUE(fails_naming(copy(t, random_tensor(DType::f32, {3, 2}, 4)), "dst"));
  EXPECT_TRUE(Tensor::wrap(nullptr, TensorDesc::contiguous(DType::f32, {0})).ok());
  // Rank above kMaxRank, and sizes whose strides or spans overflow.
  EXPECT_TRUE(fails_naming(Tensor::empty(DType::f32, {1, 1, 1, 1, 1, 1, 1, 1, 1}), "shape"));
  EXPECT_TRUE(fails_naming(t.reshape({1, 1, 1, 1, 1, 1, 1, 1, 6}), "shape"));
  EXPECT_TRUE(fails_naming(Tensor::empty(DType::f32, {4, std::int64_t(1) << 62, 4}), "shape"));
  EXPECT_TRUE(fails_naming(TensorDesc{DType::f32, {2}, {INT64_MAX}}.validate("x"), "x"));
  EXPECT_TRUE(TensorDesc::contiguous(DType::f32, {0, std::int64_t(1) << 40, std::int64_t(1) << 40}).validate("x").ok());
  // A huge step selects one element and must not overflow the stride.
  EXPECT_EQ(value_or_die(t.slice(1, 0, 3, INT64_MAX)).shape(), (Shape{2, 1}));
  EXPECT_EQ(value_or_die(t.slice(1, 1, 1)).shape(), (Shape{2, 0}));
}

TEST(Tensor, I4ViewsKeepAContiguousLastDim) {
  Tensor q = zeros(DType::i4, {8, 2});
  EXPECT_TRUE(q.reshape({16}).ok());
  EXPECT_FALSE(q.transpose(0, 1).ok());
  Tensor col = zeros(DType::i4, {8, 1});
  Tensor every_other = value_or_die(col.slice(0, 0, 8, 2));
  EXPECT_FALSE(every_other.reshape({4}).ok());  // would give the last dim stride 2
  EXPECT_FALSE(zeros(DType::i4, {4, 3}).slice(0, 1, 2).ok());  // starts at element 3: mid-byte
}

TEST(Tensor, CopyHandlesAnyStrides) {
  for (DType dt : {DType::f32, DType::bf16, DType::i8, DType::i64}) {
    Tensor src = zeros(dt, {5, 7});
    for (int i = 0; i < 35; ++i) static_cast<std::uint8_t*>(src.data())[i * (bits_of(dt) / 8)] = std::uint8_t(i + 1);
    Tensor dst = value_or_die(zeros(dt, {7, 5}).transpose(0, 1));
    ASSERT_TRUE(copy(src, dst).ok());
    Tensor back = value_or_die(dst.contiguous());
    EXPECT_EQ(std::memcmp(back.data(), src.data(), std::size_t(35 * bits_of(dt) / 8)), 0) << to_string(dt);
  }
}

}  // namespace
}  // namespace tessera::testing
