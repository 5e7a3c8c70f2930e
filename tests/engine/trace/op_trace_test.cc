// OpTrace: the hooks record every op with its FLOPs and bytes, copies between devices with their
// phase, autograd nodes with the nodes they feed; a trace without the work allocates (peaks are
// real) but computes and copies nothing.
#include "engine/trace/op_trace.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "engine/autograd/engine.h"
#include "engine/autograd/ops.h"
#include "engine/backend/dispatch.h"
#include "engine/backend/host/host_devices.h"
#include "engine/device/runtime.h"
#include "engine/device/step_observer.h"
#include "engine/parallel/data_parallel.h"
#include "models/toy_model.h"

namespace dpe {
namespace {

std::vector<TraceEvent> of_kind(const std::vector<TraceEvent>& events, TraceKind kind) {
  std::vector<TraceEvent> out;
  for (const TraceEvent& e : events) {
    if (e.kind == kind) out.push_back(e);
  }
  return out;
}

TEST(OpTraceTest, RecordsOpsWithTheirCostAndBackwardNodesWithTheirEdges) {
  set_host_device_count(1);
  const Tensor x = Tensor::full({4, 3}, 1.0f, Device(DeviceType::kHost, 0));
  Tensor w = Tensor::full({5, 3}, 0.5f, Device(DeviceType::kHost, 0));
  w.requires_grad_();
  OpTrace trace;
  const Tensor loss = ops::sum(ops::relu(ops::linear(x, w, Tensor())));
  backward(loss);
  const std::vector<TraceEvent> events = trace.stop();

  const auto ops = of_kind(events, TraceKind::kOp);
  auto find = [&](const std::string& name) {
    return std::find_if(ops.begin(), ops.end(),
                        [&](const TraceEvent& e) { return e.name == name; });
  };
  ASSERT_NE(find("linear"), ops.end());
  EXPECT_EQ(find("linear")->flops, 2.0 * 4 * 3 * 5);
  EXPECT_EQ(find("linear")->bytes_read, (4 * 3 + 5 * 3) * 4);
  EXPECT_EQ(find("linear")->bytes_written, 4 * 5 * 4);
  EXPECT_EQ(find("linear")->op_class, "gemm");
  EXPECT_FALSE(find("linear")->backward);
  EXPECT_GT(find("linear")->duration_ns, 0);
  ASSERT_NE(find("linear_backward"), ops.end());
  EXPECT_TRUE(find("linear_backward")->backward);
  // Only the weight's gradient is asked for: one product, not two.
  EXPECT_EQ(find("linear_backward")->flops, 2.0 * 4 * 3 * 5);

  // Backward's nodes: each op of backward names the node it ran in, and the nodes chain from the
  // sum's backward down to the weight's AccumulateGrad.
  const auto nodes = of_kind(events, TraceKind::kNode);
  ASSERT_GE(nodes.size(), 3u);
  std::set<int64_t> ids;
  for (const TraceEvent& n : nodes) ids.insert(n.node);
  EXPECT_GE(find("linear_backward")->node, 0);
  EXPECT_EQ(ids.count(find("linear_backward")->node), 1u);
  EXPECT_FALSE(nodes.front().next_nodes.empty());
  for (const TraceEvent& n : nodes) {
    for (int64_t next : n.next_nodes) EXPECT_EQ(ids.count(next), 1u) << n.name;
  }
  for (size_t i = 1; i < events.size(); ++i) EXPECT_LT(events[i - 1].seq, events[i].seq);
}

// A convolution counts every tap, as PyTorch's flop counter does, and names the products with
// its zero padding apart (the roofline leaves them out): here counted tap by tap.
TEST(OpTraceTest, ConvolutionsNameTheirProductsWithPadding) {
  set_host_device_count(1);
  const Device d(DeviceType::kHost, 0);
  const int64_t n = 2, c = 3, h = 7, w = 6, o = 4, k = 3, stride = 2, padding = 2;
  Tensor x = Tensor::full({n, c, h, w}, 1.0f, d);
  Tensor weight = Tensor::full({o, c, k, k}, 0.5f, d);
  x.requires_grad_();
  weight.requires_grad_();
  OpTrace trace;
  const Tensor y = ops::conv2d(x, weight, Tensor(), stride, padding);
  backward(ops::sum(y));
  const std::vector<TraceEvent> events = trace.stop();

  const int64_t ho = y.size(2), wo = y.size(3);
  int64_t outside = 0;  // (output, tap) pairs whose input element is padding
  for (int64_t i = 0; i < ho; ++i) {
    for (int64_t j = 0; j < wo; ++j) {
      for (int64_t a = 0; a < k; ++a) {
        for (int64_t b = 0; b < k; ++b) {
          const int64_t ih = i * stride - padding + a, iw = j * stride - padding + b;
          if (ih < 0 || ih >= h || iw < 0 || iw >= w) ++outside;
        }
      }
    }
  }
  ASSERT_GT(outside, 0);
  const double padding_flops = 2.0 * n * o * c * static_cast<double>(outside);
  int found = 0;
  for (const TraceEvent& e : of_kind(events, TraceKind::kOp)) {
    if (e.name == "conv2d") {
      EXPECT_EQ(e.flops, 2.0 * n * o * ho * wo * c * k * k);
      EXPECT_EQ(e.padding_flops, padding_flops);
      ++found;
    } else if (e.name == "conv2d_backward") {
      EXPECT_EQ(e.padding_flops, 2 * padding_flops);  // the input's and the weight's gradients
      ++found;
    } else {
      EXPECT_EQ(e.padding_flops, 0) << e.name;
    }
  }
  EXPECT_EQ(found, 2);
}

TEST(OpTraceTest, WithoutExecutionAllocatesButComputesNothing) {
  set_host_device_count(1);
  const Tensor a = Tensor::full({64, 64}, 2.0f, Device(DeviceType::kHost, 0));
  Tensor out = Tensor::full({64, 64}, 7.0f, Device(DeviceType::kHost, 0));
  auto& alloc = Runtime::get().context(Device(DeviceType::kHost, 0)).allocator();
  alloc.reset_peak();
  const int64_t before = alloc.stats().current_bytes;
  OpTrace trace({/*execute=*/false});
  dispatch(prim::Add{a, a, 1.0f, out});
  const Tensor made = ops::mul(a, a);  // allocated, never written
  Tensor filled = Tensor::empty({64, 64}, DType::kFloat32, Device(DeviceType::kHost, 0));
  const std::vector<TraceEvent> events = trace.stop();
  EXPECT_EQ(out.to_vector<float>()[0], 7.0f);  // the add did not run
  EXPECT_GE(alloc.stats().peak_bytes - before, 2 * 64 * 64 * 4);
  EXPECT_EQ(of_kind(events, TraceKind::kOp).size(), 2u);
}

TEST(OpTraceTest, DataParallelsTransfersCarryTheirPhase) {
  set_host_device_count(2);
  const auto devices = Runtime::get().devices(DeviceType::kHost);
  Generator gen(1);
  auto model = std::make_shared<models::ToyModel>(gen);
  DataParallel dp(model, devices);
  const Tensor x = Tensor::full({8, 10}, 0.1f, devices[0]);
  OpTrace trace({/*execute=*/false});
  backward(ops::sum(dp(x)));
  const std::vector<TraceEvent> events = trace.stop();
  std::map<MemoryCategory, int64_t> to_1, from_1;
  for (const TraceEvent& e : of_kind(events, TraceKind::kCopy)) {
    if (e.src == devices[0] && e.device == devices[1]) to_1[e.category] += e.bytes_read;
    if (e.src == devices[1] && e.device == devices[0]) from_1[e.category] += e.bytes_read;
  }
  int64_t param_bytes = 0;
  for (const Tensor& p : model->parameters()) param_bytes += static_cast<int64_t>(p.nbytes());
  EXPECT_EQ(to_1[MemoryCategory::kReplicas], param_bytes);     // replicate
  EXPECT_EQ(to_1[MemoryCategory::kInputs], 4 * 10 * 4);        // scatter: half the batch
  EXPECT_EQ(from_1[MemoryCategory::kOutputs], 4 * 5 * 4);      // gather: its outputs
  EXPECT_EQ(from_1[MemoryCategory::kGradients], param_bytes);  // reduce-add
  // Both devices ran the replica's linear layers.
  std::set<Device> ran;
  for (const TraceEvent& e : of_kind(events, TraceKind::kOp)) {
    if (e.name == "linear") ran.insert(e.device);
  }
  EXPECT_EQ(ran.size(), 2u);
}

// A trace is a layer put around the engine for its lifetime: once it stops (or is destroyed by an
// exception) the op tables and the step observer are the engine's own again, ops compute, and
// nothing is recorded; only one trace runs at a time.
TEST(OpTraceTest, TracingOnAndOffLeavesTheEngineAsItWas) {
  set_host_device_count(1);
  const Device d(DeviceType::kHost, 0);
  OpTable* table = find_op_table(DeviceType::kHost);
  const Tensor a = Tensor::full({8}, 2.0f, d);
  {
    OpTrace trace({/*execute=*/false});
    EXPECT_NE(find_op_table(DeviceType::kHost), table);
    EXPECT_NE(step_observer(), nullptr);
    EXPECT_THROW(OpTrace second, Error);  // one at a time
    EXPECT_EQ(ops::mul(a, a).numel(), 8);
    EXPECT_EQ(of_kind(trace.stop(), TraceKind::kOp).size(), 1u);
    EXPECT_EQ(find_op_table(DeviceType::kHost), table);
    EXPECT_THROW(trace.stop(), Error);
  }
  EXPECT_EQ(step_observer(), nullptr);
  EXPECT_EQ(ops::mul(a, a).to_vector<float>(), std::vector<float>(8, 4.0f));  // computes again

  try {
    OpTrace trace;
    ops::mul(a, a);
    throw Error("the step failed");
  } catch (const Error&) {
  }
  EXPECT_EQ(find_op_table(DeviceType::kHost), table);
  EXPECT_EQ(step_observer(), nullptr);

  OpTrace again;  // a new trace starts afresh
  ops::mul(a, a);
  const std::vector<TraceEvent> events = again.stop();
  ASSERT_EQ(of_kind(events, TraceKind::kOp).size(), 1u);
  EXPECT_EQ(events.front().seq, 0);
  EXPECT_GT(of_kind(events, TraceKind::kOp)[0].duration_ns, 0);
}

}  // namespace
}  // namespace dpe
