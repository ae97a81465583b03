#include "tessera/runtime/stream.hpp"

#include <atomic>

namespace tessera {

namespace {
std::atomic<int> next_stream_id{0};
}

Stream::Stream(Context& ctx, const StreamOptions& options)
    : ctx_(&ctx), id_(next_stream_id.fetch_add(1, std::memory_order_relaxed)) {
  if (options.threads > 0) own_pool_ = std::make_unique<ThreadPool>(options.threads);
  if (options.worker) worker_ = std::thread([this] { worker_loop(); });
}

Stream::~Stream() {
  if (!worker_.joinable()) return;
  {
    std::unique_lock lock(mutex_);
    drained_.wait(lock, [&] { return queue_.empty() && !busy_; });
    stop_ = true;
  }
  work_ready_.notify_one();
  worker_.join();
}

void Stream::keep_error(std::string_view op_name, const Status& s) {
  std::lock_guard lock(mutex_);
  if (first_error_.ok()) first_error_ = Status(s.code(), std::string(op_name) + ": " + s.message());
}

Status Stream::enqueue(std::string_view op_name, std::function<Status()> work) {
  if (runs_here()) return submit(op_name, work);
  {
    std::lock_guard lock(mutex_);
    queue_.push_back({op_name, std::move(work)});
  }
  work_ready_.notify_one();
  return {};
}

void Stream::worker_loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    work_ready_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_, and nothing left
    Task task = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    const Status s = task.work();
    task.work = nullptr;  // release the op's tensors before reporting it done
    if (!s.ok()) keep_error(task.op_name, s);
    lock.lock();
    busy_ = false;
    if (queue_.empty()) drained_.notify_all();
  }
}

void Stream::wait(const Event& event) {
  std::shared_ptr<Event::State> state = event.state_;
  std::uint64_t point;
  {
    std::lock_guard lock(state->mutex);
    point = state->recorded;
  }
  if (point == 0) return;
  enqueue("event_wait", [state, point] {
    std::unique_lock lock(state->mutex);
    state->reached.wait(lock, [&] { return state->completed >= point; });
    return Status{};
  });
}

Status Stream::synchronize() {
  std::unique_lock lock(mutex_);
  drained_.wait(lock, [&] { return queue_.empty() && !busy_; });
  return std::exchange(first_error_, Status{});
}

Event::Event() : state_(std::make_shared<State>()) {}

void Event::record(Stream& stream) {
  std::uint64_t point;
  {
    std::lock_guard lock(state_->mutex);
    point = ++state_->recorded;
  }
  stream.enqueue("event_record", [state = state_, point] {
    {
      std::lock_guard lock(state->mutex);
      state->completed = std::max(state->completed, point);
    }
    state->reached.notify_all();
    return Status{};
  });
}

bool Event::query() const {
  std::lock_guard lock(state_->mutex);
  return state_->completed >= state_->recorded;
}

void Event::synchronize() const {
  std::unique_lock lock(state_->mutex);
  const std::uint64_t point = state_->recorded;
  state_->reached.wait(lock, [&] { return state_->completed >= point; });
}

}  // namespace tessera
