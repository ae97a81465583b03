#pragma once
// The thread pool that splits kernels across cores: a fixed set of workers
// that spin briefly, then sleep, between jobs; the calling thread takes part
// in every job. One job runs at a time; a parallel_for called from inside a
// job runs serially on that thread; jobs from other threads wait their turn.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera {

class ThreadPool {
 public:
  // threads <= 0 means one per core (hw::info().cores).
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return int(workers_.size()) + 1; }

  // fn(begin, end) over [0, n) in chunks of `grain` (>= 1) elements.
  template <class F>
  void parallel_for(std::int64_t n, std::int64_t grain, F&& fn) {
    if (n <= 0) return;
    grain = std::max<std::int64_t>(grain, 1);
    const std::int64_t tasks = (n + grain - 1) / grain;
    auto body = [&](std::int64_t t) { fn(t * grain, std::min(n, (t + 1) * grain)); };
    run_tasks(tasks, body);
  }

  // fn(i0, i1, j0, j1) over the tile grid of [0, n0) x [0, n1) with tiles t0 x t1.
  template <class F>
  void parallel_for_2d(std::int64_t n0, std::int64_t n1, std::int64_t t0, std::int64_t t1, F&& fn) {
    if (n0 <= 0 || n1 <= 0) return;
    t0 = std::max<std::int64_t>(t0, 1);
    t1 = std::max<std::int64_t>(t1, 1);
    const std::int64_t tiles1 = (n1 + t1 - 1) / t1;
    const std::int64_t tasks = ((n0 + t0 - 1) / t0) * tiles1;
    auto body = [&](std::int64_t t) {
      const std::int64_t i = (t / tiles1) * t0, j = (t % tiles1) * t1;
      fn(i, std::min(n0, i + t0), j, std::min(n1, j + t1));
    };
    run_tasks(tasks, body);
  }

  // fn(t) for t in [0, tasks): the primitive both loops above are built on.
  template <class F>
  void run_tasks(std::int64_t tasks, F& fn) {
    run(tasks, [](void* ctx, std::int64_t t) { (*static_cast<F*>(ctx))(t); }, &fn);
  }

 private:
  using TaskFn = void (*)(void*, std::int64_t);
  void run(std::int64_t tasks, TaskFn fn, void* ctx);
  void worker_loop();
  void work_on_current_job();
  void wake_workers();

  std::vector<std::thread> workers_;
  std::mutex submit_mutex_;  // one job at a time when several threads share the pool
  // Job state. `epoch_` is odd while a job is live, even between jobs; the
  // fields below are written only while it is even and no worker is `active_`.
  alignas(64) std::atomic<std::uint64_t> epoch_{0};
  alignas(64) std::atomic<std::int64_t> next_task_{0};
  alignas(64) std::atomic<std::int64_t> done_tasks_{0};
  alignas(64) std::atomic<int> active_{0};
  // Idle workers sleep on a condition variable (not atomic::wait: GCC 12's
  // libstdc++ can lose the wake-up of a 64-bit atomic and hang the pool).
  std::mutex sleep_mutex_;
  std::condition_variable wake_;
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::int64_t tasks_ = 0;
  TaskFn fn_ = nullptr;
  void* ctx_ = nullptr;
};

}  // namespace tessera
