#include "tools/trainer.h"

#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>
#include <nlohmann/json.hpp>

#include "engine/autograd/engine.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/ops.h"
#include "engine/core/error.h"
#include "engine/data/data_loader.h"
#include "engine/data/distributed_sampler.h"
#include "engine/data/fashion_mnist.h"
#include "engine/data/random_sampler.h"
#include "engine/data/text_corpus.h"
#include "engine/data/text_dataset.h"
#include "engine/data/token_cache.h"
#include "engine/device/runtime.h"
#include "engine/io/safetensors.h"
#include "engine/optim/adam.h"
#include "engine/optim/clip_grad.h"
#include "engine/optim/sgd.h"
#include "engine/parallel/data_parallel.h"
#include "models/by_name.h"
#include "models/gpt.h"
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
  bool language_model = false;
  int64_t vocab_size = 0;          // language model: the tokenizer's
  double unigram_perplexity = -1;  // language model: the validation split's baseline
};

// The language-model corpus's windows: the tokenizer is trained once and cached (token_cache.h);
// every DDP rank loads the same files. The tokenizer's messages go to `out` on the main process.
Data load_lm_data(const TrainConfig& c, FILE* out, bool main) {
  std::vector<std::string> docs = load_language_model_corpus();
  if (c.corpus_documents > 0 && c.corpus_documents < static_cast<int64_t>(docs.size())) {
    docs.resize(static_cast<size_t>(c.corpus_documents));
  }
  Tokenizer::TrainOptions options;
  options.vocab_size = c.vocab_size;
  std::ostringstream log;
  const TokenizedCorpus corpus = load_tokenized_corpus(
      docs, c.cache_dir.empty() ? default_cache_dir() : c.cache_dir, options, &log);
  if (main && !log.str().empty()) std::fprintf(out, "%s", log.str().c_str());
  Data d;
  d.classification = false;
  d.language_model = true;
  d.vocab_size = corpus.tokenizer.vocab_size();
  d.unigram_perplexity =
      unigram_perplexity(corpus.train_tokens, corpus.validation_tokens, d.vocab_size);
  auto windows = [&](const Tensor& tokens, const char* split) {
    DPE_CHECK(tokens.numel() > c.context,
              "the corpus's " << split << " split has " << tokens.numel()
                              << " tokens, too few for one window of --context " << c.context);
    return std::make_shared<TextDataset>(tokens, c.context, c.context);
  };
  d.train = std::make_shared<Prefix>(windows(corpus.train_tokens, "training"), c.train_samples);
  d.test = std::make_shared<Prefix>(windows(corpus.validation_tokens, "validation"),
                                    c.test_samples);
  return d;
}

Data load_data(const TrainConfig& c, FILE* out, bool main) {
  if (models::is_language_model(c.model)) return load_lm_data(c, out, main);
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

Tensor loss_of(const Tensor& out, const Tensor& target, const Data& data) {
  if (data.language_model) return models::lm_loss(out, target);
  return data.classification ? ops::cross_entropy(out, target) : ops::mse_loss(out, target);
}

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& c, std::vector<Tensor> params,
                                                 float lr) {
  if (c.optimizer == "adamw") {
    optim::AdamWOptions o;  // PyTorch's betas (0.9, 0.999) and eps 1e-8
    o.lr = lr;
    o.weight_decay = c.weight_decay;
    return std::make_unique<optim::AdamW>(std::move(params), o);
  }
  optim::SgdOptions so;
  so.lr = lr;
  so.momentum = c.momentum;
  so.weight_decay = c.weight_decay;
  return std::make_unique<optim::SGD>(std::move(params), so);
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
  if (m.perplexity >= 0) {
    j["context"] = c.context;
    j["perplexity"] = m.perplexity;
    j["unigram_perplexity"] = m.unigram_perplexity;
    j["tokens_per_second"] = m.tokens_per_second;
  }
  j["optimizer"] = c.optimizer;
  j["samples_per_second"] = m.samples_per_second;
  j["steps"] = m.steps;
  std::ofstream f(path, std::ios::app);
  DPE_CHECK(f.good(), "cannot append metrics to '" << path << "'");
  f << j.dump() << "\n";
}

}  // namespace

std::string checkpoint_path(const std::string& dir) { return dir + "/checkpoint.safetensors"; }
std::string metrics_path(const std::string& dir) { return dir + "/metrics.jsonl"; }

TrainConfig resolve_defaults(const TrainConfig& config) {
  TrainConfig c = config;
  const bool lm = models::is_language_model(c.model);
  if (c.optimizer.empty()) c.optimizer = lm ? "adamw" : "sgd";
  DPE_CHECK(c.optimizer == "sgd" || c.optimizer == "adamw",
            "unknown optimizer '" << c.optimizer << "' (expected sgd or adamw)");
  // AdamW's learning rate: nanoGPT's choices, 6e-4 for GPT-2 124 M (GPT-3's paper for its 125 M
  // model) and 1e-3 for its small models, which tolerate a larger step and learn faster in a
  // short run. SGD keeps the Fashion-MNIST default.
  if (c.lr < 0) c.lr = c.optimizer == "sgd" ? 0.01f : (c.model == "gpt2" ? 6e-4f : 1e-3f);
  if (c.weight_decay < 0) c.weight_decay = c.optimizer == "adamw" ? 0.01f : 0.0f;
  if (c.clip_grad_norm < 0) c.clip_grad_norm = lm ? 1.0f : 0.0f;
  if (c.batch_size == 0) c.batch_size = lm ? 16 : 100;
  if (lm) {
    const models::GptConfig g = models::gpt_config(c.model);
    DPE_CHECK(c.context >= 0 && c.context <= g.block_size,
              "--context " << c.context << " must be between 1 and " << c.model
                           << "'s block size " << g.block_size);
    if (c.context == 0) c.context = g.block_size;
    DPE_CHECK(c.vocab_size >= 2, "--vocab-size " << c.vocab_size << " is too small");
    DPE_CHECK(!c.sync_bn, "--sync-bn: " << c.model << " has no BatchNorm to synchronise");
  } else {
    DPE_CHECK(c.context == 0, "--context applies to the gpt models only, not " << c.model);
  }
  return c;
}

TrainResult train(const TrainConfig& config, FILE* out) {
  DPE_CHECK(config.mode == "single" || config.mode == "dp" || config.mode == "ddp",
            "unknown mode '" << config.mode << "' (expected single, dp or ddp)");
  const TrainConfig c = resolve_defaults(config);
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

  // The gpt models' vocabulary comes from the tokenizer, so the data is loaded first.
  Data data = load_data(c, out, main);
  Generator gen(c.seed);
  models::ModelOptions mo;
  mo.vocab_size = data.vocab_size;
  std::shared_ptr<Module> model = models::make_model(c.model, gen, mo);
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
  const float lr = c.scale_lr ? c.lr * static_cast<float>(scale) : c.lr;
  std::unique_ptr<optim::Optimizer> opt = make_optimizer(c, model->parameters(), lr);

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
    // Checkpoints written before the optimizer was recorded are SGD's.
    const std::string saved_opt =
        ck.metadata.count("optimizer") ? ck.metadata.at("optimizer") : std::string("sgd");
    DPE_CHECK(saved_opt == c.optimizer, "checkpoint '" << path << "' holds " << saved_opt
                                                       << " state, not " << c.optimizer
                                                       << " (pass --optimizer " << saved_opt
                                                       << ")");
    if (data.language_model) {
      DPE_CHECK(meta("context") == std::to_string(c.context),
                "checkpoint '" << path << "' was trained with --context " << meta("context")
                               << ", not " << c.context
                               << " (the data order depends on the windows)");
    }
    StateDict model_state, optim_state;
    for (auto& [k, v] : ck.tensors) {
      if (k.rfind("optimizer.", 0) == 0) optim_state.emplace_back(k.substr(10), v);
      else model_state.emplace_back(k, v);
    }
    model->load_state_dict(model_state);
    opt->load_state_dict(optim_state);
    start_epoch = std::stoi(meta("epoch")) + 1;
    if (main) std::fprintf(out, "resumed from %s after epoch %d\n", path.c_str(), start_epoch - 1);
  }

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
  eo.batch_size = data.language_model ? c.batch_size : 1000;
  if (c.mode == "ddp") {
    eo.sampler = std::make_shared<DistributedSampler>(data.test->size(), dist.world, dist.rank,
                                                      false, 0);
  }
  DataLoader test_loader(data.test, eo);

  if (main) {
    std::fprintf(out, "training %s, mode %s (%d %s), batch %lld %s, %s lr %g, %d epoch(s)\n",
                 c.model.c_str(), c.mode.c_str(), c.mode == "dp" ? c.devices : dist.world,
                 c.mode == "dp" ? "devices" : "process(es)", static_cast<long long>(c.batch_size),
                 c.mode == "ddp" ? "per process" : "global", c.optimizer.c_str(), lr, c.epochs);
    if (data.language_model) {
      std::fprintf(out,
                   "language-model corpus: %lld training / %lld validation windows of %lld tokens; "
                   "%s, %lld parameters; clip_grad_norm %g\n",
                   static_cast<long long>(data.train->size()),
                   static_cast<long long>(data.test->size()), static_cast<long long>(c.context),
                   model->repr().c_str(),
                   static_cast<long long>(dynamic_cast<const models::Gpt&>(*model).num_parameters()),
                   c.clip_grad_norm);
    }
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
      Tensor loss = loss_of(output, b->target.to(output.device()), data);
      DPE_CHECK(ops::all_finite(loss),
                "non-finite loss (" << loss.item() << ") at epoch " << epoch << ", step " << step
                                    << "; stopping. The last good checkpoint"
                                    << (c.checkpoint_dir.empty()
                                            ? " (none: no --checkpoint-dir)"
                                            : " in " + c.checkpoint_dir + " is intact"));
      opt->zero_grad();
      backward(loss);
      // DataParallel: the gradients were reduced onto device 0's parameters, clipped there; DDP:
      // each rank clips its all-reduced (identical) gradients.
      if (c.clip_grad_norm > 0) optim::clip_grad_norm_(model->parameters(), c.clip_grad_norm);
      opt->step();
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
    if (data.language_model) m.tokens_per_second = m.samples_per_second * c.context;

    // Test: loss and accuracy over the whole test set (every rank's shard, reduced).
    net->eval();
    double loss_sum = 0, correct = 0, count = 0;
    {
      NoGradGuard no_grad;
      for (Batch& tb : test_loader) {
        Tensor o = net->forward(tb.input);
        Tensor t = tb.target.to(o.device());
        const double n = static_cast<double>(tb.input.size(0));
        loss_sum += loss_of(o, t, data).item() * n;
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
    if (data.language_model) {
      // Every window has `context` targets, so the mean over windows is the mean over tokens.
      m.perplexity = std::exp(m.test_loss);
      m.unigram_perplexity = data.unigram_perplexity;
    }
    if (main && data.language_model) {
      std::fprintf(out,
                   "epoch %d: train loss %.4f, val loss %.4f, val perplexity %.1f (unigram "
                   "baseline %.1f), %.0f tokens/s\n",
                   epoch, m.train_loss, m.test_loss, m.perplexity, m.unigram_perplexity,
                   m.tokens_per_second);
    } else if (main) {
      std::fprintf(out, "epoch %d: train loss %.4f, test loss %.4f", epoch, m.train_loss,
                   m.test_loss);
      if (m.test_accuracy >= 0) std::fprintf(out, ", test accuracy %.2f%%", 100 * m.test_accuracy);
      std::fprintf(out, ", %.0f samples/s\n", m.samples_per_second);
    }
    if (!c.checkpoint_dir.empty()) {
      if (main) {
        mkdir(c.checkpoint_dir.c_str(), 0755);
        StateDict state = model->state_dict();
        for (auto& [k, v] : opt->state_dict()) state.emplace_back("optimizer." + k, v);
        SafetensorsSaveOptions so2;
        so2.metadata = {{"epoch", std::to_string(epoch)},
                        {"model", c.model},
                        {"mode", c.mode},
                        {"optimizer", c.optimizer},
                        {"format", "dpe-train-1"}};
        if (data.language_model) so2.metadata["context"] = std::to_string(c.context);
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
