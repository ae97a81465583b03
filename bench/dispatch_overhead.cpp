// Host cost of running an op whose work is nothing (1 element): plan->run()
// alone, and the one-shot call that also builds the key and hits the plan cache.
//   build/bench/bench_dispatch --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include "tessera/tessera.hpp"

namespace {

using namespace tessera;

struct Setup {
  Context ctx{{.threads = 1}};
  Stream stream{ctx};
  Tensor a = Tensor::zeros(DType::f32, {1, 1}).value();
  Tensor b = Tensor::zeros(DType::f32, {1, 1}).value();
  Tensor y = Tensor::zeros(DType::f32, {1, 1}).value();
};

void BM_PlanRun(benchmark::State& state) {
  Setup s;
  auto plan = ops::Binary::plan(s.ctx, ops::BinaryOp::add, s.a.desc(), s.b.desc(), s.y.desc()).value();
  for (auto _ : state) benchmark::DoNotOptimize(plan->run(s.stream, {s.a, s.b}, {s.y}));
}

void BM_OneShotCached(benchmark::State& state) {
  Setup s;
  for (auto _ : state) benchmark::DoNotOptimize(ops::add(s.stream, s.a, s.b, s.y));
}

}  // namespace

BENCHMARK(BM_PlanRun);
BENCHMARK(BM_OneShotCached);
BENCHMARK_MAIN();
