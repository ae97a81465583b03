#include <atomic>
#include <thread>
#include <vector>

#include "support/harness.hpp"

namespace tessera::testing {
namespace {

TEST(ThreadPool, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (std::int64_t n : {0L, 1L, 7L, 1000L, 100003L}) {
      for (std::int64_t grain : {1L, 3L, 64L, 1L << 20}) {
        std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
        pool.parallel_for(n, grain, [&](std::int64_t b, std::int64_t e) {
          EXPECT_LE(e - b, grain);
          for (std::int64_t i = b; i < e; ++i) hits[std::size_t(i)]++;
        });
        for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[std::size_t(i)].load(), 1) << "n=" << n << " i=" << i;
      }
    }
  }
}

TEST(ThreadPool, TileGrid2D) {
  ThreadPool pool(2);
  std::vector<std::atomic<int>> hits(37 * 53);
  pool.parallel_for_2d(37, 53, 8, 16, [&](std::int64_t i0, std::int64_t i1, std::int64_t j0, std::int64_t j1) {
    for (std::int64_t i = i0; i < i1; ++i)
      for (std::int64_t j = j0; j < j1; ++j) hits[std::size_t(i * 53 + j)]++;
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
}

TEST(ThreadPool, NestedLoopsRunInline) {
  ThreadPool pool(2);
  std::atomic<std::int64_t> sum{0};
  pool.parallel_for(8, 1, [&](std::int64_t b, std::int64_t) {
    pool.parallel_for(100, 10, [&](std::int64_t ib, std::int64_t ie) { sum += (ie - ib) * (b + 1); });
  });
  EXPECT_EQ(sum.load(), 100 * 36);
}

TEST(ThreadPool, ManyJobsFromSeveralThreads) {
  ThreadPool pool(2);
  std::atomic<std::int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c)
    callers.emplace_back([&] {
      for (int job = 0; job < 2000; ++job)
        pool.parallel_for(16, 1, [&](std::int64_t b, std::int64_t e) { total += e - b; });
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 3 * 2000 * 16);
}

TEST(ThreadPool, WakesAfterSleeping) {
  ThreadPool pool(2);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // workers go to sleep
  std::atomic<int> n{0};
  pool.parallel_for(64, 1, [&](std::int64_t b, std::int64_t e) { n += int(e - b); });
  EXPECT_EQ(n.load(), 64);
}

TEST(Hardware, InfoIsSane) {
  const hw::Info& info = hw::info();
  EXPECT_GE(info.cores, 1);
  EXPECT_GT(info.l1d_bytes, 0);
  EXPECT_GE(info.l2_bytes, info.l1d_bytes);
  EXPECT_TRUE(info.max_isa < hw::Isa::avx2 || (info.features.avx2 && info.features.fma));
  EXPECT_TRUE(info.max_isa < hw::Isa::avx512 || (info.features.avx512f && info.features.avx512bw));
  EXPECT_TRUE(info.max_isa < hw::Isa::avx512_bf16 || (info.features.avx512_bf16 && info.features.avx512_vnni));
  EXPECT_TRUE(info.max_isa < hw::Isa::amx || info.features.amx_permitted);
  for (hw::Isa isa : {hw::Isa::scalar, hw::Isa::avx2, hw::Isa::avx512, hw::Isa::avx512_bf16, hw::Isa::amx})
    EXPECT_EQ(hw::parse_isa(hw::to_string(isa)), isa);
  EXPECT_FALSE(hw::parse_isa("sse").has_value());
}

}  // namespace
}  // namespace tessera::testing
