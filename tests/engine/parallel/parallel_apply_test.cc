// parallel_apply and run_on_workers: every replica runs on its own device's worker, with the
// caller's grad mode; a failure on one worker is raised in the caller only after every worker
// has finished, and the next call works (no deadlock, no task left behind).
#include "engine/parallel/parallel_apply.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/ops.h"
#include "engine/backend/host/host_devices.h"
#include "engine/core/error.h"
#include "engine/device/runtime.h"
#include "engine/device/worker.h"

namespace dpe {
namespace {

std::vector<Device> hosts(int n) {
  set_host_device_count(std::max(n, 2));
  std::vector<Device> out;
  for (int i = 0; i < n; ++i) out.emplace_back(DeviceType::kHost, i);
  return out;
}

// Fails at once on `bad`; elsewhere waits a little (so it finishes last), then doubles x.
class SlowOrFailing : public Cloneable<SlowOrFailing> {
 public:
  SlowOrFailing(Device bad, std::atomic<int>* finished) : bad_(bad), finished_(finished) {}
  Tensor forward(const Tensor& x) override {
    if (x.device() == bad_) throw std::runtime_error("injected failure");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    finished_->fetch_add(1);
    return ops::mul_scalar(x, 2);
  }
  std::string repr() const override { return "SlowOrFailing"; }

 private:
  Device bad_;
  std::atomic<int>* finished_;
};

std::vector<Value> inputs_for(const std::vector<Device>& devices) {
  std::vector<Value> inputs;
  for (Device d : devices) inputs.emplace_back(Tensor::ones({2}, d));
  return inputs;
}

TEST(ParallelApplyTest, EachReplicaRunsOnItsDevicesWorker) {
  auto devices = hosts(3);
  std::vector<int> on_worker(3, 0);  // not vector<bool>: its bits share bytes across threads
  const auto errors = run_on_workers("test", devices, [&](size_t k) {
    on_worker[k] = Runtime::get().context(devices[k]).worker().on_worker_thread();
  });
  EXPECT_EQ(errors, std::vector<std::string>(3));
  EXPECT_EQ(on_worker, std::vector<int>(3, 1));
}

TEST(ParallelApplyTest, WorkersRunUnderTheCallersGradMode) {
  auto devices = hosts(2);
  std::vector<int> modes(2, -1);
  {
    NoGradGuard no_grad;
    run_on_workers("test", devices, [&](size_t k) { modes[k] = grad_enabled() ? 1 : 0; });
  }
  EXPECT_EQ(modes, (std::vector<int>{0, 0}));
  run_on_workers("test", devices, [&](size_t k) { modes[k] = grad_enabled() ? 1 : 0; });
  EXPECT_EQ(modes, (std::vector<int>{1, 1}));
}

TEST(ParallelApplyTest, AnErrorIsRaisedOnlyAfterEveryWorkerJoined) {
  auto devices = hosts(3);
  std::atomic<int> finished{0};
  std::vector<std::shared_ptr<Module>> replicas;
  for (size_t k = 0; k < 3; ++k) {
    replicas.push_back(std::make_shared<SlowOrFailing>(devices[0], &finished));
  }
  try {
    parallel_apply(replicas, inputs_for(devices), devices);
    FAIL();
  } catch (const Error& e) {
    // Replica 0 failed at once; the two slow ones had finished before the caller saw it.
    EXPECT_EQ(finished.load(), 2);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("replica 0 on device host:0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("injected failure"), std::string::npos) << msg;
  }
  // The workers are free again: the next call completes.
  replicas[0] = std::make_shared<SlowOrFailing>(Device::parse("host:7"), &finished);
  std::vector<Value> out = parallel_apply(replicas, inputs_for(devices), devices);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[2].tensor().device(), devices[2]);
  EXPECT_EQ(out[2].tensor().to_vector<float>(), (std::vector<float>{2, 2}));
}

TEST(ParallelApplyTest, EveryWorkersErrorIsKept) {
  auto devices = hosts(2);
  const auto errors = run_on_workers(
      "test", devices, [](size_t k) { throw std::runtime_error("boom " + std::to_string(k)); });
  EXPECT_EQ(errors, (std::vector<std::string>{"boom 0", "boom 1"}));
}

TEST(ParallelApplyTest, MismatchedArgumentsAndWorkerCallersAreErrors) {
  auto devices = hosts(2);
  std::atomic<int> finished{0};
  std::vector<std::shared_ptr<Module>> one{
      std::make_shared<SlowOrFailing>(Device::parse("host:7"), &finished)};
  EXPECT_THROW(parallel_apply(one, inputs_for(devices), devices), Error);
  std::string error;  // only text crosses threads
  Runtime::get()
      .context(devices[0])
      .worker()
      .submit([&] {
        try {
          run_on_workers("test", devices, [](size_t) {});
        } catch (const Error& e) {
          error = e.what();
        }
      })
      .get();
  EXPECT_NE(error.find("called from the worker of host:0"), std::string::npos) << error;
}

}  // namespace
}  // namespace dpe
