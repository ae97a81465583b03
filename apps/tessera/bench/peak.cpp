// Built with AVX-512 and AMX flags (see CMakeLists.txt); each probe runs only
// where hw::info() says the unit is there and usable.
#include "bench/peak.hpp"

#include <immintrin.h>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace tessera::app::bench {

namespace {

constexpr double kSeconds = 0.05;  // per probe and thread

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// 24 independent FMA chains: enough to cover latency x ports.
double fma_probe() {
  __m512 acc[24];
  for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_ps(float(i));
  __m512 b = _mm512_set1_ps(1.0f), c = _mm512_set1_ps(1e-7f);
  const auto t0 = std::chrono::steady_clock::now();
  std::int64_t iters = 0;
  do {
    for (int r = 0; r < 1000; ++r) {
#pragma GCC unroll 24
      for (int i = 0; i < 24; ++i) acc[i] = _mm512_fmadd_ps(acc[i], b, c);
      __asm__ volatile("" : "+v"(b));
    }
    iters += 1000;
  } while (seconds_since(t0) < kSeconds);
  float sink = 0;
  for (const __m512& v : acc) sink += _mm512_reduce_add_ps(v);
  __asm__ volatile("" ::"x"(sink));
  return double(iters) * 24 * 32 / seconds_since(t0) / 1e9;
}

struct alignas(64) TileConfig {
  std::uint8_t palette = 1, start_row = 0, reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};

// Four 16x16 accumulators fed by tiles held in registers: the TMUL's own rate.
template <bool Int8>
double amx_probe() {
  TileConfig cfg;
  for (int i = 0; i < 8; ++i) cfg.colsb[i] = 64, cfg.rows[i] = 16;
  _tile_loadconfig(&cfg);
  alignas(64) static const std::uint8_t zeros[1024] = {};
  _tile_loadd(4, zeros, 64);
  _tile_loadd(5, zeros, 64);
  _tile_loadd(6, zeros, 64);
  _tile_loadd(7, zeros, 64);
  const auto t0 = std::chrono::steady_clock::now();
  std::int64_t iters = 0;
  do {
    for (int r = 0; r < 1000; ++r) {
      if constexpr (Int8) {
        _tile_dpbssd(0, 4, 6);
        _tile_dpbssd(1, 4, 7);
        _tile_dpbssd(2, 5, 6);
        _tile_dpbssd(3, 5, 7);
      } else {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
    }
    iters += 1000;
  } while (seconds_since(t0) < kSeconds);
  const double s = seconds_since(t0);
  _tile_release();
  const double ops_per_tile = 16.0 * 16 * (Int8 ? 64 : 32) * 2;
  return double(iters) * 4 * ops_per_tile / s / 1e9;
}

// Runs the probe on every thread of the pool at once and sums the rates.
template <class Probe>
double on_all_threads(Context& ctx, Probe probe) {
  std::atomic<double> total{0};
  const int threads = ctx.pool().threads();
  auto task = [&](std::int64_t) {
    const double rate = probe();
    double seen = total.load();
    while (!total.compare_exchange_weak(seen, seen + rate)) {
    }
  };
  ctx.pool().run_tasks(threads, task);
  return total.load();
}

}  // namespace

Peaks measure_peaks(Context& ctx) {
  Peaks p;
  const hw::Isa isa = hw::info().max_isa;
  if (isa >= hw::Isa::avx512) p.fma_f32 = on_all_threads(ctx, fma_probe);
  if (isa >= hw::Isa::amx) {
    p.amx_bf16 = on_all_threads(ctx, amx_probe<false>);
    p.amx_int8 = on_all_threads(ctx, amx_probe<true>);
  }
  return p;
}

}  // namespace tessera::app::bench
