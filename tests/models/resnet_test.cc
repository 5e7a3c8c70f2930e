// ResNet: torchvision's resnet50 state_dict (keys, shapes, order; golden/resnet50_keys.py) and
// parameter count, forward and backward equal to torchvision's for the same weights
// (golden/resnet50_tiny_golden.py), a tiny variant that learns, and DataParallel on 2 host devices
// equal to one device.
#include "models/resnet.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "engine/autograd/engine.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops.h"
#include "engine/backend/host/host_devices.h"
#include "engine/core/error.h"
#include "engine/device/runtime.h"
#include "engine/io/safetensors.h"
#include "engine/nn/fusion.h"
#include "engine/optim/sgd.h"
#include "engine/parallel/data_parallel.h"
#include "models/by_name.h"
#include "tests/util/compare.h"

namespace dpe::models {
namespace {

using test::rel_error;

const char kKeys[] = "tests/models/golden/resnet50_state_dict_keys.txt";
const char kTinyGolden[] = "tests/models/golden/resnet50_tiny_golden.safetensors";

// Built once: 25.6 M parameters take a second or two to draw.
ResNet& real_resnet50() {
  static std::shared_ptr<ResNet> model = [] {
    Generator gen(0);
    return resnet50(gen);
  }();
  return *model;
}

// torchvision's "name dim0 dim1 ..." lines.
std::vector<std::pair<std::string, Shape>> golden_keys() {
  std::ifstream in(kKeys);
  DPE_CHECK(in, "cannot open " << kKeys);
  std::vector<std::pair<std::string, Shape>> out;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string name;
    fields >> name;
    std::vector<int64_t> dims;
    for (int64_t d; fields >> d;) dims.push_back(d);
    out.emplace_back(name, Shape(dims));
  }
  return out;
}

TEST(ResNetTest, Resnet50HasTorchvisionsStateDictAndParameterCount) {
  const ResNet& model = real_resnet50();
  EXPECT_EQ(model.num_parameters(), 25557032);
  const StateDict sd = model.state_dict();
  const auto keys = golden_keys();
  ASSERT_EQ(keys.size(), 320u);
  ASSERT_EQ(sd.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(sd[i].first, keys[i].first) << "entry " << i;
    EXPECT_EQ(sd[i].second.shape(), keys[i].second) << sd[i].first;
    const bool counter = keys[i].first.find("num_batches_tracked") != std::string::npos;
    EXPECT_EQ(sd[i].second.dtype(), counter ? DType::kInt64 : DType::kFloat32) << sd[i].first;
  }
}

TEST(ResNetTest, Resnet101IsTorchvisionsLayout) {
  Generator gen(0);
  const ResNet model(resnet_config("resnet101"), gen);
  EXPECT_EQ(model.num_parameters(), 44549160);  // torchvision.models.resnet101()
  // resnet50's 320 entries and 17 more Bottlenecks of 3 convs and 3 BatchNorms (5 entries each).
  EXPECT_EQ(model.state_dict().size(), 320u + 17u * 18);
}

// Standard deviation of a tensor's values, in double.
double stddev(const Tensor& t) {
  const auto v = t.to_vector<float>();
  double s = 0, s2 = 0;
  for (float x : v) s += x, s2 += static_cast<double>(x) * x;
  const double m = s / v.size();
  return std::sqrt(s2 / v.size() - m * m);
}

TEST(ResNetTest, Resnet50IsInitialisedAsTorchvision) {
  const ResNet& model = real_resnet50();
  // kaiming_normal_(mode="fan_out", nonlinearity="relu"): std sqrt(2 / (out * k * k)).
  EXPECT_NEAR(stddev(model.find("layer4.0.conv2.weight")), std::sqrt(2.0 / (512 * 9)), 2e-4);
  EXPECT_NEAR(stddev(model.find("layer3.5.conv3.weight")), std::sqrt(2.0 / 1024), 3e-4);
  EXPECT_NEAR(stddev(model.find("conv1.weight")), std::sqrt(2.0 / (64 * 49)), 1e-3);
  EXPECT_EQ(model.find("layer2.0.bn3.weight").to_vector<float>(), std::vector<float>(512, 1.0f));
  EXPECT_EQ(model.find("layer2.0.downsample.1.bias").to_vector<float>(),
            std::vector<float>(512, 0.0f));
  // fc keeps nn.Linear's U(-1/sqrt(2048), 1/sqrt(2048)).
  for (float w : model.find("fc.weight").to_vector<float>()) {
    ASSERT_LE(std::abs(w), 1.0f / std::sqrt(2048.0f));
  }
  ResNetConfig c = resnet_config("resnet-tiny");
  c.zero_init_residual = true;
  Generator gen(1);
  EXPECT_EQ(ResNet(c, gen).find("layer4.0.bn3.weight").to_vector<float>(),
            std::vector<float>(256, 0.0f));
}

TEST(ResNetTest, Resnet50ForwardGivesImageNetLogits) {
  ResNet& model = real_resnet50();
  model.eval();
  Generator gen(2);
  const Tensor x = randn({1, 3, 224, 224}, gen);
  NoGradGuard no_grad;
  const auto start = std::chrono::steady_clock::now();
  const Tensor y = model(x);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::cout << "resnet50 forward, batch 1, 224x224, eval, one host device: " << ms << " ms\n";
  EXPECT_EQ(y.shape(), Shape({1, 1000}));
  EXPECT_TRUE(ops::all_finite(y));
  model.train();
}

Tensor named(const StateDict& sd, const std::string& name) {
  for (const auto& [n, t] : sd) {
    if (n == name) return t;
  }
  DPE_THROW("no tensor '" << name << "' in " << kTinyGolden);
}

TEST(ResNetTest, ForwardAndBackwardEqualTorchvisionsForTheSameWeights) {
  const StateDict golden = load_safetensors(kTinyGolden);
  StateDict weights;
  for (const auto& [n, t] : golden) {
    if (n.rfind("golden.", 0) != 0 && n.rfind("grad.", 0) != 0 && n.rfind("after.", 0) != 0) {
      weights.emplace_back(n, t);
    }
  }
  ResNetConfig c;
  c.name = "golden";
  c.layers = {2, 1, 1, 1};
  c.width = 4;
  c.num_classes = 5;
  Generator gen(3);
  ResNet model(c, gen);
  model.load_state_dict(weights);  // strict: torchvision's names and shapes
  const Tensor x = named(golden, "golden.input");

  model.eval();
  EXPECT_LT(rel_error(model(x).to_vector<float>(),
                      named(golden, "golden.eval_logits").to_vector<float>()),
            1e-5);

  model.train();
  const Tensor logits = model(x);
  EXPECT_LT(
      rel_error(logits.to_vector<float>(), named(golden, "golden.train_logits").to_vector<float>()),
      1e-5);
  const Tensor loss = ops::cross_entropy(logits, named(golden, "golden.target"));
  EXPECT_NEAR(loss.item(), named(golden, "golden.loss").to_vector<float>()[0], 1e-5);
  backward(loss);
  for (const auto& [n, p] : model.named_parameters()) {
    EXPECT_LT(rel_error(p.grad().to_vector<float>(), named(golden, "grad." + n).to_vector<float>()),
              1e-4)
        << n;
  }
  for (const auto& [n, b] : model.named_buffers()) {
    const Tensor want = named(golden, "after." + n);
    if (b.dtype() == DType::kInt64) {
      EXPECT_EQ(b.to_vector<int64_t>(), want.to_vector<int64_t>()) << n;
    } else {
      EXPECT_LT(rel_error(b.to_vector<float>(), want.to_vector<float>()), 1e-5) << n;
    }
  }
}

// A fixed batch of 32x32 images and labels.
std::pair<Tensor, Tensor> batch(int64_t n, uint64_t seed) {
  Generator gen(seed);
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (auto& l : labels) l = static_cast<int64_t>(gen.next_u64() % 10);
  return {randn({n, 3, 32, 32}, gen), Tensor::from_vector(labels, {n})};
}

TEST(ResNetTest, TinyVariantLearnsAFixedBatch) {
  Generator gen(4);
  auto model = make_model("resnet-tiny", gen);
  EXPECT_EQ(model->repr(), "ResNet(resnet-tiny: layers=[1, 1, 1, 1], width=8, num_classes=10)");
  const auto [x, y] = batch(16, 5);
  EXPECT_EQ((*model)(x).shape(), Shape({16, 10}));
  optim::SgdOptions o;
  o.lr = 0.05f;
  o.momentum = 0.9f;
  optim::SGD sgd(model->parameters(), o);
  std::vector<float> losses;
  for (int step = 0; step < 8; ++step) {
    model->zero_grad();
    const Tensor loss = ops::cross_entropy((*model)(x), y);
    backward(loss);
    for (const Tensor& p : model->parameters()) ASSERT_TRUE(p.grad().defined());
    sgd.step();
    losses.push_back(loss.item());
  }
  EXPECT_LT(losses[1], losses[0]);
  EXPECT_LT(losses.back(), 0.25f * losses.front()) << "first " << losses.front();
  EXPECT_EQ(model->find("layer1.0.bn1.num_batches_tracked").to_vector<int64_t>()[0], 9);
}

TEST(ResNetTest, BadConfigurationsAndInputsAreNamed) {
  EXPECT_THROW(resnet_config("resnet18"), Error);
  Generator gen(6);
  ResNetConfig c = resnet_config("resnet-tiny");
  c.layers = {1, 1, 1};
  EXPECT_THROW(ResNet(c, gen), Error);
  ResNet model(resnet_config("resnet-tiny"), gen);
  try {
    model(Tensor::zeros({2, 1, 32, 32}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected images [N, 3, H, W]"), std::string::npos)
        << e.what();
  }
}

struct Step {
  float loss;
  StateDict grads;
};

// The loss of `out` and the gradients it leaves on `inner`'s parameters.
Step loss_and_grads(const Tensor& out, const Tensor& y, Module& inner) {
  const Tensor loss = ops::cross_entropy(out, y);
  backward(loss);
  Step s{loss.item(), {}};
  for (const auto& [n, p] : inner.named_parameters()) s.grads.emplace_back(n, p.grad().clone());
  return s;
}

void expect_same(const Step& dp, const Step& single, const std::string& what) {
  EXPECT_NEAR(dp.loss, single.loss, 1e-5 * std::abs(single.loss)) << what;
  ASSERT_EQ(dp.grads.size(), single.grads.size()) << what;
  for (size_t i = 0; i < single.grads.size(); ++i) {
    EXPECT_EQ(dp.grads[i].second.device(), Device::parse("host:0")) << what;
    EXPECT_LT(
        rel_error(dp.grads[i].second.to_vector<float>(), single.grads[i].second.to_vector<float>()),
        1e-5)
        << what << " grad " << single.grads[i].first;
  }
}

// DataParallel splits the batch; BatchNorm in training normalises each replica's chunk by its own
// statistics (as PyTorch's DataParallel does), so the one-device reference runs the same chunks
// one at a time. In evaluation (running statistics) it is the plain full-batch forward.
TEST(ResNetDataParallelTest, TwoHostDevicesEqualOne) {
  set_host_device_count(2);
  const auto devices = Runtime::get().devices(DeviceType::kHost);
  ASSERT_EQ(devices.size(), 2u);
  const auto [x, y] = batch(8, 7);
  Generator gen(8);
  auto single = std::make_shared<ResNet>(resnet_config("resnet-tiny"), gen);
  {
    NoGradGuard no_grad;  // running statistics that are not BatchNorm's initial 0 and 1
    for (uint64_t seed : {9, 10}) (*single)(batch(8, seed).first);
  }
  auto original = single->copy_to(devices[0]);
  DataParallel dp(original, devices);

  // Evaluation first: it leaves the running statistics as they are, which the training forwards
  // below do not (replica 0 updates the original's, the reference updates its own twice).
  single->eval();
  original->eval();
  const Step full = loss_and_grads((*single)(x), y, *single);
  expect_same(loss_and_grads(dp(x), y, *original), full, "eval mode");

  single->train();
  original->train();
  single->zero_grad();
  original->zero_grad();
  const Step chunked = loss_and_grads(ops::cat({(*single)(x.narrow(0, 0, 4).contiguous()),
                                                (*single)(x.narrow(0, 4, 4).contiguous())},
                                               0),
                                      y, *single);
  expect_same(loss_and_grads(dp(x), y, *original), chunked, "train mode");
}

// A batch laid out channels last (torch.channels_last) trains as the contiguous one: its
// activations stay NHWC through the residual blocks, whose inputs get a gradient from each branch.
TEST(ResNetTest, AChannelsLastBatchGivesTheSameLossAndGradients) {
  Generator gen(13);
  auto nchw = std::make_shared<ResNet>(resnet_config("resnet-tiny"), gen);
  auto nhwc = nchw->copy_to(Device::parse("host:0"));
  const auto [x, y] = batch(6, 12);
  const Step a = loss_and_grads((*nchw)(x), y, *nchw);
  const Step c = loss_and_grads((*nhwc)(x.contiguous(MemoryFormat::kChannelsLast)), y, *nhwc);
  EXPECT_NEAR(c.loss, a.loss, 1e-5 * std::abs(a.loss));
  ASSERT_EQ(c.grads.size(), a.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    const auto want = a.grads[i].second.contiguous().to_vector<float>();
    const auto got = c.grads[i].second.contiguous().to_vector<float>();
    ASSERT_EQ(got.size(), want.size());
    float scale = 0.0f;
    for (float v : want) scale = std::max(scale, std::abs(v));
    for (size_t k = 0; k < want.size(); ++k) {
      ASSERT_NEAR(got[k], want[k], 1e-4f * scale + 1e-6f) << a.grads[i].first << " " << k;
    }
  }
}

// The ResNet calls its batch norms and ReLUs by hand (forward_batch_norm_relu, and
// forward_batch_norm_add_relu at each block's end): fused, one training step gives bit for bit
// the loss, gradients and running statistics of the ops apart.
TEST(ResNetTest, FusedBatchNormReluEqualsTheTwoOps) {
  Generator gen(11);
  auto fused = std::make_shared<ResNet>(resnet_config("resnet-tiny"), gen);
  auto apart = fused->copy_to(Device::parse("host:0"));
  const auto [x, y] = batch(6, 12);
  const Step f = loss_and_grads((*fused)(x), y, *fused);
  Step a;
  {
    const nn::FusionScope off(false);
    a = loss_and_grads((*apart)(x), y, *apart);
  }
  EXPECT_EQ(f.loss, a.loss);
  ASSERT_EQ(f.grads.size(), a.grads.size());
  for (size_t i = 0; i < f.grads.size(); ++i) {
    EXPECT_EQ(f.grads[i].second.to_vector<float>(), a.grads[i].second.to_vector<float>())
        << f.grads[i].first;
  }
  for (const char* name :
       {"bn1.running_var", "layer4.0.bn2.running_mean", "layer2.0.bn3.running_var"}) {
    EXPECT_EQ(fused->find(name).to_vector<float>(), apart->find(name).to_vector<float>()) << name;
  }
  // Not vacuous: the graph of a fused forward has batch norm + ReLU nodes, one per pair (the
  // stem's, with its max pooling, two per block, and the block's end with its sum), and the other
  // none.
  auto fused_nodes = [&](Module& m, const std::string& suffix) {
    const Tensor out = m(x);  // holds the graph while it is walked
    std::set<Node*> seen;
    std::vector<Node*> todo{out.grad_fn().get()};
    int count = 0;
    while (!todo.empty()) {
      Node* n = todo.back();
      todo.pop_back();
      if (n == nullptr || !seen.insert(n).second) continue;
      const std::string& name = n->name();
      count += name.size() > suffix.size() &&
               name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
      for (const Edge& e : n->next_edges()) todo.push_back(e.fn.get());
    }
    return count;
  };
  EXPECT_EQ(fused_nodes(*fused, "+ReLU"), 3 * 4);
  EXPECT_EQ(fused_nodes(*fused, "+add+ReLU"), 4);
  EXPECT_EQ(fused_nodes(*fused, "+ReLU+MaxPool2d"), 1);
  const nn::FusionScope off(false);
  EXPECT_EQ(fused_nodes(*fused, "+ReLU"), 0);
  EXPECT_EQ(fused_nodes(*fused, "+ReLU+MaxPool2d"), 0);
}

}  // namespace
}  // namespace dpe::models
