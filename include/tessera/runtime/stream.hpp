#pragma once
// Stream: an in-order queue of op executions on a Context. Work submitted
// to a stream runs in submission order; synchronize() returns the first
// error since the last synchronize, naming the op that failed.
//
// This first version runs each op on the calling thread as it is submitted,
// so submit() returns after the op is done; worker-backed streams and
// events replace the body of submit() without changing its callers.
#include <string>
#include <string_view>
#include <utility>

#include "tessera/core/status.hpp"
#include "tessera/runtime/context.hpp"

namespace tessera {

class Stream {
 public:
  explicit Stream(Context& ctx) : ctx_(&ctx) {}
  Context& context() const { return *ctx_; }

  // Runs `op_name`'s work in order; its error is returned and also kept for synchronize().
  template <class F>
  Status submit(std::string_view op_name, F&& work) {
    Status s = work();
    if (!s.ok() && first_error_.ok()) first_error_ = Status(s.code(), std::string(op_name) + ": " + s.message());
    return s;
  }
  Status synchronize() { return std::exchange(first_error_, Status{}); }

 private:
  Context* ctx_;
  Status first_error_;
};

}  // namespace tessera
