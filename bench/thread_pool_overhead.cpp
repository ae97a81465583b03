// How much does one parallel loop cost at 2 threads when the work is tiny?
// That overhead is paid by every op of a decode step, so it decided the pool.
//   build/bench/bench_thread_pool --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <omp.h>
#include <pthreadpool.h>

#include <atomic>

#include "tessera/core/thread_pool.hpp"

namespace {

constexpr int kThreads = 2;
std::atomic<std::int64_t> sink{0};

// Each task touches a little memory so the loop is not optimized away.
void task(std::int64_t i) { sink.fetch_add(i, std::memory_order_relaxed); }

void BM_Tessera(benchmark::State& state) {
  tessera::ThreadPool pool(kThreads);
  const std::int64_t tasks = state.range(0);
  for (auto _ : state) pool.parallel_for(tasks, 1, [](std::int64_t b, std::int64_t e) { for (; b < e; ++b) task(b); });
}

void BM_OpenMP(benchmark::State& state) {
  const std::int64_t tasks = state.range(0);
  omp_set_num_threads(kThreads);
  for (auto _ : state) {
#pragma omp parallel for schedule(dynamic, 1)
    for (std::int64_t i = 0; i < tasks; ++i) task(i);
  }
}

void BM_Pthreadpool(benchmark::State& state) {
  pthreadpool_t pool = pthreadpool_create(kThreads);
  const std::size_t tasks = std::size_t(state.range(0));
  for (auto _ : state)
    pthreadpool_parallelize_1d(pool, [](void*, std::size_t i) { task(std::int64_t(i)); }, nullptr, tasks, 0);
  pthreadpool_destroy(pool);
}

}  // namespace

BENCHMARK(BM_Tessera)->Arg(2)->Arg(16)->UseRealTime();
BENCHMARK(BM_OpenMP)->Arg(2)->Arg(16)->UseRealTime();
BENCHMARK(BM_Pthreadpool)->Arg(2)->Arg(16)->UseRealTime();
BENCHMARK_MAIN();
