// Streams with workers and events: ops queue and return, run in order,
// report errors at synchronize, and two streams with their own cores give
// what one stream gives.
#include <atomic>
#include <chrono>
#include <thread>

#include "support/harness.hpp"

namespace tessera::testing {
namespace {

using namespace std::chrono_literals;

// A chain of ops: c = silu(a @ w) then rms_norm(c) into y.
struct Chain {
  Tensor a, w, c, y, gamma;
  Chain(std::uint64_t seed)
      : a(random_tensor(DType::f32, {48, 96}, seed)),
        w(random_tensor(DType::f32, {96, 80}, seed + 1)),
        c(zeros(DType::f32, {48, 80})),
        y(zeros(DType::f32, {48, 80})),
        gamma(random_tensor(DType::f32, {80}, seed + 2)) {}
  Status run(Stream& s) const {
    TESSERA_RETURN_IF_ERROR(ops::matmul(s, a, w, c, {.activation = ops::Activation::silu}));
    return ops::rms_norm(s, c, gamma, y);
  }
};

TEST(StreamTest, TwoStreamsWithTheirOwnCoresMatchOneStream) {
  Context ctx({.threads = 2});
  Chain one(1), two(10), one_ref(1), two_ref(10);
  {
    Stream inline_stream(ctx);
    ASSERT_TRUE(one_ref.run(inline_stream).ok());
    ASSERT_TRUE(two_ref.run(inline_stream).ok());
  }
  Stream s1(ctx, {.worker = true, .threads = 1}), s2(ctx, {.worker = true, .threads = 1});
  for (int repeat = 0; repeat < 20; ++repeat) {
    ASSERT_TRUE(one.run(s1).ok());
    ASSERT_TRUE(two.run(s2).ok());
  }
  ASSERT_TRUE(s1.synchronize().ok());
  ASSERT_TRUE(s2.synchronize().ok());
  EXPECT_TRUE(identical(one.y, one_ref.y));
  EXPECT_TRUE(identical(two.y, two_ref.y));
}

TEST(StreamTest, WorkerRunsInOrderAndRunReturnsAtOnce) {
  Context ctx;
  Stream s(ctx, {.worker = true});
  std::atomic<bool> release{false};
  std::vector<int> order;
  ASSERT_TRUE(s.enqueue("gate", [&] {
    while (!release.load()) std::this_thread::yield();
    order.push_back(0);
    return Status{};
  }).ok());
  // Queued behind the gate: an op returns while the worker is still blocked.
  Tensor x = random_tensor(DType::f32, {8, 32}, 3), y = zeros(DType::f32, {8, 32});
  ASSERT_TRUE(ops::relu(s, x, y).ok());
  for (int i = 1; i < 4; ++i) ASSERT_TRUE(s.enqueue("step", [&order, i] { order.push_back(i); return Status{}; }).ok());
  EXPECT_EQ(y.data_as<float>()[0], 0.0f);  // not run yet: zeros() made it, relu has not written
  release = true;
  ASSERT_TRUE(s.synchronize().ok());
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(y.data_as<float>()[0], std::max(0.0f, x.data_as<float>()[0]));
}

TEST(StreamTest, SynchronizeReportsTheFirstQueuedErrorByOpName) {
  Context ctx;
  Stream s(ctx, {.worker = true});
  Tensor x = random_tensor(DType::f32, {4, 16}, 1), y = zeros(DType::f32, {4, 16});
  const ops::PlanPtr plan = value_or_die(ops::RmsNorm::plan(ctx, x.desc(), std::nullopt, y.desc()));
  Tensor wrong = zeros(DType::f32, {4, 8});
  EXPECT_TRUE(plan->run(s, {x}, {wrong}).ok());  // queued: the checks run on the worker
  EXPECT_TRUE(plan->run(s, {x}, {y}).ok());
  const Status st = s.synchronize();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("rms_norm"), std::string::npos) << st.to_string();
  EXPECT_TRUE(s.synchronize().ok());  // reported once
  Tensor ref = zeros(DType::f32, {4, 16});
  Stream inline_stream(ctx);
  ASSERT_TRUE(ops::rms_norm(inline_stream, x, std::nullopt, ref).ok());
  EXPECT_TRUE(identical(y, ref));  // the op after the failed one still ran
}

TEST(StreamTest, QueuedOpKeepsItsTensorsAndWorkspaceAlive) {
  Context ctx;
  Stream s(ctx, {.worker = true});
  std::atomic<bool> release{false};
  ASSERT_TRUE(s.enqueue("gate", [&] {
    while (!release.load()) std::this_thread::yield();
    return Status{};
  }).ok());
  Tensor y = zeros(DType::f32, {64, 128});
  Tensor expected = zeros(DType::f32, {64, 128});
  {
    Tensor x = random_tensor(DType::f32, {64, 128}, 5);  // dropped by the caller before the op runs
    Stream inline_stream(ctx);
    ASSERT_TRUE(ops::softmax(inline_stream, x, expected).ok());
    ASSERT_TRUE(ops::softmax(s, x, y).ok());
  }
  release = true;
  ASSERT_TRUE(s.synchronize().ok());
  EXPECT_TRUE(identical(y, expected));
}

TEST(EventTest, WaitOrdersOneStreamAfterAnother) {
  Context ctx;
  Stream producer(ctx, {.worker = true}), consumer(ctx, {.worker = true});
  for (int trial = 0; trial < 20; ++trial) {
    std::atomic<bool> produced{false}, seen_before{true};
    ASSERT_TRUE(producer.enqueue("produce", [&] {
      std::this_thread::sleep_for(1ms);
      produced = true;
      return Status{};
    }).ok());
    Event e;
    e.record(producer);
    consumer.wait(e);
    ASSERT_TRUE(consumer.enqueue("consume", [&] {
      seen_before = produced.load();
      return Status{};
    }).ok());
    ASSERT_TRUE(consumer.synchronize().ok());
    EXPECT_TRUE(seen_before.load());
    EXPECT_TRUE(e.query());
  }
  ASSERT_TRUE(producer.synchronize().ok());
}

TEST(EventTest, QueryAndSynchronizeFollowTheRecordedPoint) {
  Context ctx;
  Stream s(ctx, {.worker = true});
  Event never;
  EXPECT_TRUE(never.query());  // never recorded: complete
  never.synchronize();
  std::atomic<bool> release{false};
  ASSERT_TRUE(s.enqueue("gate", [&] {
    while (!release.load()) std::this_thread::yield();
    return Status{};
  }).ok());
  Event e;
  e.record(s);
  EXPECT_FALSE(e.query());
  release = true;
  e.synchronize();
  EXPECT_TRUE(e.query());
  // An inline stream reaches a recorded point at once.
  Stream inline_stream(ctx);
  e.record(inline_stream);
  EXPECT_TRUE(e.query());
  ASSERT_TRUE(s.synchronize().ok());
}

TEST(StreamTest, DestructorDrainsTheQueue) {
  Context ctx;
  std::atomic<int> ran{0};
  {
    Stream s(ctx, {.worker = true});
    for (int i = 0; i < 50; ++i) ASSERT_TRUE(s.enqueue("count", [&] { ++ran; return Status{}; }).ok());
  }
  EXPECT_EQ(ran.load(), 50);
}

}  // namespace
}  // namespace tessera::testing
