#include "tools/trainer.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
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
#include "engine/distributed/distributed.h"
#include "engine/io/safetensors.h"
#include "engine/optim/adam.h"
#include "engine/optim/clip_grad.h"
#include "engine/optim/sgd.h"
#include "engine/parallel/data_parallel.h"
#include "models/by_name.h"
#include "models/gpt.h"
#include "tools/exit_codes.h"
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
  DPE_TOOLS_CHECK(UsageError, stat(c.data_dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode),
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

// One line of metrics.jsonl. It is appended before the epoch's checkpoint is renamed into place,
// so a checkpoint never exists without its line; a line whose checkpoint never came (a kill
// between the two) is dropped on resume by trim_metrics.
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
  // Written and fsynced before the checkpoint (itself fsynced) is renamed: in order on disk too.
  const std::string line = j.dump() + "\n";
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  DPE_CHECK(fd >= 0, "cannot append metrics to '" << path << "': " << std::strerror(errno));
  const bool written = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) &&
                       ::fsync(fd) == 0;
  const std::string why = std::strerror(errno);
  ::close(fd);
  DPE_CHECK(written, "cannot append metrics to '" << path << "': " << why);
}

// A checkpoint's metadata value as a message shows it: as it is when it is a short plain word
// (letters, digits, '.', '_', '-'), else quoted, cut at 40 characters, anything unprintable as
// '?'. The value comes from a file and may be anything, of any length.
std::string shown(const std::string& value) {
  constexpr size_t kMax = 40;
  bool plain = !value.empty() && value.size() <= kMax;
  for (char ch : value) {
    plain = plain && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' ||
                      ch == '-');
  }
  if (plain) return value;
  std::string v = value.substr(0, kMax);
  for (char& ch : v) {
    if (!std::isprint(static_cast<unsigned char>(ch))) ch = '?';
  }
  std::string out = "'" + v + (value.size() > kMax ? "...'" : "'");
  if (value.size() > kMax) out += " (" + std::to_string(value.size()) + " bytes)";
  return out;
}

// A whole-number metadata value between lo and hi: digits only (no sign, space or exponent).
int64_t metadata_int(const std::string& path, const std::string& key, const std::string& value,
                     int64_t lo, int64_t hi) {
  bool digits = !value.empty() && value.size() <= 18;
  for (char ch : value) digits = digits && ch >= '0' && ch <= '9';
  const int64_t v = digits ? std::strtoll(value.c_str(), nullptr, 10) : -1;
  DPE_TOOLS_CHECK(DataError, digits && v >= lo && v <= hi,
                  "checkpoint '" << path << "': metadata '" << key << "' is " << shown(value)
                                 << ", not a whole number from " << lo << " to " << hi);
  return v;
}

// Removes the temporary files that killed checkpoint writes left in `dir`: exactly the names
// save_safetensors gives them (checkpoint.safetensors.tmp. + mkstemp's 6 characters), nothing else.
void remove_stale_temporaries(const std::string& dir, FILE* out) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  const std::string prefix = "checkpoint.safetensors.tmp.";
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() != prefix.size() + 6 || name.compare(0, prefix.size(), prefix) != 0) continue;
    bool ours = true;
    for (size_t i = prefix.size(); i < name.size(); ++i) {
      ours = ours && std::isalnum(static_cast<unsigned char>(name[i]));
    }
    if (ours) stale.push_back(dir + "/" + name);
  }
  ::closedir(d);
  for (const std::string& path : stale) {
    if (::unlink(path.c_str()) == 0) {
      std::fprintf(out, "removed %s, left by an interrupted checkpoint write\n", path.c_str());
    }
  }
}

// Keeps the lines of metrics.jsonl up to `last_epoch` (the checkpoint's) and drops the rest:
// lines of epochs whose checkpoint was never written, and torn lines. Rewritten atomically.
void trim_metrics(const std::string& path, int last_epoch, FILE* out) {
  std::ifstream in(path);
  if (!in.good()) return;
  std::string kept;
  int dropped = 0;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const bool keep = j.is_object() && j.contains("epoch") && j["epoch"].is_number_integer() &&
                      j["epoch"].get<int64_t>() <= last_epoch;
    if (keep) kept += line + "\n";
    else ++dropped;
  }
  in.close();
  if (dropped == 0) return;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << kept;
    f.flush();
    DPE_CHECK(f.good(), "cannot rewrite metrics in '" << tmp << "'");
  }
  DPE_CHECK(::rename(tmp.c_str(), path.c_str()) == 0,
            "cannot rename '" << tmp << "' to '" << path << "'");
  std::fprintf(out,
               "%s: dropped %d line(s) after epoch %d, the checkpoint's (a run stopped between "
               "the line and its checkpoint)\n",
               path.c_str(), dropped, last_epoch);
}

}  // namespace

std::string checkpoint_path(const std::string& dir) { return dir + "/checkpoint.safetensors"; }
std::string metrics_path(const std::string& dir) { return dir + "/metrics.jsonl"; }

TrainConfig resolve_defaults(const TrainConfig& config) {
  TrainConfig c = config;
  const bool lm = models::is_language_model(c.model);
  if (c.optimizer.empty()) c.optimizer = lm ? "adamw" : "sgd";
  DPE_TOOLS_CHECK(UsageError, c.optimizer == "sgd" || c.optimizer == "adamw",
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
    DPE_TOOLS_CHECK(UsageError, c.context >= 0 && c.context <= g.block_size,
                    "--context " << c.context << " must be between 1 and " << c.model
                                 << "'s block size " << g.block_size);
    if (c.context == 0) c.context = g.block_size;
    DPE_TOOLS_CHECK(UsageError, c.vocab_size >= 2,
                    "--vocab-size " << c.vocab_size << " is too small");
    DPE_TOOLS_CHECK(UsageError, !c.sync_bn,
                    "--sync-bn: " << c.model << " has no BatchNorm to synchronise");
  } else {
    DPE_TOOLS_CHECK(UsageError, c.context == 0,
                    "--context applies to the gpt models only, not " << c.model);
  }
  return c;
}

namespace {

// Loads the checkpoint in c.checkpoint_dir into `model` and `opt`; returns the epoch it holds.
// Every metadata value is checked before it is used; a checkpoint that is missing, corrupt or
// does not fit the command line is a DataError naming the file (and the key).
int resume(const TrainConfig& c, bool language_model, Module& model, optim::Optimizer& opt) {
  const std::string path = checkpoint_path(c.checkpoint_dir);
  try {
    SafetensorsContents ck = read_safetensors(path, Device());
    auto meta = [&](const std::string& key) {
      auto it = ck.metadata.find(key);
      DPE_TOOLS_CHECK(DataError, it != ck.metadata.end(),
                      "checkpoint '" << path << "' has no '" << key
                                     << "' entry: not written by dpe train");
      return it->second;
    };
    if (ck.metadata.count("format")) {
      DPE_TOOLS_CHECK(DataError, meta("format") == "dpe-train-1",
                      "checkpoint '" << path << "': metadata 'format' is " << shown(meta("format"))
                                     << ", not dpe-train-1");
    }
    DPE_TOOLS_CHECK(DataError, meta("model") == c.model,
                    "checkpoint '" << path << "' holds a " << shown(meta("model"))
                                   << " model, not " << c.model);
    // Checkpoints written before the optimizer was recorded are SGD's.
    const std::string saved_opt =
        ck.metadata.count("optimizer") ? ck.metadata.at("optimizer") : std::string("sgd");
    DPE_TOOLS_CHECK(DataError, saved_opt == c.optimizer,
                    "checkpoint '" << path << "' holds " << shown(saved_opt) << " state, not "
                                   << c.optimizer
                                   << (saved_opt == "sgd" || saved_opt == "adamw"
                                           ? " (pass --optimizer " + saved_opt + ")"
                                           : std::string()));
    if (language_model) {
      const int64_t context = metadata_int(path, "context", meta("context"), 1, int64_t{1} << 20);
      DPE_TOOLS_CHECK(DataError, context == c.context,
                      "checkpoint '" << path << "' was trained with --context " << context
                                     << ", not " << c.context
                                     << " (the data order depends on the windows)");
    }
    const int epoch =
        static_cast<int>(metadata_int(path, "epoch", meta("epoch"), 0, kMaxEpochs - 1));
    StateDict model_state, optim_state;
    for (auto& [k, v] : ck.tensors) {
      if (k.rfind("optimizer.", 0) == 0) optim_state.emplace_back(k.substr(10), v);
      else model_state.emplace_back(k, v);
    }
    model.load_state_dict(model_state);
    opt.load_state_dict(optim_state);
    return epoch;
  } catch (const DataError&) {
    throw;
  } catch (const Error& e) {
    const std::string msg = e.what();
    // The reader names the file; the state dicts' messages do not.
    throw DataError(msg.find(path) != std::string::npos ? msg
                                                          : "checkpoint '" + path + "': " + msg);
  }
}

// Bad DPE_HOST_*, RANK/WORLD_SIZE or DPE_RDZV_* values are usage errors, found before any work.
void check_environment(const TrainConfig& c) {
  try {
    Runtime::host_options_from_env();
    if (c.mode == "ddp") {
      distributed::dist_env_from_env();
      distributed::rendezvous_timeout(distributed::kDefaultTimeout);
      distributed::rendezvous_log_interval();
    }
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

}  // namespace

TrainResult train(const TrainConfig& config, FILE* out) {
  DPE_TOOLS_CHECK(UsageError,
                  config.mode == "single" || config.mode == "dp" || config.mode == "ddp",
                  "unknown mode '" << config.mode << "' (expected single, dp or ddp)");
  const TrainConfig c = resolve_defaults(config);
  DPE_TOOLS_CHECK(UsageError, c.epochs >= 1 && c.epochs <= kMaxEpochs,
                  "--epochs " << c.epochs << " must be between 1 and " << kMaxEpochs);
  DPE_TOOLS_CHECK(UsageError, c.batch_size >= 1, "--batch-size " << c.batch_size
                                                                  << " must be at least 1");
  DPE_TOOLS_CHECK(UsageError, c.mode != "dp" || (c.devices >= 1 && c.devices <= 64),
                  "--devices " << c.devices << " must be between 1 and 64");
  DPE_TOOLS_CHECK(UsageError, !c.resume || !c.checkpoint_dir.empty(),
                  "--resume needs --checkpoint-dir");
  DPE_TOOLS_CHECK(UsageError, !c.sync_bn || c.mode == "ddp", "--sync-bn needs --mode ddp");
  for (const auto& [name, value] : {std::pair<const char*, float>{"--lr", c.lr},
                                    {"--momentum", c.momentum},
                                    {"--weight-decay", c.weight_decay},
                                    {"--clip-grad-norm", c.clip_grad_norm}}) {
    DPE_TOOLS_CHECK(UsageError, std::isfinite(value) && value >= 0,
                    name << " " << value << " must be a finite number >= 0");
  }
  check_environment(c);

  // One process drives `devices` (dp) or one device (single, ddp: one device per process). In
  // dp, --devices wins over DPE_HOST_DEVICES and says so when they differ.
  Runtime& rt = Runtime::get();
  if (c.mode == "dp") {
    const char* env = std::getenv("DPE_HOST_DEVICES");
    if (env != nullptr && *env != '\0' && std::to_string(c.devices) != env) {
      std::fprintf(stderr, "train: --devices %d overrides DPE_HOST_DEVICES=%s\n", c.devices, env);
    }
    if (rt.host_device_count() < c.devices) rt.set_host_device_count(c.devices);
  }
  Distributed dist = c.mode == "ddp" ? Distributed::init() : Distributed::single();
  const Device home = Device();  // host:0 in this process
  const bool main = dist.rank == 0;
  if (main && !c.checkpoint_dir.empty()) remove_stale_temporaries(c.checkpoint_dir, out);

  // The gpt models' vocabulary comes from the tokenizer, so the data is loaded first. A data set
  // that cannot be read is a data error (exit 3), a missing --data-dir a usage error (exit 2).
  Data data;
  try {
    data = load_data(c, out, main);
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw DataError(e.what());
  }
  DPE_TOOLS_CHECK(DataError, data.train->size() > 0 && data.test->size() > 0,
                  "the " << (data.train->size() == 0 ? "training" : "test")
                         << " set is empty: nothing to "
                         << (data.train->size() == 0 ? "train on" : "evaluate"));
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
    start_epoch = resume(c, data.language_model, *model, *opt) + 1;
    if (main) {
      std::fprintf(out, "resumed from %s after epoch %d\n",
                   checkpoint_path(c.checkpoint_dir).c_str(), start_epoch - 1);
      trim_metrics(metrics_path(c.checkpoint_dir), start_epoch - 1, out);
    }
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
        // The line first: a kill between the two leaves a line without its checkpoint, which
        // resume drops, never a checkpoint without its line.
        append_metrics(metrics_path(c.checkpoint_dir), c, m, dist.world);
        save_safetensors(checkpoint_path(c.checkpoint_dir), state, so2);
      }
      dist.barrier();
    }
    result.epochs.push_back(m);
  }
  for (auto& [k, v] : model->state_dict()) result.final_state.emplace_back(k, v.to(home).clone());
  return result;
}

}  // namespace dpe::tools
