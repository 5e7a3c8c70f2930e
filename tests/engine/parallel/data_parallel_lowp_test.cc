// DataParallel with 16-bit parameters (Module::to(DType)) under autocast: the replicas' broadcast
// and the gradients' reduce-add move 2 bytes an element, and the step equals one device's on the
// whole batch within bfloat16's rounding. With float32 parameters under autocast they move
// float32, as PyTorch's do.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "engine/autograd/autocast.h"
#include "engine/autograd/engine.h"
#include "engine/autograd/ops.h"
#include "engine/core/error.h"
#include "engine/nn/activation.h"
#include "engine/nn/linear.h"
#include "engine/nn/sequential.h"
#include "engine/parallel/data_parallel.h"
#include "engine/tensor/random.h"
#include "engine/trace/op_trace.h"

namespace dpe {
namespace {

std::shared_ptr<nn::Sequential> mlp(uint64_t seed) {
  Generator gen(seed);
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Linear>(32, 64, gen));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::Linear>(64, 8, gen));
  return m;
}

int64_t parameter_count(const Module& m) {
  int64_t n = 0;
  for (const Tensor& p : m.parameters()) n += p.numel();
  return n;
}

// The bytes copied between devices in one DataParallel step of `m` under autocast(bfloat16).
int64_t bytes_between_devices(std::shared_ptr<Module> m, const Tensor& x) {
  DataParallel dp(m, {Device::parse("host:0"), Device::parse("host:1")});
  OpTrace trace;
  Tensor loss;
  {
    autocast amp(DeviceType::kHost);
    loss = ops::sum(dp.forward(x));
  }
  backward(ops::to(loss, DType::kFloat32));
  int64_t bytes = 0;
  for (const TraceEvent& e : trace.stop()) {
    if (e.kind == TraceKind::kCopy && e.src != e.device) bytes += e.bytes_read;
  }
  return bytes;
}

TEST(DataParallelLowpTest, Bfloat16ParametersMoveHalfTheBytes) {
  Generator gen(1);
  const Tensor x = randn({8, 32}, gen);
  auto f32 = mlp(2);
  auto bf16 = mlp(2);
  bf16->to(DType::kBFloat16);
  for (const Tensor& p : bf16->parameters()) ASSERT_EQ(p.dtype(), DType::kBFloat16);
  const int64_t p = parameter_count(*f32);
  // The broadcast to host:1 and its gradients' way back, 4 bytes an element fewer in all.
  EXPECT_EQ(bytes_between_devices(f32, x) - bytes_between_devices(bf16, x), 4 * p);
}

TEST(DataParallelLowpTest, Bfloat16StepEqualsOneDeviceWithinRounding) {
  Generator gen(3);
  const Tensor x = randn({8, 32}, gen);
  auto one = mlp(4);
  auto two = mlp(4);
  one->to(DType::kBFloat16);
  two->to(DType::kBFloat16);
  DataParallel dp(two, {Device::parse("host:0"), Device::parse("host:1")});
  for (Module* m : {static_cast<Module*>(one.get()), static_cast<Module*>(&dp)}) {
    Tensor loss;
    {
      autocast amp(DeviceType::kHost);
      loss = ops::sum(m->forward(x));
    }
    backward(ops::to(loss, DType::kFloat32));
  }
  const std::vector<Tensor> a = one->parameters(), b = two->parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(b[i].grad().dtype(), DType::kBFloat16) << i;
    EXPECT_EQ(b[i].grad().device(), Device::parse("host:0"));
    const std::vector<float> ga = a[i].grad().to(DType::kFloat32).to_vector<float>();
    const std::vector<float> gb = b[i].grad().to(DType::kFloat32).to_vector<float>();
    double scale = 0;
    for (float v : ga) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    // Each device's half summed in float32 and rounded, against the whole batch's sum rounded
    // once: at most a few bfloat16 ulps of the largest gradient.
    for (size_t k = 0; k < ga.size(); ++k) {
      EXPECT_NEAR(gb[k], ga[k], 4 * 0x1p-8 * scale) << "parameter " << i << " element " << k;
    }
  }
}

TEST(DataParallelLowpTest, ModuleToRefusesAnIntegerDtype) {
  auto m = mlp(5);
  EXPECT_THROW(m->to(DType::kInt64), Error);
  EXPECT_EQ(m->parameters()[0].dtype(), DType::kFloat32);
}

}  // namespace
}  // namespace dpe
