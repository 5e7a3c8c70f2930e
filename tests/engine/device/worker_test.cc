#include "engine/device/worker.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>

#include "engine/backend/host/host_devices.h"
#include "engine/device/device_guard.h"
#include "engine/device/runtime.h"

namespace dpe {
namespace {

TEST(WorkerTest, RunsTasksInOrderOnItsThreadUnderTheDeviceGuard) {
  DeviceContext& ctx = Runtime::get().context(Device::parse("host:1"));
  std::vector<int> order;
  std::vector<std::future<void>> futures;
  for (int i = 0; i < 50; ++i) {
    futures.push_back(ctx.worker().submit([&order, i, &ctx] {
      EXPECT_TRUE(ctx.worker().on_worker_thread());
      EXPECT_EQ(current_device_context(), &ctx);
      order.push_back(i);
    }));
  }
  for (auto& f : futures) f.get();
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[i], i);
  EXPECT_EQ(current_device_context(), nullptr);  // the caller's thread is untouched
}

TEST(WorkerTest, CountsHandOffsAndTheirWait) {
  Worker& w = Runtime::get().context(Device::parse("host:1")).worker();
  const int64_t before = w.handoffs(), wait_before = w.handoff_wait_ns();
  // The second task waits behind the first for at least the first's 20 ms.
  auto first = w.submit([] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
  auto second = w.submit([] {});
  first.get();
  second.get();
  EXPECT_EQ(w.handoffs() - before, 2);
  EXPECT_GE(w.handoff_wait_ns() - wait_before, 15'000'000);
  w.run([] {});  // on another thread: a hand-off; run() inside a task would not be
  EXPECT_EQ(w.handoffs() - before, 3);
}

// A task that signals its caller before it returns (the backward engine's tasks do) is already
// counted as busy when the caller looks.
TEST(WorkerTest, BusyTimeCountsTheRunningTask) {
  Worker& w = Runtime::get().context(Device::parse("host:1")).worker();
  const int64_t before = w.busy_ns();
  std::promise<void> started, release;
  auto done = w.submit([&] {
    started.set_value();
    release.get_future().wait();
  });
  started.get_future().wait();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_GE(w.busy_ns() - before, 5'000'000);  // the task has run at least 5 ms
  release.set_value();
  done.get();
}

TEST(WorkerTest, UsesItsOwnComputeThreadCount) {
  DeviceContext& ctx = Runtime::get().context(Device::parse("host:0"));
  int seen = 0;
  ctx.worker().run([&seen] { seen = omp_get_max_threads(); });
  EXPECT_EQ(seen, ctx.compute_threads());
  EXPECT_GE(ctx.compute_threads(), 1);
}

TEST(WorkerTest, ExceptionReachesTheCallerAndTheWorkerLivesOn) {
  DeviceContext& ctx = Runtime::get().context(Device::parse("host:0"));
  auto f = ctx.worker().submit([] { throw std::runtime_error("boom on worker"); });
  EXPECT_THROW(f.get(), std::runtime_error);
  std::atomic<bool> ran{false};
  ctx.worker().run([&ran] { ran = true; });
  EXPECT_TRUE(ran);
}

TEST(WorkerTest, RunInsideATaskDoesNotDeadlock) {
  DeviceContext& ctx = Runtime::get().context(Device::parse("host:0"));
  int depth = 0;
  ctx.worker().run([&] { ctx.worker().run([&] { depth = 2; }); });
  EXPECT_EQ(depth, 2);
}

// The caller runs a task itself only while the worker has nothing queued or running, so a task
// never overtakes one submitted before it; what it runs counts as the device's work.
TEST(WorkerTest, TryRunHereRunsOnTheCallerOnlyWhenTheWorkerIsIdle) {
  DeviceContext& ctx = Runtime::get().context(Device::parse("host:1"));
  Worker& w = ctx.worker();
  std::promise<void> started, release;
  auto busy = w.submit([&] {
    started.set_value();
    release.get_future().wait();
  });
  started.get_future().wait();
  bool ran = false;
  EXPECT_FALSE(w.try_run_here([&] { ran = true; }));  // running: refused, not run
  EXPECT_FALSE(ran);
  release.set_value();
  w.wait(busy);

  const int64_t busy_before = w.busy_ns(), handoffs_before = w.handoffs();
  std::thread::id ran_on;
  bool counted_as_worker = false;
  DeviceContext* current = nullptr;
  EXPECT_TRUE(w.try_run_here([&] {
    ran_on = std::this_thread::get_id();
    counted_as_worker = w.on_worker_thread();
    current = current_device_context();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }));
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_TRUE(counted_as_worker);
  EXPECT_EQ(current, &ctx);
  EXPECT_FALSE(w.on_worker_thread());  // only while it runs
  EXPECT_EQ(current_device_context(), nullptr);
  EXPECT_GE(w.busy_ns() - busy_before, 2'000'000);
  EXPECT_EQ(w.handoffs(), handoffs_before);  // nothing was handed over
  // An exception reaches the caller and leaves the worker usable.
  EXPECT_THROW(w.try_run_here([] { throw std::runtime_error("boom here"); }), std::runtime_error);
  EXPECT_FALSE(w.on_worker_thread());
  EXPECT_TRUE(w.try_run_here([] {}));
}

// A task submitted before try_run_here always runs first: the caller is refused until the worker
// has finished it. Repeated, since the window is a race between the worker and the caller.
TEST(WorkerTest, TryRunHereNeverOvertakesAQueuedTask) {
  Worker& w = Runtime::get().context(Device::parse("host:1")).worker();
  for (int round = 0; round < 200; ++round) {
    std::atomic<int> order{0};
    int queued_at = -1, here_at = -1;
    std::promise<void> release;
    std::shared_future<void> released = release.get_future().share();
    auto blocker = w.submit([released] { released.wait(); });
    auto queued = w.submit([&] { queued_at = order.fetch_add(1); });
    release.set_value();
    while (!w.try_run_here([&] { here_at = order.fetch_add(1); })) std::this_thread::yield();
    w.wait(blocker);
    w.wait(queued);
    ASSERT_EQ(queued_at, 0) << "round " << round;
    ASSERT_EQ(here_at, 1) << "round " << round;
  }
}

TEST(WorkerTest, SpinsOnlyWhereTheDevicesThreadsFitTheCores) {
  Runtime& rt = Runtime::get();
  const HostDeviceOptions saved = host_device_options();
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  set_host_devices({1, 1, 0});
  EXPECT_GT(rt.context(Device::parse("host:0")).worker().spin().count(), 0);
  set_host_devices({cores + 1, 1, 0});
  EXPECT_EQ(rt.context(Device::parse("host:0")).worker().spin().count(), 0);
  set_host_devices(saved);
}

TEST(DeviceGuardTest, NestsAndRestores) {
  DeviceContext& a = Runtime::get().context(Device::parse("host:0"));
  DeviceContext& b = Runtime::get().context(Device::parse("host:1"));
  {
    DeviceGuard ga(&a);
    EXPECT_EQ(current_device_context(), &a);
    {
      DeviceGuard gb(&b);
      EXPECT_EQ(current_device_context(), &b);
    }
    EXPECT_EQ(current_device_context(), &a);
  }
  EXPECT_EQ(current_device_context(), nullptr);
}

}  // namespace
}  // namespace dpe
