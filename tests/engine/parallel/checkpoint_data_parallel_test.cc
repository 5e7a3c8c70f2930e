// Activation checkpointing under DataParallel on 2 host devices: the wrapper is replicated with the
// tree (clone_structure + set_parameter through it), each replica's CheckpointBackward runs on its
// device's worker with a nested one-device backward, and the input's and parameters' gradients
// equal the single-device ones without checkpointing.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/autograd/engine.h"
#include "engine/autograd/ops.h"
#include "engine/backend/host/host_devices.h"
#include "engine/nn/activation.h"
#include "engine/nn/checkpoint.h"
#include "engine/nn/linear.h"
#include "engine/nn/sequential.h"
#include "engine/parallel/data_parallel.h"
#include "engine/tensor/random.h"
#include "tests/util/compare.h"

namespace dpe {
namespace {

using test::rel_error;

std::shared_ptr<nn::Sequential> mlp(uint64_t seed) {
  Generator gen(seed);
  auto s = std::make_shared<nn::Sequential>();
  s->push_back(std::make_shared<nn::Linear>(5, 6, gen));
  s->push_back(std::make_shared<nn::GELU>());
  s->push_back(std::make_shared<nn::Linear>(6, 3, gen));
  return s;
}

Tensor input() {
  Generator gen(7);
  Tensor x = randn({6, 5}, gen);
  x.requires_grad_(true);
  return x;
}

void expect_close(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_TRUE(a.defined()) << what << ": undefined";
  EXPECT_LT(rel_error(a.to_vector<float>(), b.to_vector<float>()), 1e-5) << what;
}

TEST(CheckpointDataParallelTest, TwoDevicesGiveTheSingleDeviceGradients) {
  set_host_device_count(2);
  const std::vector<Device> devices{Device::parse("host:0"), Device::parse("host:1")};
  auto single = mlp(10);
  auto inner = mlp(10);
  auto wrapped = std::make_shared<nn::Sequential>();
  wrapped->push_back(std::make_shared<nn::CheckpointWrapper>(inner));
  DataParallel dp(wrapped, devices);
  Tensor x1 = input(), x2 = input();
  backward(ops::sum(ops::mul(single->forward(x1), single->forward(x1))));
  const Tensor y = dp.forward(x2);
  backward(ops::sum(ops::mul(y, y)));
  expect_close(x2.grad(), x1.grad(), "input gradient");
  const auto g = inner->named_parameters(), w = single->named_parameters();
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < g.size(); ++i) {
    expect_close(g[i].second.grad(), w[i].second.grad(), g[i].first);
  }
}

}  // namespace
}  // namespace dpe
