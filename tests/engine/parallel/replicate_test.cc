// replicate: replica 0 aliases the module's parameters and buffers; the others are copies on
// their devices whose parameter gradients flow back to the original through Broadcast's
// backward (ReduceAddCoalesced), as if the whole batch had run on device 0.
#include "engine/parallel/replicate.h"

#include <gtest/gtest.h>

#include "engine/autograd/engine.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops.h"
#include "engine/backend/host/host_devices.h"
#include "engine/device/runtime.h"
#include "tests/util/compare.h"

namespace dpe {
namespace {

const Device kH0 = Device::parse("host:0");

std::vector<Device> hosts(int n) {
  set_host_device_count(std::max(n, 2));
  std::vector<Device> out;
  for (int i = 0; i < n; ++i) out.emplace_back(DeviceType::kHost, i);
  return out;
}

// y = x @ w, with a float and an int64 buffer (as BatchNorm's running_mean and
// num_batches_tracked).
class Affine : public Cloneable<Affine> {
 public:
  Affine() {
    register_parameter("w", Tensor::from_vector(std::vector<float>{1, -2, 3, 4, -5, 6}, {3, 2}));
    register_buffer("scale", Tensor::from_vector(std::vector<float>{2}, {1}));
    register_buffer("steps", Tensor::from_vector(std::vector<int64_t>{5}, {1}));
  }
  Tensor forward(const Tensor& x) override { return ops::matmul(x, param("w")); }
  std::string repr() const override { return "Affine"; }
};

TEST(ReplicateTest, ReplicaZeroAliasesTheModuleAndTheOthersAreCopies) {
  auto devices = hosts(3);
  Affine m;
  auto replicas = replicate(m, devices);
  ASSERT_EQ(replicas.size(), 3u);
  for (const char* name : {"w", "scale", "steps"}) {
    EXPECT_EQ(replicas[0]->find(name).raw_data(), m.find(name).raw_data()) << name;
  }
  // Replica 0's buffers are the module's own tensors: in-place updates persist.
  EXPECT_EQ(replicas[0]->find("steps").impl(), m.find("steps").impl());
  for (size_t k = 1; k < 3; ++k) {
    for (const char* name : {"w", "scale", "steps"}) {
      const Tensor copy = replicas[k]->find(name);
      EXPECT_EQ(copy.device(), devices[k]) << name;
      EXPECT_EQ(copy.dtype(), m.find(name).dtype()) << name;
      EXPECT_NE(copy.raw_data(), m.find(name).raw_data()) << name;
    }
    EXPECT_EQ(replicas[k]->find("w").to_vector<float>(), m.find("w").to_vector<float>());
    EXPECT_EQ(replicas[k]->find("steps").to_vector<int64_t>(), (std::vector<int64_t>{5}));
    EXPECT_EQ(replicas[k]->find("w").grad_fn()->name(), "Broadcast");
  }
  replicas[1]->find("steps").fill_(9);
  EXPECT_EQ(m.find("steps").to_vector<int64_t>(), (std::vector<int64_t>{5}));
}

TEST(ReplicateTest, GradientsOfEveryReplicaSumIntoTheOriginal) {
  auto devices = hosts(3);
  Affine m;
  Tensor w_ref = m.find("w").clone();
  w_ref.requires_grad_();
  auto replicas = replicate(m, devices);
  Tensor loss, loss_ref;
  for (size_t k = 0; k < 3; ++k) {
    std::vector<float> xv;
    for (int i = 0; i < 2 * 3; ++i) xv.push_back(static_cast<float>(i + 1) * (k + 1.0f) / 4);
    Tensor x = Tensor::from_vector(xv, {2, 3}, devices[k]);
    Tensor y = (*replicas[k])(x);
    EXPECT_EQ(y.device(), devices[k]);
    Tensor part = ops::to(ops::sum(ops::mul(y, y)), kH0);
    loss = loss.defined() ? ops::add(loss, part) : part;
    Tensor y_ref = ops::matmul(x.to(kH0), w_ref);
    Tensor part_ref = ops::sum(ops::mul(y_ref, y_ref));
    loss_ref = loss_ref.defined() ? ops::add(loss_ref, part_ref) : part_ref;
  }
  backward(loss);
  backward(loss_ref);
  const Tensor grad = m.find("w").grad();
  ASSERT_TRUE(grad.defined());
  EXPECT_EQ(grad.device(), kH0);
  EXPECT_LT(test::rel_error(grad.to_vector<float>(), w_ref.grad().to_vector<float>()), 1e-6);
}

TEST(ReplicateTest, WithoutGradModeNothingIsRecorded) {
  auto devices = hosts(2);
  Affine m;
  NoGradGuard no_grad;
  auto replicas = replicate(m, devices);
  EXPECT_FALSE(replicas[1]->find("w").requires_grad());
  EXPECT_EQ(replicas[1]->find("w").grad_fn(), nullptr);
}

}  // namespace
}  // namespace dpe
