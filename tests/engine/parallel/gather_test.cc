// gather: replica outputs joined on the output device, scalars turned into a vector, lists and
// dicts gathered element by element, and each slice's gradient sent back to its replica.
#include "engine/parallel/gather.h"

#include <gtest/gtest.h>

#include "engine/autograd/engine.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops.h"
#include "engine/backend/host/host_devices.h"
#include "engine/core/error.h"
#include "engine/device/runtime.h"

namespace dpe {
namespace {

std::vector<Device> hosts(int n) {
  set_host_device_count(std::max(n, 2));
  std::vector<Device> out;
  for (int i = 0; i < n; ++i) out.emplace_back(DeviceType::kHost, i);
  return out;
}

TEST(GatherTest, ScalarsBecomeAVectorAndOtherDimsWork) {
  auto devices = hosts(2);
  std::vector<Value> scalars{Value(Tensor::scalar(1.0f, devices[0])),
                             Value(Tensor::scalar(2.0f, devices[1]))};
  Tensor v = gather(scalars, devices[0], 0).tensor();
  EXPECT_EQ(v.shape(), Shape({2}));
  EXPECT_EQ(v.to_vector<float>(), (std::vector<float>{1, 2}));
  EXPECT_THROW(gather(scalars, devices[0], 1), Error);
  std::vector<Value> cols{Value(Tensor::ones({2, 1}, devices[1])),
                          Value(Tensor::zeros({2, 2}, DType::kFloat32, devices[0]))};
  Tensor g = gather(cols, devices[1], 1).tensor();
  EXPECT_EQ(g.device(), devices[1]);
  EXPECT_EQ(g.to_vector<float>(), (std::vector<float>{1, 0, 0, 1, 0, 0}));
}

TEST(GatherTest, ListsAndDictsAreGatheredElementByElement) {
  auto devices = hosts(2);
  auto output = [&](size_t k) {
    const float s = static_cast<float>(k + 1);
    return Value(ValueDict{
        {"logits", Tensor::from_vector(std::vector<float>{s, s}, {1, 2}, devices[k])},
        {"extra", ValueList{Tensor::scalar(10 * s, devices[k]), Value(static_cast<int>(k))}}});
  };
  Value out = gather({output(0), output(1)}, devices[0], 0);
  EXPECT_EQ(out.at("logits").tensor().to_vector<float>(), (std::vector<float>{1, 1, 2, 2}));
  EXPECT_EQ(out.at("logits").tensor().device(), devices[0]);
  EXPECT_EQ(out.at("extra").list()[0].tensor().to_vector<float>(), (std::vector<float>{10, 20}));
  EXPECT_EQ(out.at("extra").list()[1].get<int64_t>(), 0);  // non-tensors: the first replica's
}

TEST(GatherTest, OutputsOfDifferentStructureAreAnError) {
  auto devices = hosts(2);
  std::vector<Value> outs{Value(ValueList{Tensor::ones({1}), Tensor::ones({1})}),
                          Value(ValueList{Tensor::ones({1}, devices[1])})};
  try {
    gather(outs, devices[0], 0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("differ in structure"), std::string::npos) << e.what();
  }
  EXPECT_THROW(gather({}, devices[0], 0), Error);
}

TEST(GatherTest, EachSliceOfTheGradientReturnsToItsReplica) {
  auto devices = hosts(3);
  std::vector<Tensor> leaves;
  std::vector<Value> outs;
  for (size_t k = 0; k < 3; ++k) {
    Tensor t = Tensor::from_vector(std::vector<float>{1, 2}, {2}, devices[k]);
    t.requires_grad_();
    leaves.push_back(t);
    outs.push_back(Value(ops::mul_scalar(t, static_cast<float>(k + 1))));
  }
  Tensor y = gather(outs, devices[1], 0).tensor();
  EXPECT_EQ(y.grad_fn()->name(), "Gather");
  backward(ops::sum(ops::mul(y, y)));  // d/dt of (c t)^2 = 2 c^2 t
  for (size_t k = 0; k < 3; ++k) {
    const float c2 = static_cast<float>((k + 1) * (k + 1));
    EXPECT_EQ(leaves[k].grad().device(), devices[k]);
    EXPECT_EQ(leaves[k].grad().to_vector<float>(), (std::vector<float>{2 * c2, 4 * c2})) << k;
  }
}

}  // namespace
}  // namespace dpe
