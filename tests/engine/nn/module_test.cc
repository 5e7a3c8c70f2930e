#include "engine/nn/module.h"

#include <gtest/gtest.h>

#include "engine/autograd/engine.h"
#include "engine/autograd/ops.h"
#include "engine/core/error.h"
#include "engine/nn/activation.h"
#include "engine/nn/batch_norm.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/linear.h"
#include "engine/nn/sequential.h"

namespace dpe {
namespace {

std::vector<std::string> keys(const StateDict& sd) {
  std::vector<std::string> out;
  for (auto& [k, v] : sd) out.push_back(k);
  return out;
}

class Net : public Cloneable<Net> {
 public:
  explicit Net(Generator& g) {
    register_module("features", std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<Module>>{
                                    std::make_shared<nn::Conv2d>(1, 2, 3, g, 1, 1),
                                    std::make_shared<nn::BatchNorm2d>(2),
                                    std::make_shared<nn::ReLU>()}));
    register_module("fc", std::make_shared<nn::Linear>(2 * 4 * 4, 3, g));
  }
  Tensor forward(const Tensor& x) override {
    return child("fc").forward(ops::flatten(child("features").forward(x)));
  }
  std::string repr() const override { return "Net"; }
};

TEST(ModuleTest, NamesFollowPyTorch) {
  Generator g(0);
  Net net(g);
  EXPECT_EQ(keys(net.state_dict()),
            (std::vector<std::string>{"features.0.weight", "features.0.bias", "features.1.weight",
                                      "features.1.bias", "features.1.running_mean",
                                      "features.1.running_var", "features.1.num_batches_tracked",
                                      "fc.weight", "fc.bias"}));
  EXPECT_EQ(net.parameters().size(), 6u);
  EXPECT_EQ(net.named_buffers().size(), 3u);
}

TEST(ModuleTest, TrainEvalPropagatesAndBatchNormTracksStatistics) {
  Generator g(2);
  Net net(g);
  Tensor x = randn({4, 1, 4, 4}, g);
  net(x);
  EXPECT_EQ(net.find("features.1.num_batches_tracked").to_vector<int64_t>()[0], 1);
  const auto rm = net.find("features.1.running_mean").to_vector<float>();
  EXPECT_NE(rm[0], 0.0f);
  net.eval();
  EXPECT_FALSE(net.child("features").child("1").is_training());
  net(x);
  EXPECT_EQ(net.find("features.1.running_mean").to_vector<float>(), rm);  // untouched in eval
}

TEST(ModuleTest, StateDictRoundTripAndPyTorchErrors) {
  Generator g1(1), g2(2);
  Net a(g1), b(g2);
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.find("fc.weight").to_vector<float>(), a.find("fc.weight").to_vector<float>());
  EXPECT_FALSE(b.find("fc.weight").shares_storage(a.find("fc.weight")));

  StateDict bad = a.state_dict();
  bad.erase(bad.begin());                                   // missing features.0.weight
  bad.emplace_back("extra", Tensor::zeros({1}));             // unexpected
  bad[bad.size() - 2].second = Tensor::zeros({7});           // fc.bias mis-shaped
  try {
    b.load_state_dict(bad);
    FAIL();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("Error(s) in loading state_dict for Net"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Missing key(s) in state_dict: \"features.0.weight\""), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("Unexpected key(s) in state_dict: \"extra\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("size mismatch for fc.bias"), std::string::npos) << msg;
  }
  EXPECT_THROW(b.load_state_dict(bad, /*strict=*/false), Error);  // still refuses the mismatch
}

// As PyTorch's BatchNorm: a state_dict without num_batches_tracked loads strict, the buffer keeps
// its value; any other missing buffer is still an error.
TEST(ModuleTest, StrictLoadToleratesAMissingNumBatchesTracked) {
  Generator g1(1), g2(2);
  Net a(g1), b(g2);
  b.find("features.1.num_batches_tracked").fill_(7.0f);
  StateDict old;
  for (auto& [k, v] : a.state_dict()) {
    if (k != "features.1.num_batches_tracked") old.emplace_back(k, v);
  }
  b.load_state_dict(old);
  EXPECT_EQ(b.find("features.1.running_mean").to_vector<float>(),
            a.find("features.1.running_mean").to_vector<float>());
  EXPECT_EQ(b.find("features.1.num_batches_tracked").to_vector<int64_t>(),
            std::vector<int64_t>{7});
  StateDict no_mean;
  for (auto& [k, v] : a.state_dict()) {
    if (k != "features.1.running_mean") no_mean.emplace_back(k, v);
  }
  try {
    b.load_state_dict(no_mean);
    FAIL() << "a missing running_mean was accepted";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("Missing key(s) in state_dict: \"features.1.running_mean\""),
        std::string::npos)
        << e.what();
  }
}

TEST(ModuleTest, CopyToAnotherDeviceIsDeepAndKeepsLeaves) {
  Generator g(3);
  Net net(g);
  auto copy = net.copy_to(Device::parse("host:1"));
  for (auto& [name, t] : copy->state_dict()) {
    EXPECT_EQ(t.device(), Device::parse("host:1")) << name;
    EXPECT_FALSE(t.shares_storage(net.find(name))) << name;
    EXPECT_EQ(t.to(Device()).clone().numel(), net.find(name).numel());
  }
  for (const Tensor& p : copy->parameters()) {
    EXPECT_TRUE(p.is_leaf());
    EXPECT_TRUE(p.requires_grad());
  }
  Tensor x = randn({2, 1, 4, 4}, g);
  net.eval();
  copy->eval();
  EXPECT_EQ(net(x).to_vector<float>(), (*copy)(x.to(Device::parse("host:1"))).to_vector<float>());
  // The original is untouched by training the copy.
  const auto before = net.find("fc.weight").to_vector<float>();
  copy->find("fc.weight").fill_(0.0f);
  EXPECT_EQ(net.find("fc.weight").to_vector<float>(), before);
}

// module.to(dtype) as PyTorch's: floating parameters and buffers converted and kept leaves, the
// values rounded to nearest even; num_batches_tracked stays int64.
TEST(ModuleTest, ToDtypeConvertsFloatingParametersAndBuffers) {
  Generator g(4);
  Net net(g);
  const StateDict before = net.state_dict();
  net.to(DType::kBFloat16);
  for (const auto& [name, t] : net.state_dict()) {
    const Tensor& old = [&]() -> const Tensor& {
      for (const auto& [n, v] : before) {
        if (n == name) return v;
      }
      return before.front().second;
    }();
    if (name.find("num_batches_tracked") != std::string::npos) {
      EXPECT_EQ(t.dtype(), DType::kInt64) << name;
      continue;
    }
    EXPECT_EQ(t.dtype(), DType::kBFloat16) << name;
    EXPECT_EQ(t.to(DType::kFloat32).to_vector<float>(),
              old.to(DType::kBFloat16).to(DType::kFloat32).to_vector<float>())
        << name;
    EXPECT_EQ(t.memory_category(), MemoryCategory::kParameters) << name;
  }
  for (const Tensor& p : net.parameters()) {
    EXPECT_TRUE(p.is_leaf());
    EXPECT_TRUE(p.requires_grad());
  }
  EXPECT_THROW(net.to(DType::kInt64), Error);
}

TEST(ModuleTest, ReplaceModuleKeepsNameAndPosition) {
  Generator g(5);
  Net net(g);
  net.replace_module("fc", std::make_shared<nn::Linear>(32, 3, g, /*bias=*/false));
  EXPECT_EQ(keys(net.state_dict()).back(), "fc.weight");
  EXPECT_EQ(net.named_children()[1].first, "fc");
  EXPECT_THROW(net.replace_module("nope", std::make_shared<nn::ReLU>()), Error);
  EXPECT_THROW(net.replace_module("fc", nullptr), Error);
}

TEST(ModuleTest, ZeroGradAndParameterGradients) {
  Generator g(4);
  nn::Linear fc(3, 2, g);
  backward(ops::sum(fc(randn({5, 3}, g))));
  EXPECT_TRUE(fc.weight().grad().defined());
  fc.zero_grad();
  EXPECT_FALSE(fc.weight().grad().defined());
}

}  // namespace
}  // namespace dpe
