#include "tessera/core/thread_pool.hpp"

#include <immintrin.h>

#include "tessera/core/hw.hpp"

namespace tessera {

namespace {
// Set on pool workers and on a caller while it runs a job, so that a
// parallel_for inside a task runs serially instead of deadlocking.
thread_local bool t_in_job = false;

// How long an idle worker polls before it sleeps: long enough to catch the
// next op of a layer (a few microseconds away), short enough not to burn a
// core between requests.
constexpr int kSpinIterations = 1 << 14;
}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = hw::info().cores;
  workers_.reserve(std::size_t(threads - 1));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  epoch_.fetch_add(2);  // stays even: no job, but every waiter sees a change
  wake_workers();
  for (auto& w : workers_) w.join();
}

void ThreadPool::work_on_current_job() {
  std::int64_t done = 0;
  for (std::int64_t t = next_task_.fetch_add(1, std::memory_order_relaxed); t < tasks_;
       t = next_task_.fetch_add(1, std::memory_order_relaxed)) {
    fn_(ctx_, t);
    ++done;
  }
  if (done) done_tasks_.fetch_add(done, std::memory_order_release);
}

void ThreadPool::worker_loop() {
  t_in_job = true;
  // Start from 0, not the current epoch: a worker that starts late still
  // sees every change since the pool was made, the final stop included.
  std::uint64_t seen = 0;
  while (true) {
    std::uint64_t e = epoch_.load(std::memory_order_acquire);
    for (int i = 0; e == seen && i < kSpinIterations; ++i) {
      _mm_pause();
      e = epoch_.load(std::memory_order_acquire);
    }
    if (e == seen) {
      // The sleeper count is raised before the last look at epoch_, and
      // run() reads it after moving epoch_: one of the two sees the other.
      std::unique_lock lock(sleep_mutex_);
      sleepers_.fetch_add(1);
      wake_.wait(lock, [&] { return epoch_.load() != seen || stop_.load(); });
      sleepers_.fetch_sub(1);
      continue;
    }
    seen = e;
    if (stop_.load()) return;
    if ((e & 1u) == 0) continue;  // a job ended before we looked
    // Announce ourselves, then confirm the job is still live: the caller
    // ends a job (epoch even) before it waits for active_ == 0, so either it
    // sees us here or we see the even epoch and stay away from the fields.
    active_.fetch_add(1);
    if (epoch_.load() == e) work_on_current_job();
    active_.fetch_sub(1, std::memory_order_release);
  }
}

void ThreadPool::wake_workers() {
  if (sleepers_.load() == 0) return;
  std::lock_guard lock(sleep_mutex_);  // a worker between its check and its wait holds this
  wake_.notify_all();
}

void ThreadPool::run(std::int64_t tasks, TaskFn fn, void* ctx) {
  if (tasks <= 0) return;
  if (tasks == 1 || workers_.empty() || t_in_job) {
    for (std::int64_t t = 0; t < tasks; ++t) fn(ctx, t);
    return;
  }
  std::lock_guard lock(submit_mutex_);
  t_in_job = true;
  tasks_ = tasks;
  fn_ = fn;
  ctx_ = ctx;
  next_task_.store(0, std::memory_order_relaxed);
  done_tasks_.store(0, std::memory_order_relaxed);
  epoch_.fetch_add(1);  // odd: the job is live
  wake_workers();

  work_on_current_job();
  while (done_tasks_.load(std::memory_order_acquire) < tasks) _mm_pause();
  epoch_.fetch_add(1);  // even: the job is over
  // seq_cst, pairing with the worker's increment of active_ and re-read of epoch_.
  while (active_.load() != 0) _mm_pause();
  t_in_job = false;
}

}  // namespace tessera
