// StepProfiler: busy time lands on the device and phase of its Scope, copies between devices
// count as bytes sent and received, backward is charged to the devices that ran it, and nothing
// is recorded outside a step.
#include "engine/parallel/step_profiler.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "engine/autograd/ops.h"
#include "engine/backend/host/host_devices.h"
#include "engine/core/error.h"
#include "engine/device/runtime.h"

namespace dpe {
namespace {

const Device kH0 = Device::parse("host:0");
const Device kH1 = Device::parse("host:1");

int64_t busy(const DeviceStepStats& s, Phase p) { return s.busy_ns[static_cast<int>(p)]; }

TEST(StepProfilerTest, ScopesChargeTheirDeviceAndPhase) {
  set_host_device_count(2);
  StepProfiler prof;
  prof.begin_step({kH0, kH1});
  {
    StepProfiler::Scope scope(&prof, kH1, Phase::kForward);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  prof.add(kH0, Phase::kStep, 1000);
  StepProfiler::Scope off(nullptr, kH0, Phase::kGather);  // a null profiler records nothing
  const StepStats s = prof.end_step();
  ASSERT_EQ(s.devices.size(), 2u);
  EXPECT_EQ(s.devices[0].device, kH0);
  EXPECT_GE(busy(s.devices[1], Phase::kForward), 2'000'000);
  EXPECT_EQ(busy(s.devices[0], Phase::kForward), 0);
  EXPECT_EQ(busy(s.devices[0], Phase::kStep), 1000);
  EXPECT_EQ(s.devices[0].busy_total_ns, 1000);
  EXPECT_GE(s.wall_ns, busy(s.devices[1], Phase::kForward));
  EXPECT_EQ(s.devices[1].idle_ns, s.wall_ns - s.devices[1].busy_total_ns);
}

TEST(StepProfilerTest, CopiesCountAsSentAndReceivedBytes) {
  set_host_device_count(2);
  Tensor x = Tensor::zeros({100});
  StepProfiler prof;
  prof.begin_step({kH0, kH1});
  Tensor y = x.to(kH1);
  Tensor z = Tensor::zeros({10}, DType::kFloat32, kH1).to(kH0);
  const StepStats s = prof.end_step();
  EXPECT_EQ(s.devices[0].sent_bytes, 400);
  EXPECT_EQ(s.devices[1].received_bytes, 400);
  EXPECT_EQ(s.devices[1].sent_bytes, 40);
  EXPECT_EQ(s.devices[0].received_bytes, 40);
  EXPECT_GE(s.devices[1].peak_bytes, 400);
}

TEST(StepProfilerTest, BackwardIsChargedToTheDevicesThatRanIt) {
  set_host_device_count(2);
  Tensor a = Tensor::ones({64, 64}, kH0), b = Tensor::ones({64, 64}, kH1);
  a.requires_grad_();
  b.requires_grad_();
  StepProfiler prof;
  prof.begin_step({kH0, kH1});
  Tensor loss = ops::add(ops::sum(ops::matmul(a, a)), ops::to(ops::sum(ops::matmul(b, b)), kH0));
  prof.backward(loss);
  const StepStats s = prof.end_step();
  EXPECT_GT(busy(s.devices[0], Phase::kBackward), 0);
  EXPECT_GT(busy(s.devices[1], Phase::kBackward), 0);
  EXPECT_TRUE(a.grad().defined());
}

TEST(StepProfilerTest, ScopesTagTheMemoryTheyAllocateAndThePeakIsBrokenDown) {
  set_host_device_count(2);
  StepProfiler prof;
  prof.begin_step({kH0, kH1});
  Tensor outputs, grads;
  {
    StepProfiler::Scope scope(&prof, kH1, Phase::kGather);
    EXPECT_EQ(current_memory_category(), MemoryCategory::kOutputs);
    outputs = Tensor::zeros({1024}, DType::kFloat32, kH1);
  }
  {
    StepProfiler::Scope scope(nullptr, kH1, Phase::kStep);  // no profiler: still tagged
    grads = Tensor::zeros({256}, DType::kFloat32, kH1);
  }
  EXPECT_EQ(current_memory_category(), MemoryCategory::kOther);
  const StepStats s = prof.end_step();
  const auto& at_peak = s.devices[1].peak_by_category;
  EXPECT_GE(at_peak[static_cast<size_t>(MemoryCategory::kOutputs)], 4096);
  EXPECT_GE(at_peak[static_cast<size_t>(MemoryCategory::kOptimizerState)], 1024);
  EXPECT_EQ(outputs.memory_category(), MemoryCategory::kOutputs);
  EXPECT_EQ(grads.memory_category(), MemoryCategory::kOptimizerState);
}

TEST(StepProfilerTest, NothingIsRecordedOutsideAStep) {
  set_host_device_count(2);
  StepProfiler prof;
  EXPECT_FALSE(prof.active());
  EXPECT_THROW(prof.end_step(), Error);
  prof.add(kH0, Phase::kForward, 5);  // ignored: no step yet
  prof.begin_step({kH0});
  EXPECT_TRUE(prof.active());
  const StepStats s = prof.end_step();
  EXPECT_FALSE(prof.active());
  EXPECT_EQ(busy(s.devices[0], Phase::kForward), 0);
  EXPECT_STREQ(phase_name(Phase::kReduceAdd), "reduce_add");
}

}  // namespace
}  // namespace dpe
