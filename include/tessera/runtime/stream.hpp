#pragma once
// Stream: an in-order queue of op executions on a Context, and Event, which
// orders one stream's work after a point in another's.
//
// A stream with a worker (StreamOptions::worker) runs its ops on its own
// thread: an op's run() checks nothing but enqueues and returns at once, and
// the op's own checks and work run on the worker in submission order. Errors
// then surface at synchronize(), which waits for the queue to drain and
// returns the first error since the last synchronize, named by its op.
// Tensors given to an op are kept alive by the queue (they share storage);
// a raw workspace pointer must stay valid until the op has run.
//
// A stream without a worker (the default) runs each op on the calling thread
// as it is submitted: run() returns when the op is done, with its error.
//
// Two streams run side by side when each has its own share of the cores
// (StreamOptions::threads); with threads = 0 a stream splits its ops over
// the context's pool, which runs one job at a time.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "tessera/core/status.hpp"
#include "tessera/core/thread_pool.hpp"
#include "tessera/runtime/context.hpp"

namespace tessera {

struct StreamOptions {
  bool worker = false;  // run ops on the stream's own thread; run() returns at once
  int threads = 0;      // > 0: the stream's own pool of this many threads (its worker's among them)
};

class Event;

class Stream {
 public:
  explicit Stream(Context& ctx, const StreamOptions& options = {});
  ~Stream();  // waits for the queued work
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  Context& context() const { return *ctx_; }
  // The threads this stream's ops split their work over.
  ThreadPool& pool() { return own_pool_ ? *own_pool_ : ctx_->pool(); }
  // This stream's number: its track in profiles (0, 1, ... in creation order).
  int id() const { return id_; }
  // True when work submitted from this thread runs at once: the stream has
  // no worker, or this is its worker.
  bool runs_here() const { return !worker_.joinable() || std::this_thread::get_id() == worker_.get_id(); }

  // Runs `work` in stream order: at once when runs_here(), else queued for
  // the worker. A failure is kept for synchronize() as "op_name: message";
  // when the work ran at once it is also returned.
  Status enqueue(std::string_view op_name, std::function<Status()> work);
  // The same for work that must run now, on the executing thread: an op's
  // body inside its run (no allocation, no queue).
  template <class F>
  Status submit(std::string_view op_name, F&& work) {
    Status s = work();
    if (!s.ok()) keep_error(op_name, s);
    return s;
  }

  // Queued work waits until `event` has completed (as recorded when wait is called).
  void wait(const Event& event);
  // Blocks until every op submitted so far has run; the first error since
  // the last synchronize, or OK.
  Status synchronize();

 private:
  struct Task {
    std::string_view op_name;
    std::function<Status()> work;
  };
  void keep_error(std::string_view op_name, const Status& s);
  void worker_loop();

  Context* ctx_;
  int id_;
  std::unique_ptr<ThreadPool> own_pool_;
  std::mutex mutex_;
  std::condition_variable work_ready_, drained_;
  std::deque<Task> queue_;
  bool busy_ = false;  // the worker is running a task
  bool stop_ = false;
  Status first_error_;
  std::thread worker_;  // last: started once everything above exists
};

// A point in a stream's order. record() marks it after all work submitted to
// the stream so far; Stream::wait and synchronize() wait for it. An event
// never recorded is complete. Copies share the same event.
class Event {
 public:
  Event();
  void record(Stream& stream);
  // True once the latest recorded point has been reached.
  bool query() const;
  // Blocks until the latest recorded point has been reached.
  void synchronize() const;

 private:
  friend class Stream;
  struct State {
    mutable std::mutex mutex;
    mutable std::condition_variable reached;
    std::uint64_t recorded = 0, completed = 0;  // record() calls made / reached
  };
  std::shared_ptr<State> state_;
};

}  // namespace tessera
