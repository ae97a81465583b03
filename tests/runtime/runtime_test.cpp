#include <cstdlib>

#include "support/harness.hpp"

namespace tessera::testing {
namespace {

TEST(MemoryPool, CachesAndCounts) {
  MemoryPool pool;
  EXPECT_EQ(MemoryPool::size_class(1), 512);
  EXPECT_EQ(MemoryPool::size_class(1000), 1024);
  EXPECT_EQ(MemoryPool::size_class(1025), 1280);
  EXPECT_EQ(MemoryPool::size_class(3 << 20), 3 << 20);
  void* first = nullptr;
  {
    auto a = value_or_die(pool.allocate(1000));
    auto b = value_or_die(pool.allocate(5 << 20));
    first = a.data();
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.data()) % 64, 0u);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % 4096, 0u);
    EXPECT_EQ(pool.stats().in_use, 1024 + (5 << 20));
    EXPECT_EQ(pool.stats().peak, pool.stats().in_use);
  }
  EXPECT_EQ(pool.stats().in_use, 0);
  EXPECT_EQ(pool.stats().reserved, 1024 + (5 << 20));
  auto again = value_or_die(pool.allocate(900));  // same class: served from the cache
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(pool.stats().cache_hits, 1);
  again.release();
  pool.empty_cache();
  EXPECT_EQ(pool.stats().reserved, 0);
  EXPECT_EQ(pool.stats().peak, 1024 + (5 << 20));
  EXPECT_TRUE(fails_naming(pool.allocate(-1), "bytes"));
  EXPECT_FALSE(pool.allocate(std::int64_t(1) << 60).ok());
}

TEST(PlanCache, IsABoundedLru) {
  PlanCache cache(2);
  auto plan = std::make_shared<CachedPlan>();
  auto key = [](std::int64_t v) { return PlanKey("op", hw::Isa::scalar).add(v); };
  EXPECT_EQ(cache.find(key(1)), nullptr);
  cache.insert(key(1), plan);
  cache.insert(key(2), plan);
  EXPECT_NE(cache.find(key(1)), nullptr);  // 1 is now the most recent
  cache.insert(key(3), plan);              // evicts 2
  EXPECT_EQ(cache.find(key(2)), nullptr);
  EXPECT_NE(cache.find(key(3)), nullptr);
  const auto s = cache.stats();
  EXPECT_EQ(s.hits, 2);
  EXPECT_EQ(s.misses, 2);
  EXPECT_EQ(s.evictions, 1);
  EXPECT_EQ(s.size, 2u);
  cache.set_capacity(1);
  EXPECT_EQ(cache.stats().size, 1u);
  // Keys differ by op, ISA and every desc field.
  EXPECT_FALSE(PlanKey("a", hw::Isa::scalar) == PlanKey("b", hw::Isa::scalar));
  EXPECT_FALSE(PlanKey("a", hw::Isa::scalar) == PlanKey("a", hw::Isa::avx2));
  EXPECT_FALSE(PlanKey("a", hw::Isa::scalar).add(TensorDesc{DType::f32, {2, 3}, {3, 1}}) ==
               PlanKey("a", hw::Isa::scalar).add(TensorDesc{DType::f32, {2, 3}, {1, 2}}));
}

// Keys of more words than a key holds inline (attention's, with masks and
// caches) compare every word, those past the inline ones too.
TEST(PlanCache, LongKeysCompareEveryWord) {
  auto key = [](std::int64_t words, std::int64_t changed_at) {
    PlanKey k("op", hw::Isa::scalar);
    for (std::int64_t i = 0; i < words; ++i) k.add(i == changed_at ? -1 : i);
    return k;
  };
  PlanCache cache(8);
  cache.insert(key(100, -1), std::make_shared<CachedPlan>());
  EXPECT_NE(cache.find(key(100, -1)), nullptr);
  for (std::int64_t at : {0, 45, 46, 60, 99}) {
    SCOPED_TRACE(at);
    EXPECT_FALSE(key(100, at) == key(100, -1));
    EXPECT_EQ(cache.find(key(100, at)), nullptr);
  }
  EXPECT_FALSE(key(99, -1) == key(100, -1));
  EXPECT_TRUE(key(100, 60) == key(100, 60));
}

TEST(PlanCache, OneShotOpsHitTheCache) {
  Context ctx;
  Stream stream(ctx);
  Tensor x = random_tensor(DType::f32, {4, 64}, 1), y = zeros(DType::f32, {4, 64});
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(ops::silu(stream, x, y).ok());
  EXPECT_EQ(ctx.plans().stats().misses, 1);
  EXPECT_EQ(ctx.plans().stats().hits, 4);
  Tensor x2 = random_tensor(DType::f32, {8, 64}, 2), y2 = zeros(DType::f32, {8, 64});
  ASSERT_TRUE(ops::silu(stream, x2, y2).ok());
  EXPECT_EQ(ctx.plans().stats().size, 2u);
}

TEST(Context, IsaCeiling) {
  const hw::Isa max = hw::info().max_isa;
  EXPECT_EQ(Context({.isa = hw::Isa::scalar}).isa(), hw::Isa::scalar);
  EXPECT_EQ(Context({.isa = hw::Isa::amx}).isa(), max);  // never above the machine
  const char* saved = std::getenv("TESSERA_ISA");
  const std::string restore = saved ? saved : "";
  setenv("TESSERA_ISA", "avx2", 1);
  EXPECT_EQ(isa_from_env(max), std::min(hw::Isa::avx2, max));
  setenv("TESSERA_ISA", "bogus", 1);
  EXPECT_EQ(isa_from_env(max), max);  // warned and ignored
  if (saved) setenv("TESSERA_ISA", restore.c_str(), 1); else unsetenv("TESSERA_ISA");
  EXPECT_EQ(Context({.threads = 3}).pool().threads(), 3);
}

TEST(Stream, KeepsTheFirstErrorForSynchronize) {
  Context ctx;
  Stream stream(ctx);
  EXPECT_FALSE(stream.submit("first", [] { return Status::internal("boom"); }).ok());
  EXPECT_FALSE(stream.submit("second", [] { return Status::internal("bang"); }).ok());
  const Status s = stream.synchronize();
  EXPECT_NE(s.message().find("first: boom"), std::string::npos) << s.to_string();
  EXPECT_TRUE(stream.synchronize().ok());
}

TEST(Compare, ReportsErrorsAndSpecials) {
  Tensor a = random_tensor(DType::f32, {100}, 1);
  Tensor b = value_or_die(a.contiguous());
  Tensor c = random_tensor(DType::f32, {100}, 1);
  EXPECT_TRUE(close(a, c, tolerance_for(DType::f32)));
  c.data_as<float>()[7] += 0.1f;
  Comparison r = value_or_die(compare(c, a, tolerance_for(DType::f32)));
  EXPECT_EQ(r.mismatches, 1);
  EXPECT_EQ(r.first_mismatch, 7);
  EXPECT_NEAR(r.max_abs_error, 0.1, 1e-6);
  c.data_as<float>()[7] = std::numeric_limits<float>::quiet_NaN();
  r = value_or_die(compare(c, a, tolerance_for(DType::f32)));
  EXPECT_EQ(r.nan_got, 1);
  EXPECT_FALSE(r.passes(tolerance_for(DType::f32)));
  EXPECT_GT(tolerance_for(DType::bf16).rtol, tolerance_for(DType::f16).rtol);
  EXPECT_GT(tolerance_for(DType::f32, 1024).atol, tolerance_for(DType::f32).atol);
}

}  // namespace
}  // namespace tessera::testing
