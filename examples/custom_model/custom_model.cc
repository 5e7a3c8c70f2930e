// A complete dpe program: its own model and data, trained with DataParallel on two host devices,
// or with DDP, a process per rank, when the launcher starts it.
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "engine/autograd/engine.h"
#include "engine/autograd/ops.h"
#include "engine/backend/host/host_devices.h"
#include "engine/core/error.h"
#include "engine/data/data_loader.h"
#include "engine/data/distributed_sampler.h"
#include "engine/distributed/distributed.h"
#include "engine/distributed/distributed_data_parallel.h"
#include "engine/nn/linear.h"
#include "engine/optim/sgd.h"
#include "engine/parallel/data_parallel.h"

// A model: Linear(3, 32) - ReLU - Linear(32, 1). Cloneable lets DataParallel replicate it.
class Net : public dpe::Cloneable<Net> {
 public:
  explicit Net(dpe::Generator& gen) {
    register_module("fc1", std::make_shared<dpe::nn::Linear>(3, 32, gen));
    register_module("fc2", std::make_shared<dpe::nn::Linear>(32, 1, gen));
  }
  dpe::Tensor forward(const dpe::Tensor& x) override {
    return child("fc2")(dpe::ops::relu(child("fc1")(x)));
  }
  std::string repr() const override { return "Net"; }
};

// A data set made in code: y = sin(x0) + x1 * x2 for standard normal x. Immutable, so the
// DataLoader's background thread may read it while the loop trains.
class Curve : public dpe::Dataset {
 public:
  explicit Curve(int64_t n) {
    dpe::Generator gen(7);
    inputs_ = dpe::randn({n, 3}, gen);
    const std::vector<float> x = inputs_.to_vector<float>();
    std::vector<float> y(n);
    for (int64_t i = 0; i < n; ++i) y[i] = std::sin(x[3 * i]) + x[3 * i + 1] * x[3 * i + 2];
    targets_ = dpe::Tensor::from_vector(y, {n, 1});
  }
  int64_t size() const override { return inputs_.size(0); }
  dpe::Example get(int64_t i) const override {
    check_index("Curve", i);
    return {inputs_.narrow(0, i, 1).reshape({3}), targets_.narrow(0, i, 1).reshape({1})};
  }

 private:
  dpe::Tensor inputs_, targets_;
};

int main() try {
  dpe::Generator gen(0);
  auto model = std::make_shared<Net>(gen);
  auto data = std::make_shared<Curve>(2048);
  dpe::DataLoaderOptions options;
  options.batch_size = 64;

  std::shared_ptr<dpe::Module> net;
  if (dpe::distributed::dist_env_from_env()) {
    // Started by the launcher: this process is one rank on its host:0, and DDP averages the
    // gradients over Gloo. Each rank reads its own share of the data set.
    auto group = dpe::distributed::init_process_group("gloo");
    options.sampler =
        std::make_shared<dpe::DistributedSampler>(*data, group->size(), group->rank());
    net = std::make_shared<dpe::DistributedDataParallel>(model, group);
  } else {
    // One process, two host devices: every batch is split between them.
    dpe::set_host_device_count(2);
    std::vector<dpe::Device> devices = {dpe::Device::parse("host:0"), dpe::Device::parse("host:1")};
    net = std::make_shared<dpe::DataParallel>(model, devices);
    options.shuffle = true;
  }

  dpe::DataLoader loader(data, options);
  dpe::optim::SgdOptions sgd_options;
  sgd_options.lr = 0.05f;
  sgd_options.momentum = 0.9f;
  dpe::optim::SGD sgd(model->parameters(), sgd_options);
  for (int epoch = 0; epoch < 5; ++epoch) {
    loader.set_epoch(epoch);
    double total = 0;
    for (dpe::Batch& batch : loader) {
      dpe::Tensor loss = dpe::ops::mse_loss(net->forward(batch.input), batch.target);
      sgd.zero_grad();
      dpe::backward(loss);
      sgd.step();
      total += loss.item();
    }
    if (dpe::distributed::is_main_process()) {
      std::printf("epoch %d loss %.4f\n", epoch, total / loader.size());
    }
  }
  dpe::distributed::destroy_process_group();
  return 0;
} catch (const dpe::Error& e) {
  std::fprintf(stderr, "custom_model: %s\n", e.what());
  return 1;
}
