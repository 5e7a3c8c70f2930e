#include "tools/trainer.h"

#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "engine/autograd/engine.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/ops.h"
#include "engine/core/error.h"
#include "engine/data/data_loader.h"
#include "engine/data/distributed_sampler.h"
#include "engine/data/fashion_mnist.h"
#include "engine/data/random_sampler.h"
#include "engine/device/runtime.h"
#include "engine/io/safetensors.h"
#include "engine/optim/sgd.h"
#include "engine/parallel/data_parallel.h"
#include "models/by_name.h"
#include "tools/progress.h"
#include "tools/toy_dataset.h"
#include "tools/train_distributed.h"

namespace dpe::tools {

namespace {

// A dataset prefix: the first `n` samples of `inner`.
class Prefix : public Dataset {
 public:
  Prefix(std::shared_ptr<const Dataset> inner, int64_t n)
      : inner_(std::move(inner)), n_(n > 0 ? std::min(n, inner_->size()) : inner_->size()) {}
  int64_t size() const override { return n_; }
  Example get(int64_t i) const override {
    check_index("dataset", i);
    return inner_->get(i);
  }
  Batch get_batch(const std::vector<int64_t>& indices) const override {
    for (int64_t i : indices) check_index("dataset", i);
    return inner_->get_batch(indices);
  }

 private:
  std::shared_ptr<const Dataset> inner_;
  int64_t n_;
};

struct Data {
  std::shared_ptr<const Dataset> train, test;
  bool classification = true;
};

Data load_data(const TrainConfig& c) {
  Data d;
  if (c.model == "toy") {
    d.train = std::make_shared<ToyDataset>(c.train_samples > 0 ? c.train_samples : 4096, 0);
    d.test = std::make_shared<ToyDataset>(c.test_samples > 0 ? c.test_samples : 1024, 1);
    d.classification = false;
    return d;
  }
  struct stat st {};
  DPE_CHECK(stat(c.data_dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode),
            "data directory '" << c.data_dir
                               << "' does not exist (install dataset-fashion-mnist or pass "
                                  "--data-dir)");
  d.train = std::make_shared<Prefix>(std::make_shared<FashionMnist>(c.data_dir, true),
                                     c.train_samples);
  d.test = std::make_shared<Prefix>(std::make_shared<FashionMnist>(c.data_dir, false),
                                    c.test_samples);
  return d;
}

Tensor loss_of(const Tensor& out, const Tensor& target, bool classification) {
  return classification ? ops::cross_entropy(out, target) : ops::mse_loss(out, target);
}

void append_metrics(const std::string& path, const TrainConfig& c, const EpochMetrics& m,
                    int world) {
  nlohmann::json j;
  j["epoch"] = m.epoch;
  j["mode"] = c.mode;
  j["model"] = c.model;
  j["world_size"] = world;
  j["batch_size"] = c.batch_size;
  j["train_loss"] = m.train_loss;
  j["test_loss"] = m.test_loss;
  if (m.test_accuracy >= 0) j["test_accuracy"] = m.test_accuracy;
  j["samples_per_second"] = m.samples_per_second;
  j["steps"] = m.steps;
  std::ofstream f(path, std::ios::app);
  DPE_CHECK(f.good(), "cannot append metrics to '" << path << "'");
  f << j.dump() << "\n";
}

}  // namespace

std::string checkpoint_path(const std::string& dir) { return dir + "/checkpoint.safetensors"; }
std::string metrics_path(const std::string& dir) { return dir + "/metrics.jsonl"; }

TrainResult train(const TrainConfig& c, FILE* out) {
  DPE_CHECK(c.mode == "single" || c.mode == "dp" || c.mode == "ddp",
            "unknown mode '" << c.mode << "' (expected single, dp or ddp)");
  DPE_CHECK(c.epochs >= 1 && c.batch_size >= 1, "epochs and batch size must be positive");
  DPE_CHECK(!c.resume || !c.checkpoint_dir.empty(), "--resume needs --checkpoint-dir");
  DPE_CHECK(!c.sync_bn || c.mode == "ddp", "--sync-bn needs --mode ddp");

  // One process drives `devices` (dp) or one device (single, ddp: one device per process).
  Runtime& rt = Runtime::get();
  if (c.mode == "dp" && rt.host_device_count() < c.devices) rt.set_host_device_count(c.devices);
  Distributed dist = c.mode == "ddp" ? Distributed::init() : Distributed::single();
  const Device home = Device();  // host:0 in this process
  const bool main = dist.rank == 0;

  Generator gen(c.seed);
  std::shared_ptr<Module> model = models::make_model(c.model, gen);
  if (c.sync_bn) model = dist.convert_sync_batchnorm(model);
  std::shared_ptr<Module> net = model;
  std::vector<Device> devices{home};
  if (c.mode == "dp") {
    devices.clear();
    for (int i = 0; i < c.devices; ++i) devices.emplace_back(DeviceType::kHost, i);
    net = std::make_shared<DataParallel>(model, devices);
  } else if (c.mode == "ddp") {
    net = dist.wrap(model);
  }

  const int scale = c.mode == "dp" ? c.devices : dist.world;
  optim::SgdOptions so;
  so.lr = c.scale_lr ? c.lr * static_cast<float>(scale) : c.lr;
  so.momentum = c.momentum;
  so.weight_decay = c.weight_decay;
  optim::SGD sgd(model->parameters(), so);

  int start_epoch = 0;
  if (c.resume) {
    const std::string path = checkpoint_path(c.checkpoint_dir);
    SafetensorsContents ck = read_safetensors(path, home);
    auto meta = [&](const std::string& key) {
      auto it = ck.metadata.find(key);
      DPE_CHECK(it != ck.metadata.end(), "checkpoint '" << path << "' has no '" << key
                                                        << "' entry: not written by dpe train");
      return it->second;
    };
    DPE_CHECK(meta("model") == c.model, "checkpoint '" << path << "' holds a " << meta("model")
                                                       << " model, not " << c.model);
    StateDict model_state, optim_state;
    for (auto& [k, v] : ck.tensors) {
      if (k.rfind("optimizer.", 0) == 0) optim_state.emplace_back(k.substr(10), v);
      else model_state.emplace_back(k, v);
    }
    model->load_state_dict(model_state);
    sgd.load_state_dict(optim_state);
    start_epoch = std::stoi(meta("epoch")) + 1;
    if (main) std::fprintf(out, "resumed from %s after epoch %d\n", path.c_str(), start_epoch);
  }

  Data data = load_data(c);
  std::shared_ptr<Sampler> sampler;
  if (c.mode == "ddp") {
    sampler = std::make_shared<DistributedSampler>(data.train->size(), dist.world, dist.rank,
                                                   true, c.seed);
  } else {
    sampler = std::make_shared<RandomSampler>(data.train->size(), c.seed);
  }
  DataLoaderOptions lo;
  lo.batch_size = c.batch_size;
  lo.sampler = sampler;
  DataLoader loader(data.train, lo);
  DataLoaderOptions eo;
  eo.batch_size = 1000;
  if (c.mode == "ddp") {
    eo.sampler = std::make_shared<DistributedSampler>(data.test->size(), dist.world, dist.rank,
                                                      false, 0);
  }
  DataLoader test_loader(data.test, eo);

  if (main) {
    std::fprintf(out, "training %s, mode %s (%d %s), batch %lld %s, lr %g, %d epoch(s)\n",
                 c.model.c_str(), c.mode.c_str(), c.mode == "dp" ? c.devices : dist.world,
                 c.mode == "dp" ? "devices" : "process(es)", static_cast<long long>(c.batch_size),
                 c.mode == "ddp" ? "per process" : "global", so.lr, c.epochs);
  }
  TrainResult result;
  for (int epoch = start_epoch; epoch < c.epochs; ++epoch) {
    net->train();
    sampler->set_epoch(epoch);
    int64_t batches = loader.size();
    if (c.max_steps > 0) batches = std::min(batches, c.max_steps);
    Progress progress("epoch " + std::to_string(epoch), batches, out, main && c.progress);
    int64_t step = 0;
    while (step < batches) {
      std::optional<Batch> b = loader.next();
      if (!b) break;
      Tensor output = net->forward(b->input);
      Tensor loss = loss_of(output, b->target.to(output.device()), data.classification);
      DPE_CHECK(ops::all_finite(loss),
                "non-finite loss (" << loss.item() << ") at epoch " << epoch << ", step " << step
                                    << "; stopping. The last good checkpoint"
                                    << (c.checkpoint_dir.empty()
                                            ? " (none: no --checkpoint-dir)"
                                            : " in " + c.checkpoint_dir + " is intact"));
      sgd.zero_grad();
      backward(loss);
      sgd.step();
      // The line shows the whole job: every rank's samples and the loss averaged over ranks.
      progress.update(b->input.size(0) * dist.world, dist.reduce_mean(loss.item()));
      ++step;
    }
    // Drain the rest of the pass when max_steps cut it short, so the next epoch starts afresh.
    while (loader.next()) {
    }
    EpochMetrics m;
    m.epoch = epoch;
    m.steps = step;
    m.train_loss = progress.mean_loss();
    m.samples_per_second = progress.finish();

    // Test: loss and accuracy over the whole test set (every rank's shard, reduced).
    net->eval();
    double loss_sum = 0, correct = 0, count = 0;
    {
      NoGradGuard no_grad;
      for (Batch& tb : test_loader) {
        Tensor o = net->forward(tb.input);
        Tensor t = tb.target.to(o.device());
        const double n = static_cast<double>(tb.input.size(0));
        loss_sum += loss_of(o, t, data.classification).item() * n;
        count += n;
        if (data.classification) {
          const auto pred = ops::argmax_rows(o).to_vector<int64_t>();
          const auto truth = t.to_vector<int64_t>();
          for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == truth[i];
        }
      }
    }
    const std::vector<double> sums = dist.sum({loss_sum, correct, count});
    m.test_loss = sums[0] / std::max(sums[2], 1.0);
    if (data.classification) m.test_accuracy = sums[1] / std::max(sums[2], 1.0);
    if (main) {
      std::fprintf(out, "epoch %d: train loss %.4f, test loss %.4f", epoch, m.train_loss,
                   m.test_loss);
      if (m.test_accuracy >= 0) std::fprintf(out, ", test accuracy %.2f%%", 100 * m.test_accuracy);
      std::fprintf(out, ", %.0f samples/s\n", m.samples_per_second);
    }
    if (!c.checkpoint_dir.empty()) {
      if (main) {
        mkdir(c.checkpoint_dir.c_str(), 0755);
        StateDict state = model->state_dict();
        for (auto& [k, v] : sgd.state_dict()) state.emplace_back("optimizer." + k, v);
        SafetensorsSaveOptions so2;
        so2.metadata = {{"epoch", std::to_string(epoch)},
                        {"model", c.model},
                        {"mode", c.mode},
                        {"format", "dpe-train-1"}};
        save_safetensors(checkpoint_path(c.checkpoint_dir), state, so2);
        append_metrics(metrics_path(c.checkpoint_dir), c, m, dist.world);
      }
      dist.barrier();
    }
    result.epochs.push_back(m);
  }
  for (auto& [k, v] : model->state_dict()) result.final_state.emplace_back(k, v.to(home).clone());
  return result;
}

}  // namespace dpe::tools
