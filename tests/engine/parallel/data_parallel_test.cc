// DataParallel against one device on the same data: loss, gradients and the parameters after an
// SGD step agree (relative error < 1e-5) for 2, 3 and 4 host devices; plus PyTorch's semantics
// and errors, failure injection, and the imbalance it causes on device 0.
#include "engine/parallel/data_parallel.h"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/autograd/engine.h"
#include "engine/autograd/ops.h"
#include "engine/backend/host/host_devices.h"
#include "engine/core/error.h"
#include "engine/device/runtime.h"
#include "engine/device/worker.h"
#include "engine/nn/fusion.h"
#include "engine/nn/linear.h"
#include "engine/optim/sgd.h"
#include "engine/parallel/imbalance_report.h"
#include "models/convnet.h"
#include "models/mlp.h"
#include "models/toy_model.h"
#include "tests/engine/parallel/equivalence.h"

namespace dpe {
namespace {

using test::rel_error;

const Device kH0 = Device::parse("host:0");

std::vector<Device> hosts(int n) {
  set_host_device_count(std::max(n, 2));
  std::vector<Device> out;
  for (int i = 0; i < n; ++i) out.emplace_back(DeviceType::kHost, i);
  return out;
}

template <typename MakeModel>
void check_equivalence(MakeModel make, const Shape& input_shape, int classes, int batch) {
  for (int n : {2, 3, 4}) test::check_equivalence(make, input_shape, classes, batch, hosts(n));
}

TEST(DataParallelEquivalenceTest, ToyModel) {
  check_equivalence(
      [] {
        Generator g(1);
        return std::make_shared<models::ToyModel>(g);
      },
      Shape{10}, 5, 30);
}

TEST(DataParallelEquivalenceTest, Mlp) {
  check_equivalence(
      [] {
        Generator g(2);
        return std::make_shared<models::Mlp>(g);
      },
      Shape{1, 28, 28}, 10, 17);
}

TEST(DataParallelEquivalenceTest, ConvNetWithoutBatchNorm) {
  check_equivalence(
      [] {
        Generator g(3);
        return std::make_shared<models::ConvNet>(g, false);
      },
      Shape{1, 28, 28}, 10, 10);
}

TEST(DataParallelTest, BatchNormRunningStatsAreThoseOfDeviceZerosChunk) {
  auto devices = hosts(2);
  Generator g(5);
  auto model = std::make_shared<models::ConvNet>(g, true);
  auto reference = model->copy_to(kH0);
  Tensor x = randn({8, 1, 28, 28}, g);
  DataParallel dp(model, devices);
  dp(x);
  (*reference)(x.narrow(0, 0, 4).contiguous());  // device 0's chunk alone
  for (const char* name : {"layer1.1.running_mean", "layer1.1.running_var", "layer2.1.running_mean",
                           "layer2.1.running_var"}) {
    EXPECT_LT(
        rel_error(model->find(name).to_vector<float>(), reference->find(name).to_vector<float>()),
        1e-5)
        << name;
  }
  EXPECT_EQ(model->find("layer1.1.num_batches_tracked").to_vector<int64_t>()[0], 1);
}

// Every replica fuses its batch norms with the ReLUs after them (replicas keep their modules'
// types): a DataParallel step gives bit for bit the outputs and gradients of an unfused one.
TEST(DataParallelTest, ReplicasFuseBatchNormAndReluWithTheSameResults) {
  auto devices = hosts(2);
  Generator g(7);
  auto fused = std::make_shared<models::ConvNet>(g, true);
  auto apart = fused->copy_to(kH0);
  const Tensor x = randn({6, 1, 28, 28}, g);
  auto step = [&](const std::shared_ptr<Module>& model) {
    DataParallel dp(model, devices);
    const Tensor out = dp(x);
    backward(ops::sum(out));
    return out.to_vector<float>();
  };
  const std::vector<float> out_fused = step(fused);
  std::vector<float> out_apart;
  {
    const nn::FusionScope off(false);
    out_apart = step(apart);
  }
  EXPECT_EQ(out_fused, out_apart);
  for (const auto& [name, p] : fused->named_parameters()) {
    EXPECT_EQ(p.grad().to_vector<float>(), apart->find(name).grad().to_vector<float>()) << name;
  }
}

// A channels-last batch (the convolutions, batch norms and poolings on NHWC activations) trains
// as a contiguous one: DataParallel of the ConvNet without batch norm against one device's
// contiguous step, and DataParallel of the ConvNet with it against DataParallel's contiguous step.
TEST(DataParallelTest, AChannelsLastBatchTrainsAsAContiguousOne) {
  auto devices = hosts(2);
  Generator g(11);
  const Tensor x = randn({6, 1, 28, 28}, g);
  const Tensor x_cl = x.contiguous(MemoryFormat::kChannelsLast);
  ASSERT_EQ(x_cl.suggest_memory_format(), MemoryFormat::kChannelsLast);
  const Tensor y = Tensor::from_vector(std::vector<int64_t>{1, 3, 0, 9, 4, 4}, {6});
  for (const bool batch_norm : {false, true}) {
    auto a = std::make_shared<models::ConvNet>(g, batch_norm);
    auto b = a->copy_to(kH0);
    DataParallel dp_cl(b, devices);
    const test::StepResult got = test::train_step(dp_cl, *b, x_cl, y);
    if (!batch_norm) {
      test::expect_same(got, test::train_step(*a, *a, x, y), kH0, "ConvNet without BN");
      continue;
    }
    // Each replica normalises its own chunk: compare with DataParallel's contiguous step. The
    // convolutions' biases ahead of a batch norm have a gradient of 0 but for rounding (about
    // 1e-7 either way), which a relative error cannot compare: they are checked against 0.
    DataParallel dp(a, devices);
    const test::StepResult want = test::train_step(dp, *a, x, y);
    EXPECT_NEAR(got.loss, want.loss, 1e-5 * std::abs(want.loss));
    for (size_t i = 0; i < want.grads.size(); ++i) {
      const std::string& name = want.grads[i].first;
      const std::vector<float> g = got.grads[i].second.to_vector<float>();
      if (name == "layer1.0.bias" || name == "layer2.0.bias") {
        for (float v : g) EXPECT_LT(std::abs(v), 1e-5f) << name;
        continue;
      }
      EXPECT_LT(test::rel_error(g, want.grads[i].second.to_vector<float>()), 1e-5) << name;
      EXPECT_LT(test::rel_error(got.params[i].second.to_vector<float>(),
                                want.params[i].second.to_vector<float>()),
                1e-5)
          << name;
    }
  }
}

TEST(DataParallelTest, DefaultsAndStateDictPrefix) {
  hosts(2);
  Generator g(6);
  auto fc = std::make_shared<nn::Linear>(5, 2, g);
  DataParallel dp(fc);
  EXPECT_EQ(dp.device_ids().size(),
            static_cast<size_t>(Runtime::get().device_count(DeviceType::kHost)));
  EXPECT_EQ(dp.output_device(), kH0);
  EXPECT_EQ(dp.dim(), 0);
  StateDict sd = dp.state_dict();
  EXPECT_EQ(sd[0].first, "module.weight");
  // A wrapped checkpoint loads into a bare model and the reverse.
  auto bare = std::make_shared<nn::Linear>(5, 2, g);
  bare->load_state_dict(strip_prefix(sd));
  EXPECT_EQ(bare->weight().to_vector<float>(), fc->weight().to_vector<float>());
  // And a bare checkpoint, prefixed, loads into the wrapped model.
  auto other = std::make_shared<nn::Linear>(5, 2, g);
  ASSERT_NE(other->weight().to_vector<float>(), fc->weight().to_vector<float>());
  dp.load_state_dict(add_prefix(other->state_dict()));
  EXPECT_EQ(fc->weight().to_vector<float>(), other->weight().to_vector<float>());
  EXPECT_EQ(fc->find("bias").to_vector<float>(), other->find("bias").to_vector<float>());
  EXPECT_THROW(dp.load_state_dict(other->state_dict()), Error);  // strict: keys lack "module."
}

TEST(DataParallelTest, OneDeviceRunsTheModuleDirectly) {
  hosts(2);
  Generator g(7);
  auto fc = std::make_shared<nn::Linear>(5, 2, g);
  DataParallel dp(fc, {kH0});
  Tensor x = randn({4, 5}, g, Device::parse("host:1"));  // moved to device_ids[0]
  Tensor y = dp(x);
  EXPECT_EQ(y.device(), kH0);
  EXPECT_EQ(y.to_vector<float>(), (*fc)(x.to(kH0)).to_vector<float>());
}

// A replica's output is one scalar: the sum of its chunk times w.
class SumOfProducts : public Cloneable<SumOfProducts> {
 public:
  SumOfProducts() {
    register_parameter("w", Tensor::from_vector(std::vector<float>{1, 2}, {2, 1}));
  }
  Tensor forward(const Tensor& x) override { return ops::sum(ops::matmul(x, param("w"))); }
  std::string repr() const override { return "SumOfProducts"; }
};

TEST(DataParallelTest, OutputDeviceAndScalarOutputs) {
  auto devices = hosts(3);
  Generator g(8);
  auto fc = std::make_shared<nn::Linear>(5, 2, g);
  DataParallel dp(fc, {devices[0], devices[1]}, devices[1]);
  EXPECT_EQ(dp(randn({6, 5}, g)).device(), devices[1]);

  // Scalars from every replica become a vector on the output device, one entry per replica,
  // and its backward reaches the parameters on device_ids[0].
  auto m = std::make_shared<SumOfProducts>();
  DataParallel scalars(m, devices, devices[2]);
  Tensor x = Tensor::from_vector(std::vector<float>{1, 1, 2, 2, 3, 3, 4, 4, 5, 5}, {5, 2});
  Tensor out = scalars(x);
  EXPECT_EQ(out.device(), devices[2]);
  EXPECT_EQ(out.shape(), Shape({3}));
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{9, 21, 15}));  // chunks of 2, 2, 1 rows
  backward(ops::sum(out));
  EXPECT_EQ(m->find("w").grad().device(), kH0);
  EXPECT_EQ(m->find("w").grad().to_vector<float>(), (std::vector<float>{15, 15}));
}

// As PyTorch, the module's device is checked by forward, not when it is wrapped: a module on
// another device than device_ids[0] wraps, and its forward fails with PyTorch's message naming
// both devices.
TEST(DataParallelTest, ErrorsUsePyTorchsWording) {
  hosts(2);
  Generator g(9);
  auto fc = std::make_shared<nn::Linear>(5, 2, g, true, Device::parse("host:1"));
  DataParallel dp(fc, hosts(2));
  try {
    dp(Tensor::ones({4, 5}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "module must have its parameters and buffers on device host:0 (device_ids[0]) "
                  "but found one of them on device: host:1"),
              std::string::npos)
        << e.what();
  }
  auto ok = std::make_shared<nn::Linear>(5, 2, g);
  EXPECT_THROW(DataParallel(ok, std::vector<Device>{}), Error);
  EXPECT_THROW(DataParallel(ok, {kH0, kH0}), Error);
  try {
    DataParallel(ok, {kH0, Device::parse("host:7")});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("host:7"), std::string::npos) << e.what();
  }
}

// PyTorch's idiom: wrap first, then move the wrapper (model = DataParallel(model, device_ids);
// model.to(device)). The wrapper's to() moves the module, and forward then runs as if the module
// had been on device_ids[0] from the start.
TEST(DataParallelTest, WrappingThenMovingTheWrapperWorks) {
  const auto devices = hosts(2);
  Generator g(11);
  auto moved = std::make_shared<nn::Linear>(5, 2, g, true, Device::parse("host:1"));
  Generator same(11);
  auto placed = std::make_shared<nn::Linear>(5, 2, same, true, Device::parse("host:1"));
  placed->to(kH0);
  DataParallel late(moved, devices);
  late.to(kH0);
  EXPECT_EQ(moved->device(), kH0);
  for (const auto& [name, p] : late.named_parameters()) EXPECT_EQ(p.device(), kH0) << name;
  DataParallel early(placed, devices);
  Generator data(12);
  const Tensor x = randn({6, 5}, data);
  EXPECT_EQ(late(x).to_vector<float>(), early(x).to_vector<float>());
  // Moved away again, forward refuses, naming both devices.
  late.to(Device::parse("host:1"));
  try {
    late(x);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("on device host:0 (device_ids[0]) but found one of them "
                                         "on device: host:1"),
              std::string::npos)
        << e.what();
  }
}

TEST(DataParallelTest, OneDeviceIdMovesTheModuleThere) {
  hosts(2);
  Generator g(9);
  auto fc = std::make_shared<nn::Linear>(5, 2, g, true, Device::parse("host:1"));
  DataParallel dp(fc, {kH0});  // as PyTorch: module.to(device_ids[0])
  EXPECT_EQ(fc->device(), kH0);
  EXPECT_EQ(dp(Tensor::ones({3, 5})).shape(), Shape({3, 2}));
}

TEST(DataParallelTest, AnEmptyBatchRunsOnEveryDeviceAndGathersEmpty) {
  Generator g(10);
  auto fc = std::make_shared<nn::Linear>(5, 2, g);
  DataParallel dp(fc, hosts(2));
  Tensor x = Tensor::zeros({0, 5});
  x.requires_grad_();
  Tensor y = dp(x);
  EXPECT_EQ(y.shape(), Shape({0, 2}));
  EXPECT_EQ(y.device(), kH0);
  backward(ops::sum(y));  // gradients of nothing: zeros
  EXPECT_EQ(fc->find("weight").grad().to_vector<float>(), std::vector<float>(10, 0.0f));
}

// A module that fails on one device, to check failure isolation.
class FailOn : public Cloneable<FailOn> {
 public:
  explicit FailOn(Device bad) : bad_(bad) { register_parameter("w", Tensor::ones({3, 3})); }
  Tensor forward(const Tensor& x) override {
    if (x.device() == bad_ && armed_) throw std::runtime_error("injected failure");
    return ops::matmul(x, param("w"));
  }
  std::string repr() const override { return "FailOn"; }
  bool armed_ = true;

 private:
  Device bad_;
};

TEST(DataParallelTest, AFailingReplicaGivesOneErrorNamingItAndTheNextStepWorks) {
  auto devices = hosts(3);
  auto m = std::make_shared<FailOn>(devices[2]);
  DataParallel dp(m, devices);
  try {
    dp(Tensor::ones({6, 3}));
    FAIL();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("replica 2 on device host:2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("injected failure"), std::string::npos) << msg;
  }
  m->armed_ = false;
  EXPECT_EQ(dp(Tensor::ones({6, 3})).shape(), Shape({6, 3}));
}

TEST(DataParallelTest, CalledFromADeviceWorkerItIsAnErrorNotADeadlock) {
  auto devices = hosts(2);
  Generator g(13);
  auto fc = std::make_shared<nn::Linear>(5, 2, g);
  DataParallel dp(fc, devices);
  Tensor x = randn({4, 5}, g);
  std::string error;  // caught on the worker: only text crosses threads
  Runtime::get()
      .context(devices[1])
      .worker()
      .submit([&] {
        try {
          dp(x);
        } catch (const Error& e) {
          error = e.what();
        }
      })
      .get();
  EXPECT_NE(error.find("called from the worker of host:1"), std::string::npos) << error;
  EXPECT_EQ(dp(x).shape(), Shape({4, 2}));  // and the engine is still usable
}

TEST(DataParallelTest, ParallelCriterionMatchesTheGatheredLoss) {
  auto devices = hosts(3);
  Generator g(10);
  auto model = std::make_shared<models::ToyModel>(g);
  auto copy = model->copy_to(kH0);
  Tensor x = randn({11, 10}, g);
  std::vector<int64_t> labels(11);
  for (auto& l : labels) l = static_cast<int64_t>(g.next_u64() % 5);
  Tensor y = Tensor::from_vector(labels, {11});
  DataParallel dp(model, devices);
  Tensor loss = parallel_criterion(
      dp.forward_replicas(Value(x)), y, 0,
      [](const Tensor& out, const Tensor& t) { return ops::cross_entropy(out, t); }, kH0);
  backward(loss);
  DataParallel dp2(copy, devices);
  Tensor ref = ops::cross_entropy(dp2(x), y);
  backward(ref);
  EXPECT_NEAR(loss.item(), ref.item(), 1e-5);
  for (auto& [n, p] : model->named_parameters()) {
    EXPECT_LT(rel_error(p.grad().to_vector<float>(), copy->find(n).grad().to_vector<float>()), 1e-5)
        << n;
  }
}

TEST(DataParallelTest, ChunkWeightsShiftWorkAwayFromDeviceZero) {
  auto devices = hosts(2);
  Generator g(11);
  auto model = std::make_shared<models::ToyModel>(g);
  DataParallelOptions o;
  o.device_ids = devices;
  o.chunk_weights = {0.5, 1.0};
  DataParallel dp(model, o);
  ReplicaOutputs r = dp.forward_replicas(Value(randn({30, 10}, g)));
  EXPECT_EQ(r.sizes, (std::vector<int64_t>{10, 20}));
}

TEST(DataParallelTest, ImbalanceShowsDeviceZerosExtraMemory) {
  auto devices = hosts(2);
  Generator g(12);
  auto model = std::make_shared<models::Mlp>(g);
  DataParallel dp(model, devices);
  StepProfiler prof;
  dp.set_profiler(&prof);
  Tensor x = randn({64, 1, 28, 28}, g);
  std::vector<int64_t> labels(64, 3);
  Tensor y = Tensor::from_vector(labels, {64});
  prof.begin_step(devices);
  Tensor out = dp(x);
  Tensor loss = ops::cross_entropy(out, y);
  prof.backward(loss);
  StepStats s = prof.end_step();
  ASSERT_EQ(s.devices.size(), 2u);
  const DeviceStepStats& d0 = s.devices[0];
  const DeviceStepStats& d1 = s.devices[1];
  // Device 0 holds the reduced gradients (one per parameter) on top of what device 1 holds.
  int64_t param_bytes = 0;
  for (const Tensor& p : model->parameters()) param_bytes += static_cast<int64_t>(p.nbytes());
  EXPECT_GE(d0.held_bytes - d1.held_bytes, param_bytes);
  EXPECT_GT(d0.peak_bytes, d1.peak_bytes);
  EXPECT_GT(d0.busy_ns[static_cast<int>(Phase::kReplicate)], 0);
  EXPECT_GT(d0.busy_ns[static_cast<int>(Phase::kReduceAdd)], 0);
  EXPECT_EQ(d1.busy_ns[static_cast<int>(Phase::kReduceAdd)], 0);
  EXPECT_GT(d1.busy_ns[static_cast<int>(Phase::kForward)], 0);
  EXPECT_GT(d1.busy_ns[static_cast<int>(Phase::kBackward)], 0);
  EXPECT_GT(d0.busy_ns[static_cast<int>(Phase::kBackward)], 0);
  ImbalanceReport report = ImbalanceReport::from_steps({s});
  EXPECT_GT(report.extra_peak_bytes, 0);
  EXPECT_NE(report.table().find("device 0 vs mean of the others"), std::string::npos);
  EXPECT_NE(report.to_json().find("\"others_wait_share\""), std::string::npos);
  // Device 0 sent the replica's parameters and received its gradients and outputs.
  EXPECT_GE(d0.sent_bytes, param_bytes);
  EXPECT_GE(d0.received_bytes, param_bytes);
}

}  // namespace
}  // namespace dpe
