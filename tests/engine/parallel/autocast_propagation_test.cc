// Autocast's state carried where dpe runs a forward on another thread (engine/autograd/
// autocast.h, "carried, not inherited"): DataParallel's device workers, dtype included, and an
// activation checkpoint's recompute in backward, outside the guard.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/autograd/autocast.h"
#include "engine/autograd/engine.h"
#include "engine/autograd/ops.h"
#include "engine/device/runtime.h"
#include "engine/nn/activation.h"
#include "engine/nn/checkpoint.h"
#include "engine/nn/linear.h"
#include "engine/nn/sequential.h"
#include "engine/parallel/data_parallel.h"
#include "engine/tensor/random.h"
#include "engine/trace/op_trace.h"

namespace dpe {
namespace {

std::shared_ptr<nn::Sequential> mlp(Generator& gen) {
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Linear>(8, 16, gen));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::Linear>(16, 4, gen));
  return m;
}

TEST(AutocastPropagationTest, DataParallelWorkersRunInTheCallersDtype) {
  Runtime& rt = Runtime::get();
  ASSERT_GE(rt.device_count(DeviceType::kHost), 2) << "the tests run on 2 host devices";
  Generator gen(3);
  DataParallel dp(mlp(gen), {Device::parse("host:0"), Device::parse("host:1")});
  const Tensor x = randn({6, 8}, gen);
  OpTrace trace;
  Tensor y;
  {
    autocast amp(DeviceType::kHost, DType::kFloat16);  // not the default: the dtype must travel
    y = dp.forward(x);
  }
  EXPECT_EQ(y.dtype(), DType::kFloat16);
  int linears = 0;
  for (const TraceEvent& e : trace.stop()) {
    if (e.name != "linear") continue;
    ++linears;
    EXPECT_EQ(e.dtype, DType::kFloat16) << "on " << e.device;
  }
  EXPECT_EQ(linears, 4);  // two layers on each of the two devices
}

TEST(AutocastPropagationTest, ACheckpointRecomputesInTheForwardsDtype) {
  Generator gen(4);
  std::shared_ptr<nn::Sequential> m = mlp(gen);
  const Tensor x = randn({5, 8}, gen);
  std::vector<std::vector<float>> plain, ckpt;
  for (bool checkpointed : {false, true}) {
    Tensor y;
    {
      autocast amp(DeviceType::kHost);
      y = checkpointed ? checkpoint(*m, x) : m->forward(x);
    }
    backward(ops::sum(ops::to(y, DType::kFloat32)));  // backward outside the guard
    auto& out = checkpointed ? ckpt : plain;
    for (Tensor& p : m->parameters()) {
      out.push_back(p.grad().to_vector<float>());
      p.set_grad(Tensor());
    }
  }
  EXPECT_EQ(ckpt, plain);  // the recompute ran in bfloat16 too: the same gradients, bit for bit
}

// The backward engine's threads (PyTorch #125186: a multithreaded backward's recompute fell back
// to the default dtype): checkpointed replicas of DataParallel recompute in backward on each
// device's worker, outside the caller's guard, in the forward's float16, not the default
// bfloat16.
TEST(AutocastPropagationTest, RecomputeOnTheBackwardsDeviceThreadsKeepsTheDtype) {
  Generator gen(5);
  auto wrapped = std::make_shared<nn::CheckpointWrapper>(mlp(gen));
  DataParallel dp(wrapped, {Device::parse("host:0"), Device::parse("host:1")});
  const Tensor x = randn({6, 8}, gen);
  Tensor y;
  {
    autocast amp(DeviceType::kHost, DType::kFloat16);
    y = dp.forward(x);
  }
  OpTrace trace;  // the backward only: its recomputed forwards
  backward(ops::sum(ops::to(y, DType::kFloat32)));
  int linears = 0;
  for (const TraceEvent& e : trace.stop()) {
    if (e.name != "linear") continue;
    ++linears;
    EXPECT_EQ(e.dtype, DType::kFloat16) << "recomputed on " << e.device;
  }
  EXPECT_EQ(linears, 4);  // two layers recomputed on each of the two devices
}

}  // namespace
}  // namespace dpe
