#include "tools/train_lib/trainer.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <vector>

#include <zlib.h>

#include "engine/autograd/engine.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/ops.h"
#include "engine/backend/host/host_devices.h"
#include "engine/core/error.h"
#include "engine/data/data_loader.h"
#include "engine/data/distributed_sampler.h"
#include "engine/data/fashion_mnist.h"
#include "engine/data/random_sampler.h"
#include "engine/data/text_corpus.h"
#include "engine/data/text_dataset.h"
#include "engine/data/text_files.h"
#include "engine/io/json_nesting.h"
#include "engine/data/token_cache.h"
#include "engine/device/runtime.h"
#include "engine/distributed/distributed.h"
#include "engine/distributed/fully_sharded_data_parallel.h"
#include "engine/distributed/zero_redundancy_optimizer.h"
#include "engine/io/safetensors.h"
#include "engine/optim/adam.h"
#include "engine/optim/clip_grad.h"
#include "engine/optim/sgd.h"
#include "engine/parallel/data_parallel.h"
#include "models/by_name.h"
#include "models/gpt.h"
#include "tools/common/activation_checkpointing.h"
#include "tools/common/devices.h"
#include "tools/common/exit_codes.h"
#include "tools/common/train_distributed.h"
#include "tools/train_lib/checkpoint_json.h"
#include "tools/train_lib/progress.h"
#include "tools/train_lib/toy_dataset.h"

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
  std::string text_source;         // language model: "language-model corpus", or --text's
};

// The documents a run learns from: the built-in corpus, or --text's files (text_files.h), the
// first --corpus-documents of them when given; `source` says which for the run's first lines.
std::vector<std::string> lm_documents(const TrainConfig& c, std::string* source) {
  std::vector<std::string> docs;
  if (c.text.empty()) {
    docs = load_language_model_corpus();
    *source = "language-model corpus";
  } else {
    TextFiles text;
    try {
      text = read_text_files(c.text, c.max_text_bytes);
    } catch (const TextLimitError& e) {
      throw DataError(std::string(e.what()) +
                      "; --max-text-bytes raises it (a run takes about 45 bytes of memory per "
                      "byte of text, docs/own_data.md)");
    }
    std::ostringstream s;
    s << "text " << c.text << " (" << text.files.size() << " file"
      << (text.files.size() == 1 ? "" : "s") << ", " << text.bytes << " bytes in "
      << text.documents.size() << " documents of at most " << text.target_bytes << " bytes)";
    *source = s.str();
    docs = std::move(text.documents);
  }
  if (c.corpus_documents > 0 && c.corpus_documents < static_cast<int64_t>(docs.size())) {
    docs.resize(static_cast<size_t>(c.corpus_documents));
  }
  if (!c.text.empty()) {
    // split_documents makes every 20th document validation text.
    DPE_CHECK(docs.size() >= 20,
              "--text " << c.text << ": " << corpus_bytes(docs) << " bytes of text make "
                        << docs.size() << " document(s), too few for a validation split (every "
                        << "20th document): give at least 20 files, or about 5 KB of text in "
                        << "one (a file is cut into documents of 256 bytes and up)");
  }
  return docs;
}

// The language model's windows: the tokenizer is trained once and cached (token_cache.h), the
// built-in corpus and --text each under their own name; every DDP rank loads the same files.
// The tokenizer's messages go to `out` on the main process. A text too small for --vocab-size
// pieces gets a smaller vocabulary, and the log says so.
Data load_lm_data(const TrainConfig& c, FILE* out, bool main) {
  Data d;
  const std::vector<std::string> docs = lm_documents(c, &d.text_source);
  Tokenizer::TrainOptions options;
  options.vocab_size = c.vocab_size;
  options.hard_vocab_limit = c.text.empty();
  std::ostringstream log;
  const TokenizedCorpus corpus =
      load_tokenized_corpus(docs, c.cache_dir.empty() ? default_cache_dir() : c.cache_dir, options,
                            &log, c.text.empty() ? kCorpusCacheName : kTextCacheName);
  if (main && !log.str().empty()) std::fprintf(out, "%s", log.str().c_str());
  d.classification = false;
  d.language_model = true;
  d.vocab_size = corpus.tokenizer.vocab_size();
  d.unigram_perplexity =
      unigram_perplexity(corpus.train_tokens, corpus.validation_tokens, d.vocab_size);
  const std::string whose = c.text.empty() ? "the corpus's" : "--text " + c.text + ":";
  auto windows = [&](const Tensor& tokens, const char* split) {
    DPE_CHECK(tokens.numel() > c.context,
              whose << " " << split << " split has " << tokens.numel()
                    << " tokens, too few for one window of --context " << c.context
                    << (c.text.empty() ? ""
                                       : ": give more text (the validation split is every 20th "
                                         "document) or a smaller --context"));
    return std::make_shared<TextDataset>(tokens, c.context, c.context);
  };
  d.train = std::make_shared<Prefix>(windows(corpus.train_tokens, "training"), c.train_samples);
  d.test =
      std::make_shared<Prefix>(windows(corpus.validation_tokens, "validation"), c.test_samples);
  return d;
}

Data load_data(const TrainConfig& c, FILE* out, bool main) {
  const models::ModelTask task = models::model_info(c.model).task;
  if (task == models::ModelTask::kLanguageModel) return load_lm_data(c, out, main);
  Data d;
  if (task == models::ModelTask::kRegression) {
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
  d.train =
      std::make_shared<Prefix>(std::make_shared<FashionMnist>(c.data_dir, true), c.train_samples);
  d.test =
      std::make_shared<Prefix>(std::make_shared<FashionMnist>(c.data_dir, false), c.test_samples);
  return d;
}

Tensor loss_of(const Tensor& out, const Tensor& target, const Data& data) {
  if (data.language_model) return models::lm_loss(out, target);
  return data.classification ? ops::cross_entropy(out, target) : ops::mse_loss(out, target);
}

std::unique_ptr<optim::Optimizer> make_plain_optimizer(const TrainConfig& c,
                                                       std::vector<Tensor> params, float lr) {
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

// --zero: each rank steps its shard with the plain optimizer, which the wrapper builds.
std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& c, std::vector<Tensor> params,
                                                 float lr, const Distributed& dist) {
  if (!c.zero) return make_plain_optimizer(c, std::move(params), lr);
  return std::make_unique<distributed::ZeroRedundancyOptimizer>(
      std::move(params),
      [c, lr](std::vector<Tensor> shard) { return make_plain_optimizer(c, std::move(shard), lr); },
      dist.group);
}

// One line of metrics.jsonl. It is appended before the epoch's manifest is renamed into place,
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
  if (m.global_step >= 0) j["global_step"] = m.global_step;
  // Written and fsynced before the manifest (itself fsynced) is renamed: in order on disk too.
  const std::string line = j.dump() + "\n";
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  DPE_CHECK(fd >= 0, "cannot append metrics to '" << path << "': " << std::strerror(errno));
  const bool written = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) &&
                       ::fsync(fd) == 0;
  const std::string why = std::strerror(errno);
  ::close(fd);
  DPE_CHECK(written, "cannot append metrics to '" << path << "': " << why);
}

// --- The checkpoint set (design note "checkpoint set" in trainer.h) ---

// The manifest's format, the set's file names and the JSON limits: checkpoint_json.h.
constexpr const char* kTrainingStateFormat = "dpe-train-2";
constexpr const char* kLegacyFormat = "dpe-train-1";
constexpr size_t kMaxJsonBytes = kMaxCheckpointJsonBytes;
constexpr int kMaxJsonDepth = kMaxCheckpointJsonDepth;

// The CRC-32 of a file (zlib's, the checksum of gzip and zip: any flipped bit, and any burst of
// up to 32, changes it), as 8 hex digits; read in 1 MiB pieces. Empty when it cannot be read.
std::string file_crc32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in.good()) return "";
  std::vector<char> buffer(1 << 20);
  uLong crc = crc32(0L, Z_NULL, 0);
  while (in.read(buffer.data(), static_cast<std::streamsize>(buffer.size())) || in.gcount() > 0) {
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buffer.data()),
                static_cast<uInt>(in.gcount()));
  }
  if (in.bad()) return "";
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08lx", static_cast<unsigned long>(crc & 0xffffffffUL));
  return hex;
}

// A file of the set as it is written, before the manifest names it: "model.safetensors.next.4".
std::string staged_name(const std::string& file, int64_t generation) {
  return file + ".next." + std::to_string(generation);
}

// `text` from `from` on is `n` characters (any count when n < 0, at least one) of `ok`.
bool all_chars(const std::string& text, size_t from, int n, int (*ok)(int)) {
  if (from > text.size() || (n >= 0 && text.size() - from != static_cast<size_t>(n)) ||
      text.size() == from) {
    return false;
  }
  for (size_t i = from; i < text.size(); ++i) {
    if (!ok(static_cast<unsigned char>(text[i]))) return false;
  }
  return true;
}

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

// `name` is `prefix` and mkstemp's 6 letters or digits.
bool temporary_of(const std::string& name, const std::string& prefix) {
  return starts_with(name, prefix + ".tmp.") && all_chars(name, prefix.size() + 5, 6, isalnum);
}

// The names killed checkpoint writes leave, and only those: the temporaries of the manifest and of
// the old single file (name.tmp.XXXXXX), staged files (model.safetensors.next.N) and theirs.
bool left_by_a_write(const std::string& name) {
  if (temporary_of(name, "checkpoint.safetensors") || temporary_of(name, "checkpoint.json")) {
    return true;
  }
  for (const char* file : kSetFiles) {
    const std::string prefix = std::string(file) + ".next.";
    if (!starts_with(name, prefix)) continue;
    const size_t dot = name.find('.', prefix.size());
    const std::string staged = name.substr(0, dot);
    if (!all_chars(staged, prefix.size(), -1, isdigit) || staged.size() > prefix.size() + 18) {
      return false;
    }
    return dot == std::string::npos || temporary_of(name, staged);
  }
  return false;
}

int64_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? st.st_size : -1;
}

// Best effort: the renames in `dir` survive a crash.
void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// Writes `text` into a new file `path` and fsyncs it; a failure removes the file.
void write_synced(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  DPE_CHECK(fd >= 0, "cannot write '" << path << "': " << std::strerror(errno));
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
            ::fsync(fd) == 0;
  const std::string why = std::strerror(errno);
  ok = ::close(fd) == 0 && ok;
  if (!ok) ::unlink(path.c_str());
  DPE_CHECK(ok, "cannot write '" << path << "': " << why);
}

// Replaces `path` by `text` atomically: a temporary path.tmp.XXXXXX, fsynced, renamed over it.
void write_atomically(const std::string& dir, const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  DPE_CHECK(fd >= 0,
            "cannot create a temporary file next to '" << path << "': " << std::strerror(errno));
  ::close(fd);
  ::chmod(tmp.c_str(), 0644);  // mkstemp creates 0600
  write_synced(tmp, text);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    DPE_THROW("cannot rename '" << tmp << "' to '" << path << "': " << why);
  }
  fsync_directory(dir);
}

// A JSON file of the set: a DataError naming it when it is missing, unreadable, over 1 MiB or
// not a JSON object.
nlohmann::json read_json_object(const std::string& path) {
  const int64_t size = file_size(path);
  DPE_TOOLS_CHECK(DataError, size >= 0, "checkpoint '" << path << "' is missing");
  DPE_TOOLS_CHECK(DataError, static_cast<uint64_t>(size) <= kMaxJsonBytes,
                  "checkpoint '" << path << "' is " << size << " bytes, over the " << kMaxJsonBytes
                                 << "-byte limit (not written by dpe train)");
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  DPE_TOOLS_CHECK(DataError, in.good() || in.eof(), "cannot read checkpoint '" << path << "'");
  return parse_checkpoint_json(path, text);
}

// The manifest's generation when it is readable and names one; 0 otherwise (recovery only:
// resume checks everything).
int64_t manifest_generation(const std::string& dir) {
  const std::string path = checkpoint_manifest_path(dir);
  const int64_t size = file_size(path);
  if (size < 0 || static_cast<uint64_t>(size) > kMaxJsonBytes) return 0;
  std::ifstream in(path, std::ios::binary);
  const std::string text(std::istreambuf_iterator<char>(in), {});
  if (json_nesting_depth(text, kMaxJsonDepth) > kMaxJsonDepth) return 0;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("generation") || !j["generation"].is_number_unsigned()) {
    return 0;
  }
  const uint64_t g = j["generation"].get<uint64_t>();
  return g >= 1 && g <= static_cast<uint64_t>(kMaxGeneration) ? static_cast<int64_t>(g) : 0;
}

// Run by the main process at start, before any process reads the checkpoint. A write killed
// after its manifest was renamed (the commit) but before its staged files were: those renames are
// finished, so the set is the manifest's. Then what killed writes left is removed: names of our
// patterns only (left_by_a_write). Returns the generation of the next checkpoint.
int64_t recover_checkpoint_dir(const std::string& dir, FILE* out) {
  const int64_t generation = manifest_generation(dir);
  if (generation > 0) {
    bool moved = false;
    for (const char* file : kSetFiles) {
      const std::string staged = dir + "/" + staged_name(file, generation);
      if (file_size(staged) < 0) continue;
      const std::string target = dir + "/" + file;
      DPE_CHECK(::rename(staged.c_str(), target.c_str()) == 0,
                "cannot rename '" << staged << "' to '" << target << "': " << std::strerror(errno));
      std::fprintf(out, "moved %s to %s, finishing checkpoint generation %lld (interrupted)\n",
                   staged.c_str(), target.c_str(), static_cast<long long>(generation));
      moved = true;
    }
    if (moved) fsync_directory(dir);
  }
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return generation + 1;
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d)) {
    if (left_by_a_write(e->d_name)) stale.push_back(dir + "/" + e->d_name);
  }
  ::closedir(d);
  for (const std::string& path : stale) {
    if (::unlink(path.c_str()) == 0) {
      std::fprintf(out, "removed %s, left by an interrupted checkpoint write\n", path.c_str());
    }
  }
  return generation + 1;
}

// Writes the set of one epoch (design note "checkpoint set"): the three files staged under
// their .next.N names and fsynced, then `before_commit` (the metrics line), then the manifest
// renamed into place (the commit), then the staged files renamed to their names. An old
// single-file checkpoint in `dir` is superseded and removed.
void write_checkpoint(const std::string& dir, int64_t generation, const StateDict& model_state,
                      const StateDict& optimizer_state,
                      const nlohmann::ordered_json& training_state,
                      const std::function<void()>& before_commit, FILE* out) {
  ::mkdir(dir.c_str(), 0755);
  auto staged = [&](const char* file) { return dir + "/" + staged_name(file, generation); };
  SafetensorsSaveOptions model_options;
  model_options.metadata = {{"format", "pt"}};  // as safetensors.torch.save_file writes
  save_safetensors(staged(kModelFile), model_state, model_options);
  SafetensorsSaveOptions optimizer_options;
  optimizer_options.metadata = {{"optimizer", training_state.value("optimizer", "")}};
  save_safetensors(staged(kOptimizerFile), optimizer_state, optimizer_options);
  write_synced(staged(kTrainingStateFile), training_state.dump(2) + "\n");
  nlohmann::ordered_json files = nlohmann::ordered_json::object();
  nlohmann::ordered_json checksums = nlohmann::ordered_json::object();
  for (const char* file : kSetFiles) {
    files[file] = file_size(staged(file));
    checksums[file] = file_crc32(staged(file));
  }
  before_commit();
  nlohmann::ordered_json manifest = {{"format", kManifestFormat},
                                     {"generation", generation},
                                     {"files", files},
                                     {"crc32", checksums}};
  write_atomically(dir, checkpoint_manifest_path(dir), manifest.dump(2) + "\n");
  for (const char* file : kSetFiles) {
    const std::string target = dir + "/" + file;
    DPE_CHECK(
        ::rename(staged(file).c_str(), target.c_str()) == 0,
        "cannot rename '" << staged(file) << "' to '" << target << "': " << std::strerror(errno));
  }
  fsync_directory(dir);
  const std::string legacy = legacy_checkpoint_path(dir);
  if (::unlink(legacy.c_str()) == 0) {
    std::fprintf(out, "removed %s, superseded by %s\n", legacy.c_str(),
                 checkpoint_manifest_path(dir).c_str());
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
    // A line nested too deep to parse safely is not one of ours: dropped as a torn line is.
    const nlohmann::json j = json_nesting_depth(line, kMaxJsonDepth) <= kMaxJsonDepth
                                 ? nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false)
                                 : nlohmann::json();
    const bool keep = j.is_object() && j.contains("epoch") && j["epoch"].is_number_integer() &&
                      j["epoch"].get<int64_t>() <= last_epoch;
    if (keep)
      kept += line + "\n";
    else
      ++dropped;
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
  if (last_epoch < 0) {
    std::fprintf(out,
                 "%s: dropped %d line(s): no checkpoint holds their epochs (a run stopped "
                 "between a line and its checkpoint)\n",
                 path.c_str(), dropped);
  } else {
    std::fprintf(out,
                 "%s: dropped %d line(s) after epoch %d, the checkpoint's (a run stopped between "
                 "the line and its checkpoint)\n",
                 path.c_str(), dropped, last_epoch);
  }
}

}  // namespace

std::string checkpoint_manifest_path(const std::string& dir) { return dir + "/checkpoint.json"; }
std::string model_checkpoint_path(const std::string& dir) { return dir + "/model.safetensors"; }
std::string optimizer_checkpoint_path(const std::string& dir) {
  return dir + "/optimizer.safetensors";
}
std::string training_state_path(const std::string& dir) { return dir + "/training_state.json"; }
std::string legacy_checkpoint_path(const std::string& dir) {
  return dir + "/checkpoint.safetensors";
}
std::string metrics_path(const std::string& dir) { return dir + "/metrics.jsonl"; }

namespace {

// The registered language models, "gpt-small, gpt2".
std::string language_model_list() {
  std::string names;
  for (const std::string& name : trainable_models()) {
    if (models::is_language_model(name)) names += (names.empty() ? "" : ", ") + name;
  }
  return names;
}

}  // namespace

std::vector<std::string> trainable_models() {
  std::vector<std::string> names;
  for (const std::string& name : models::model_names()) {
    const models::ModelInfo info = models::model_info(name);
    if (info.task != models::ModelTask::kImageClassification ||
        info.image_size == FashionMnist::kRows) {
      names.push_back(name);
    }
  }
  return names;
}

TrainConfig resolve_defaults(const TrainConfig& config) {
  TrainConfig c = config;
  const std::vector<std::string> models = trainable_models();
  if (std::find(models.begin(), models.end(), c.model) == models.end()) {
    std::string names;
    for (const std::string& name : models) names += (names.empty() ? "" : ", ") + name;
    DPE_TOOLS_CHECK(UsageError, false, "--model " << c.model << ": train takes one of " << names);
  }
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
    const int64_t block_size = models::model_info(c.model).block_size;
    DPE_TOOLS_CHECK(UsageError, c.context >= 0 && c.context <= block_size,
                    "--context " << c.context << " must be between 1 and " << c.model
                                 << "'s block size " << block_size);
    if (c.context == 0) c.context = block_size;
    DPE_TOOLS_CHECK(UsageError, c.vocab_size >= 2,
                    "--vocab-size " << c.vocab_size << " is too small");
    DPE_TOOLS_CHECK(UsageError, !c.sync_bn,
                    "--sync-bn: " << c.model << " has no BatchNorm to synchronise");
  } else {
    DPE_TOOLS_CHECK(UsageError, !c.activation_checkpointing,
                    "--activation-checkpointing: "
                        << c.model
                        << " has no unit to checkpoint (the gpt models' transformer blocks are "
                           "the only ones)");
    DPE_TOOLS_CHECK(UsageError, c.context == 0,
                    "--context applies to the gpt models only, not " << c.model);
    DPE_TOOLS_CHECK(UsageError, c.text.empty(),
                    "--text is the language models' data (" << language_model_list() << "), not "
                                                            << c.model << "'s");
  }
  return c;
}

namespace {

// Where a checkpoint leaves the run: the epoch it holds and the optimizer steps taken up to it
// (-1: unknown, a checkpoint written before they were counted).
struct Position {
  int epoch = 0;
  int64_t global_step = -1;
};

// The most optimizer steps a checkpoint may record (metadata_int reads up to 18 digits).
constexpr int64_t kMaxGlobalStep = 999999999999999999;

// Checks a checkpoint's training metadata against the run and returns where it leaves the run.
// `path` is the file the values come from (messages name it and the key). The single-file layout
// (`legacy`) may lack 'format' and 'optimizer' (early checkpoints: SGD's); checkpoints written
// before the steps were counted lack 'global_step', which only --max-steps needs.
Position check_training_state(const std::string& path, const SafetensorsMetadata& metadata,
                              const TrainConfig& c, bool language_model, bool legacy) {
  auto meta = [&](const std::string& key) {
    auto it = metadata.find(key);
    DPE_TOOLS_CHECK(
        DataError, it != metadata.end(),
        "checkpoint '" << path << "' has no '" << key << "' entry: not written by dpe train");
    return it->second;
  };
  const std::string format = legacy ? kLegacyFormat : kTrainingStateFormat;
  if (!legacy || metadata.count("format")) {
    DPE_TOOLS_CHECK(DataError, meta("format") == format,
                    "checkpoint '" << path << "': metadata 'format' is " << shown(meta("format"))
                                   << ", not " << format);
  }
  DPE_TOOLS_CHECK(
      DataError, meta("model") == c.model,
      "checkpoint '" << path << "' holds a " << shown(meta("model")) << " model, not " << c.model);
  const std::string saved_opt =
      legacy && !metadata.count("optimizer") ? std::string("sgd") : meta("optimizer");
  DPE_TOOLS_CHECK(DataError, saved_opt == c.optimizer,
                  "checkpoint '" << path << "' holds " << shown(saved_opt) << " state, not "
                                 << c.optimizer
                                 << (saved_opt == "sgd" || saved_opt == "adamw"
                                         ? " (pass --optimizer " + saved_opt + ")"
                                         : std::string()));
  if (language_model) {
    const int64_t context = metadata_int(path, "context", meta("context"), 1, int64_t{1} << 20);
    DPE_TOOLS_CHECK(DataError, context == c.context,
                    "checkpoint '" << path << "' was trained with --context " << context << ", not "
                                   << c.context << " (the data order depends on the windows)");
  }
  if (!legacy) {
    // The samplers' order is a function of the seed and the epoch: the position to resume from.
    const std::string& s = meta("seed");
    bool digits = !s.empty() && s.size() <= 20;
    for (char ch : s) digits = digits && ch >= '0' && ch <= '9';
    const unsigned long long seed = digits ? std::strtoull(s.c_str(), nullptr, 10) : 0;
    DPE_TOOLS_CHECK(DataError, digits && std::to_string(seed) == s,
                    "checkpoint '" << path << "': metadata 'seed' is " << shown(s)
                                   << ", not a whole number from 0 to 2^64-1");
    DPE_TOOLS_CHECK(DataError, seed == c.seed,
                    "checkpoint '" << path << "' was trained with --seed " << seed << ", not "
                                   << c.seed << " (the data order depends on it)");
  }
  Position at;
  at.epoch = static_cast<int>(metadata_int(path, "epoch", meta("epoch"), 0, kMaxEpochs - 1));
  if (metadata.count("global_step")) {
    at.global_step = metadata_int(path, "global_step", meta("global_step"), 0, kMaxGlobalStep);
  }
  DPE_TOOLS_CHECK(DataError, at.global_step >= 0 || c.max_steps == 0,
                  "checkpoint '" << path
                                 << "' has no 'global_step' entry (it was written before the "
                                    "run's steps were counted), so --max-steps cannot count the "
                                    "steps before it; resume without --max-steps");
  return at;
}

// Runs `load`; a plain dpe::Error from it (the reader's, the state dicts') becomes a DataError
// naming `path`; out of memory stays what it is.
template <typename F>
auto naming(const std::string& path, F load) {
  try {
    return load();
  } catch (const DataError&) {
    throw;
  } catch (const OutOfMemoryError&) {
    throw;
  } catch (const Error& e) {
    const std::string msg = e.what();
    throw DataError(msg.find(path) != std::string::npos ? msg
                                                        : "checkpoint '" + path + "': " + msg);
  }
}

// How a run's state goes into and out of checkpoints: the bare model's and the optimizer's state
// dicts, or under fsdp the full ones that FSDP's collectives assemble from every rank's shards
// (the files are then those of the unwrapped model).
struct StateIo {
  bool collective = false;  // every rank calls model_state and optimizer_state
  std::function<StateDict()> model_state, optimizer_state;
  std::function<void(const StateDict&)> load_model, load_optimizer;
};

StateIo state_io(Module& model, Module& net, optim::Optimizer& opt) {
  if (auto* fsdp = dynamic_cast<FullyShardedDataParallel*>(&net)) {
    return {true, [fsdp] { return fsdp->full_state_dict(); },
            [fsdp, &opt] { return fsdp->full_optim_state_dict(opt.state_dict()); },
            [fsdp](const StateDict& s) { fsdp->load_full_state_dict(s); },
            [fsdp, &opt](const StateDict& s) { opt.load_state_dict(fsdp->shard_optim_state_dict(s)); }};
  }
  return {false, [&model] { return model.state_dict(); }, [&opt] { return opt.state_dict(); },
          [&model](const StateDict& s) { model.load_state_dict(s); },
          [&opt](const StateDict& s) { opt.load_state_dict(s); }};
}

// The single-file layout (checkpoint.safetensors: the model's tensors, the optimizer's prefixed
// "optimizer.", training metadata), read when a directory has no manifest.
Position resume_legacy(const TrainConfig& c, bool language_model, const StateIo& io) {
  const std::string path = legacy_checkpoint_path(c.checkpoint_dir);
  return naming(path, [&] {
    SafetensorsContents ck = read_safetensors(path, Device());
    const Position at = check_training_state(path, ck.metadata, c, language_model, /*legacy=*/true);
    StateDict model_state, optim_state;
    for (auto& [k, v] : ck.tensors) {
      if (k.rfind("optimizer.", 0) == 0)
        optim_state.emplace_back(k.substr(10), v);
      else
        model_state.emplace_back(k, v);
    }
    io.load_model(model_state);
    io.load_optimizer(optim_state);
    return at;
  });
}

// The set named by checkpoint.json (design note "checkpoint set"): the manifest first (format,
// generation, each file's size), then training_state.json (of the manifest's generation), then
// the two state dicts. Every value is checked before use; messages name the file and the key.
Position resume_set(const TrainConfig& c, bool language_model, const StateIo& io) {
  const std::string& dir = c.checkpoint_dir;
  const std::string manifest_path = checkpoint_manifest_path(dir);
  const CheckpointManifest manifest = parse_manifest(manifest_path, read_json_object(manifest_path));
  const int64_t generation = manifest.generation;
  for (const char* file : kSetFiles) {
    const std::string path = dir + "/" + file;
    const int64_t size = file_size(path);
    const uint64_t recorded = manifest.sizes.at(file);
    DPE_TOOLS_CHECK(DataError, size >= 0 && static_cast<uint64_t>(size) == recorded,
                    "checkpoint '" << path << "' "
                                   << (size < 0 ? std::string("is missing")
                                                : "is " + std::to_string(size) + " bytes")
                                   << ", but '" << manifest_path << "' (metadata 'files') records "
                                   << recorded << " bytes (truncated, or replaced since)");
  }
  // The files' CRC-32, which a manifest written before it was recorded does not have: a flipped
  // bit would otherwise be trained on.
  for (const auto& [file, expected] : manifest.crc32) {
    const std::string path = dir + "/" + file;
    const std::string actual = file_crc32(path);
    DPE_TOOLS_CHECK(DataError, actual == expected,
                    "checkpoint '" << path << "' has CRC-32 " << actual << ", but '"
                                   << manifest_path << "' (metadata 'crc32') records "
                                   << shown(expected)
                                   << " (the file changed since it was written: a flipped bit, "
                                      "a disk error, or another writer)");
  }
  const std::string state_path = training_state_path(dir);
  const SafetensorsMetadata state = as_metadata(read_json_object(state_path));
  const auto g = state.find("generation");
  DPE_TOOLS_CHECK(
      DataError, g != state.end(),
      "checkpoint '" << state_path << "' has no 'generation' entry: not written by dpe train");
  DPE_TOOLS_CHECK(
      DataError, metadata_int(state_path, "generation", g->second, 1, kMaxGeneration) == generation,
      "checkpoint '" << state_path << "': metadata 'generation' is " << g->second << ", but '"
                     << manifest_path << "' names generation " << generation
                     << " (the files are not one set)");
  const Position at = check_training_state(state_path, state, c, language_model, /*legacy=*/false);
  const std::string model_path = model_checkpoint_path(dir);
  naming(model_path, [&] {
    io.load_model(read_safetensors(model_path, Device()).tensors);
    return 0;
  });
  const std::string optimizer_path = optimizer_checkpoint_path(dir);
  naming(optimizer_path, [&] {
    io.load_optimizer(read_safetensors(optimizer_path, Device()).tensors);
    return 0;
  });
  return at;
}

// Whether `dir` holds a checkpoint to resume from (a manifest, or the older single file); read
// after recover_checkpoints, so every rank sees what rank 0 left.
bool has_checkpoint(const std::string& dir) {
  return ::access(checkpoint_manifest_path(dir).c_str(), F_OK) == 0 ||
         ::access(legacy_checkpoint_path(dir).c_str(), F_OK) == 0;
}

// Loads the checkpoint in c.checkpoint_dir into `model` and `opt`; returns where it leaves the run
// and sets `*from` to the file it was found by. A checkpoint that is missing, corrupt or does not
// fit the command line is a DataError naming the file (and the key).
Position resume(const TrainConfig& c, bool language_model, const StateIo& io, std::string* from) {
  const std::string manifest = checkpoint_manifest_path(c.checkpoint_dir);
  const std::string legacy = legacy_checkpoint_path(c.checkpoint_dir);
  if (::access(manifest.c_str(), F_OK) != 0 && ::access(legacy.c_str(), F_OK) == 0) {
    *from = legacy;
    return resume_legacy(c, language_model, io);
  }
  DPE_TOOLS_CHECK(DataError, ::access(manifest.c_str(), F_OK) == 0,
                  "no checkpoint to resume from: '" << manifest << "' does not exist (nor '"
                                                    << legacy
                                                    << "', the older single-file layout)");
  *from = manifest;
  return resume_set(c, language_model, io);
}

// The ddp backend --backend auto stands for: NCCL on CUDA devices (as PyTorch's choice for GPUs),
// else MPI when mpirun started the job, else Gloo.
std::string ddp_backend(const TrainConfig& c) {
  if (c.backend != "auto") return c.backend;
  if (c.device == "cuda") return "nccl";
  return std::getenv("OMPI_COMM_WORLD_RANK") != nullptr ? "mpi" : "gloo";
}

// ddp and fsdp run one process per device, in a job of ranks.
bool ranked(const TrainConfig& c) { return c.mode == "ddp" || c.mode == "fsdp"; }

// Backends that cannot serve the device type are usage errors, found from the flags alone before
// the environment is read.
void check_backend(const TrainConfig& c) {
  const DeviceType type = parse_device_type(c.device);
  const std::string backend = ddp_backend(c);
  DPE_TOOLS_CHECK(UsageError, !ranked(c) || type == DeviceType::kCuda || backend != "nccl",
                  "--backend nccl needs --device cuda (NCCL reduces CUDA tensors)");
  DPE_TOOLS_CHECK(UsageError, !ranked(c) || type == DeviceType::kHost || backend == "nccl",
                  "--device cuda with --mode " << c.mode << " needs --backend nccl (or auto), not " << backend);
}

// --device cuda on a build or machine without (enough) CUDA devices is a usage error found before
// any work.
void check_device(const TrainConfig& c) {
  const DeviceType type = parse_device_type(c.device);
  if (type != DeviceType::kCuda) return;
  if (c.mode == "dp") {
    tool_devices(type, c.devices);
  } else if (ranked(c)) {
    tool_cuda_device(distributed::get_local_rank());
  } else {
    tool_devices(type, 1);
  }
}

// What --mode ddp needs from its environment, as init_process_group reads it: the ranks (RANK and
// WORLD_SIZE, or srun's or mpirun's variables) and, for the env:// rendezvous of gloo and nccl,
// MASTER_ADDR and a MASTER_PORT from 1 to 65535. MPI numbers the ranks itself, so --backend mpi
// in a job numbered by another launcher (tools/dpe-launch, torchrun: RANK without mpirun's
// variables) would see a world of one. Each is a UsageError naming the variables.
void check_ddp_environment(const TrainConfig& c) {
  const std::optional<distributed::DistEnv> env = distributed::dist_env_from_env();
  if (ddp_backend(c) == "mpi") {
    DPE_TOOLS_CHECK(UsageError,
                    !env || env->source != "RANK" || env->world_size == 1 ||
                        std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr,
                    "--backend mpi: the environment says rank "
                        << (env ? env->rank : 0) << " of " << (env ? env->world_size : 1)
                        << " (RANK and WORLD_SIZE, as tools/dpe-launch and torchrun set them), "
                           "but MPI numbers a job's ranks only under mpirun: start it with "
                           "mpirun -np "
                        << (env ? env->world_size : 1)
                        << ", or use --backend gloo with the launcher");
    return;
  }
  DPE_TOOLS_CHECK(UsageError, env.has_value(),
                  "--mode ddp needs RANK and WORLD_SIZE (tools/dpe-launch sets them, as srun and "
                  "mpirun set theirs): start it with tools/dpe-launch --nproc-per-node N");
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  DPE_TOOLS_CHECK(UsageError, addr != nullptr && *addr != '\0' && port != nullptr,
                  "--mode ddp with --backend " << ddp_backend(c)
                                               << " meets its ranks at MASTER_ADDR:MASTER_PORT "
                                                  "(missing: "
                                               << (addr == nullptr || *addr == '\0'
                                                       ? "MASTER_ADDR"
                                                       : "")
                                               << (port == nullptr ? " MASTER_PORT" : "")
                                               << "); tools/dpe-launch sets them");
  const std::string p = port;
  bool digits = !p.empty() && p.size() <= 5;
  for (char ch : p) digits = digits && ch >= '0' && ch <= '9';
  const long value = digits ? std::strtol(p.c_str(), nullptr, 10) : 0;
  DPE_TOOLS_CHECK(UsageError, value >= 1 && value <= 65535,
                  "MASTER_PORT=" << shown(p) << " is not a port (a number from 1 to 65535)");
}

// Bad DPE_HOST_*, RANK/WORLD_SIZE, MASTER_* or DPE_RDZV_* values are usage errors, found before
// any work.
void check_environment(const TrainConfig& c) {
  try {
    host_options_from_env();
    if (ranked(c)) {
      check_ddp_environment(c);
      distributed::rendezvous_timeout(distributed::kDefaultTimeout);
      distributed::rendezvous_log_interval();
    }
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

// A run without --resume into a --checkpoint-dir that holds a run (its checkpoint, either layout,
// or its metrics.jsonl) would append its metrics to that run's and replace its checkpoint: a
// UsageError naming the directory and the files found, before anything is written. --resume auto
// goes on from such a run (or drops its lines when it has no checkpoint yet).
void check_fresh_checkpoint_dir(const TrainConfig& c) {
  if (c.resume || c.resume_auto || c.checkpoint_dir.empty()) return;
  const std::string& dir = c.checkpoint_dir;
  std::string found;
  for (const std::string& path :
       {checkpoint_manifest_path(dir), legacy_checkpoint_path(dir), model_checkpoint_path(dir),
        optimizer_checkpoint_path(dir), training_state_path(dir), metrics_path(dir)}) {
    if (::access(path.c_str(), F_OK) == 0) {
      found += (found.empty() ? "" : ", ") + path.substr(path.find_last_of('/') + 1);
    }
  }
  DPE_TOOLS_CHECK(UsageError, found.empty(),
                  "--checkpoint-dir " << dir << " already holds a run (" << found
                                      << "): pass --resume to continue it, or choose another "
                                         "directory (nothing was written)");
}

// `config` with the model's defaults filled in, once every flag value, flag combination and DPE_*
// environment value is found usable: a UsageError otherwise, before any work.
TrainConfig checked_config(const TrainConfig& config) {
  DPE_TOOLS_CHECK(UsageError,
                  config.mode == "single" || config.mode == "dp" || config.mode == "ddp" ||
                      config.mode == "fsdp",
                  "unknown mode '" << config.mode << "' (expected single, dp, ddp or fsdp)");
  const TrainConfig c = resolve_defaults(config);
  DPE_TOOLS_CHECK(UsageError, c.epochs >= 1 && c.epochs <= kMaxEpochs,
                  "--epochs " << c.epochs << " must be between 1 and " << kMaxEpochs);
  DPE_TOOLS_CHECK(UsageError, c.batch_size >= 1,
                  "--batch-size " << c.batch_size << " must be at least 1");
  DPE_TOOLS_CHECK(UsageError, c.mode != "dp" || (c.devices >= 1 && c.devices <= 64),
                  "--devices " << c.devices << " must be between 1 and 64");
  DPE_TOOLS_CHECK(UsageError, !(c.resume || c.resume_auto) || !c.checkpoint_dir.empty(),
                  "--resume needs --checkpoint-dir");
  DPE_TOOLS_CHECK(UsageError, c.max_steps >= 0 && c.max_steps_per_epoch >= 0,
                  "--max-steps and --max-steps-per-epoch must be at least 0");
  DPE_TOOLS_CHECK(UsageError, !c.sync_bn || c.mode == "ddp", "--sync-bn needs --mode ddp");
  DPE_TOOLS_CHECK(UsageError, !c.zero || c.mode == "ddp", "--zero needs --mode ddp");
  DPE_TOOLS_CHECK(UsageError, c.sharding == "full" || c.sharding == "grad-op",
                  "--sharding " << shown(c.sharding) << " must be full or grad-op");
  DPE_TOOLS_CHECK(UsageError, std::isfinite(c.timeout) && c.timeout >= 0.001 && c.timeout <= 1e8,
                  "--timeout " << c.timeout << " must be a number of seconds from 0.001 to 1e8");
  for (const auto& [name, value] : {std::pair<const char*, float>{"--lr", c.lr},
                                    {"--momentum", c.momentum},
                                    {"--weight-decay", c.weight_decay},
                                    {"--clip-grad-norm", c.clip_grad_norm}}) {
    DPE_TOOLS_CHECK(UsageError, std::isfinite(value) && value >= 0,
                    name << " " << value << " must be a finite number >= 0");
  }
  check_backend(c);  // from the flags alone, before the environment is read
  check_environment(c);
  check_device(c);
  check_fresh_checkpoint_dir(c);
  return c;
}

// One process drives `devices` (dp) or one device (single, ddp: one device per process). In dp,
// --devices wins over DPE_HOST_DEVICES and says so when they differ.
void set_dp_device_count(const TrainConfig& c) {
  Runtime& rt = Runtime::get();  // in every mode: the runtime exists before the process group
  if (c.mode != "dp" || c.device != "host") return;
  const char* env = std::getenv("DPE_HOST_DEVICES");
  if (env != nullptr && *env != '\0' && std::to_string(c.devices) != env) {
    std::fprintf(stderr, "train: --devices %d overrides DPE_HOST_DEVICES=%s\n", c.devices, env);
  }
  if (rt.device_count(DeviceType::kHost) < c.devices) set_host_device_count(c.devices);
}

// The generation of the next checkpoint set. The main process first finishes a checkpoint whose
// commit a kill interrupted and removes what killed writes left, before any process reads it.
int64_t recover_checkpoints(const TrainConfig& c, const Distributed& dist, FILE* out) {
  int64_t generation = 1;
  if (!c.checkpoint_dir.empty()) {
    if (dist.rank == 0) generation = recover_checkpoint_dir(c.checkpoint_dir, out);
    dist.barrier();
  }
  return generation;
}

// The run's data, neither split empty. A data set that cannot be read is a data error (exit 3),
// a missing --data-dir a usage error (exit 2), out of memory a failed run (exit 1).
Data load_checked_data(const TrainConfig& c, FILE* out, bool main) {
  Data data;
  try {
    data = load_data(c, out, main);
  } catch (const UsageError&) {
    throw;
  } catch (const OutOfMemoryError&) {
    throw;  // the machine is too small for the data: a failed run, not a data error
  } catch (const Error& e) {
    throw DataError(e.what());
  }
  DPE_TOOLS_CHECK(DataError, data.train->size() > 0 && data.test->size() > 0,
                  "the " << (data.train->size() == 0 ? "training" : "test")
                         << " set is empty: nothing to "
                         << (data.train->size() == 0 ? "train on" : "evaluate"));
  return data;
}

// The bare model, seeded by --seed, its BatchNorms synchronised across ranks with --sync-bn, its
// gpt blocks checkpointed with --activation-checkpointing. The
// gpt models' vocabulary comes from the tokenizer, hence from `data`.
std::shared_ptr<Module> build_model(const TrainConfig& c, const Data& data,
                                    const Distributed& dist) {
  Generator gen(c.seed);
  models::ModelOptions mo;
  mo.vocab_size = data.vocab_size;
  // The resnets are torchvision's, 3 channels; Fashion-MNIST's images [N, 1, 28, 28] have one.
  if (models::model_info(c.model).task == models::ModelTask::kImageClassification) {
    mo.in_channels = 1;
  }
  std::shared_ptr<Module> model = models::make_model(c.model, gen, mo);
  if (c.sync_bn) model = dist.convert_sync_batchnorm(model);
  if (c.activation_checkpointing) apply_activation_checkpointing_flag(c.model, *model);
  return model;
}

// The device a single or ddp process computes on, where its batches go before forward (host:0, or
// cuda:0 / cuda:LOCAL_RANK); none in dp, whose scatter sends each device its chunk.
std::optional<Device> compute_device(const TrainConfig& c) {
  if (c.mode == "dp") return std::nullopt;
  if (c.device != "cuda") return Device();
  return Device(DeviceType::kCuda, ranked(c) ? distributed::get_local_rank() : 0);
}

// What forward runs for the mode: `model` itself (single), DataParallel over --devices, or DDP;
// the model is on its compute device (dp: device_ids[0]) first.
std::shared_ptr<Module> wrap_for_mode(const TrainConfig& c, std::shared_ptr<Module> model,
                                      const Distributed& dist) {
  if (c.mode == "dp") {
    const std::vector<Device> devices = tool_devices(parse_device_type(c.device), c.devices);
    model->to(devices[0]);
    return std::make_shared<DataParallel>(model, devices);
  }
  model->to(*compute_device(c));
  if (c.mode == "ddp") return dist.wrap(model, c.gradient_as_bucket_view);
  if (c.mode == "fsdp") {
    DPE_CHECK(dist.group != nullptr, "--mode fsdp needs a process group (run under //tools:launch)");
    FullyShardedDataParallelOptions o;
    o.sharding_strategy =
        c.sharding == "full" ? ShardingStrategy::kFullShard : ShardingStrategy::kShardGradOp;
    o.auto_wrap_policy = models::is_gpt_block;
    return std::make_shared<FullyShardedDataParallel>(model, dist.group, o);
  }
  return model;
}

// Loads --checkpoint-dir's checkpoint into `model` and `opt` and returns where it leaves the run;
// the main process says where it resumed from and trims metrics.jsonl to match.
Position resume_training(const TrainConfig& c, const Data& data, const StateIo& io, bool main,
                         FILE* out) {
  std::string from;
  const Position at = resume(c, data.language_model, io, &from);
  if (main) {
    std::fprintf(out, "resumed from %s after epoch %d\n", from.c_str(), at.epoch);
    trim_metrics(metrics_path(c.checkpoint_dir), at.epoch, out);
  }
  return at;
}

// The epochs to train, from `start`, and each one's most steps. Without --max-steps: to --epochs,
// each of at most --max-steps-per-epoch steps (0: the whole pass). With it (Hugging Face's
// max_steps, which overrides the epochs): as many epochs as the steps still to take need after
// `done`, the last one cut short.
struct Plan {
  int end_epoch = 0;            // one past the last epoch to train
  int64_t steps_per_epoch = 0;  // a whole epoch's steps (a pass, or --max-steps-per-epoch)
};

Plan plan_epochs(const TrainConfig& c, const DataLoader& loader, int start, int64_t done) {
  Plan p;
  p.steps_per_epoch = std::max<int64_t>(1, loader.size());
  if (c.max_steps_per_epoch > 0)
    p.steps_per_epoch = std::min(p.steps_per_epoch, c.max_steps_per_epoch);
  if (c.max_steps == 0) {
    p.end_epoch = std::max(start, c.epochs);
    return p;
  }
  const int64_t left = std::max<int64_t>(0, c.max_steps - done);
  const int64_t epochs = (left + p.steps_per_epoch - 1) / p.steps_per_epoch;
  DPE_TOOLS_CHECK(UsageError, epochs <= kMaxEpochs - start,
                  "--max-steps " << c.max_steps << " needs " << epochs << " more epochs of "
                                 << p.steps_per_epoch << " steps after epoch " << start
                                 << ", over the limit of " << kMaxEpochs << " epochs");
  p.end_epoch = start + static_cast<int>(epochs);
  return p;
}

// The training set's order: each rank's shard in ddp, the whole set shuffled otherwise; a
// function of --seed and the epoch.
std::shared_ptr<Sampler> make_train_sampler(const TrainConfig& c, const Data& data,
                                            const Distributed& dist) {
  if (ranked(c)) {
    return std::make_shared<DistributedSampler>(data.train->size(), dist.world, dist.rank, true,
                                                c.seed);
  }
  return std::make_shared<RandomSampler>(data.train->size(), c.seed);
}

// The test set in order, 1000 images (or --batch-size windows) a batch; each rank's shard in ddp.
DataLoaderOptions test_loader_options(const TrainConfig& c, const Data& data,
                                      const Distributed& dist) {
  DataLoaderOptions eo;
  eo.batch_size = data.language_model ? c.batch_size : 1000;
  if (ranked(c)) {
    eo.sampler =
        std::make_shared<DistributedSampler>(data.test->size(), dist.world, dist.rank, false, 0);
  }
  return eo;
}

// The main process's first lines: the run's configuration (and the corpus and model for gpt).
void print_run(const TrainConfig& c, const Data& data, const Module& model, const Distributed& dist,
               float lr, FILE* out) {
  const std::string length = c.max_steps > 0 ? std::to_string(c.max_steps) + " steps in all"
                                             : std::to_string(c.epochs) + " epoch(s)";
  std::fprintf(out, "training %s, mode %s (%d %s), batch %lld %s, %s%s lr %g, %s\n",
               c.model.c_str(), c.mode.c_str(), c.mode == "dp" ? c.devices : dist.world,
               c.mode == "dp" ? "devices" : "process(es)", static_cast<long long>(c.batch_size),
               ranked(c) ? "per process" : "global", c.zero ? "ZeRO-1 " : "",
               c.optimizer.c_str(), lr, length.c_str());
  if (data.language_model) {
    int64_t parameters = 0;
    for (const auto& [name, p] : model.named_parameters()) parameters += p.numel();
    std::fprintf(out,
                 "%s: %lld training / %lld validation windows of %lld tokens; "
                 "%s, %lld parameters; clip_grad_norm %g\n",
                 data.text_source.c_str(), static_cast<long long>(data.train->size()),
                 static_cast<long long>(data.test->size()), static_cast<long long>(c.context),
                 model.repr().c_str(), static_cast<long long>(parameters), c.clip_grad_norm);
  }
}

// What an epoch works on; train() owns each of them.
struct Run {
  const TrainConfig& c;
  std::optional<Device> input_device;  // where batches go before forward (compute_device)
  const Distributed& dist;
  const Data& data;
  Module& model;  // the bare model: its parameters are clipped, stepped and saved
  Module& net;    // what forward runs: the model, DataParallel, DDP or FSDP
  optim::Optimizer& opt;
  const StateIo& io;
  bool main;  // rank 0: prints, writes checkpoints
  FILE* out;
};

// `input` where the run's forward takes it (a batch is loaded on host:0), images channels last
// when the run asks.
Tensor on_input_device(const Run& run, const Tensor& input) {
  if (run.c.channels_last && input.dim() == 4) {
    return input.to(run.input_device.value_or(input.device()), MemoryFormat::kChannelsLast);
  }
  return run.input_device && input.device() != *run.input_device ? input.to(*run.input_device)
                                                                 : input;
}

// One pass over the training set (at most `max_batches` of it) with a progress line on the main
// process; returns the epoch's steps, mean training loss and throughput. A non-finite loss stops
// the run.
EpochMetrics train_epoch(const Run& run, int epoch, Sampler& sampler, DataLoader& loader,
                         int64_t max_batches) {
  const TrainConfig& c = run.c;
  run.net.train();
  sampler.set_epoch(epoch);
  const int64_t batches = std::min(loader.size(), max_batches);
  Progress progress("epoch " + std::to_string(epoch), batches, run.out, run.main && c.progress);
  int64_t step = 0;
  while (step < batches) {
    std::optional<Batch> b = loader.next();
    if (!b) break;
    Tensor output = run.net.forward(on_input_device(run, b->input));
    Tensor loss = loss_of(output, b->target.to(output.device()), run.data);
    DPE_CHECK(ops::all_finite(loss), "non-finite loss ("
                                         << loss.item() << ") at epoch " << epoch << ", step "
                                         << step << "; stopping. The last good checkpoint"
                                         << (c.checkpoint_dir.empty()
                                                 ? " (none: no --checkpoint-dir)"
                                                 : " in " + c.checkpoint_dir + " is intact"));
    run.opt.zero_grad();
    backward(loss);
    // DataParallel: the gradients were reduced onto device 0's parameters, clipped there; DDP:
    // each rank clips its all-reduced (identical) gradients.
    // FSDP: the norm over every rank's shards.
    if (c.clip_grad_norm > 0) {
      if (auto* fsdp = dynamic_cast<FullyShardedDataParallel*>(&run.net)) {
        fsdp->clip_grad_norm_(c.clip_grad_norm);
      } else {
        optim::clip_grad_norm_(run.model.parameters(), c.clip_grad_norm);
      }
    }
    run.opt.step();
    // The line shows the whole job: every rank's samples and the loss averaged over ranks.
    progress.update(b->input.size(0) * run.dist.world, run.dist.reduce_mean(loss.item()));
    ++step;
  }
  // Drain the rest of the pass when it was cut short, so the next epoch starts afresh.
  while (loader.next()) {
  }
  EpochMetrics m;
  m.epoch = epoch;
  m.steps = step;
  m.train_loss = progress.mean_loss();
  m.samples_per_second = progress.finish();
  if (run.data.language_model) m.tokens_per_second = m.samples_per_second * c.context;
  return m;
}

// Test: loss and accuracy (perplexity for gpt) over the whole test set, every rank's shard
// reduced, into `m`.
void evaluate(const Run& run, DataLoader& test_loader, EpochMetrics& m) {
  const Data& data = run.data;
  run.net.eval();
  double loss_sum = 0, correct = 0, count = 0;
  {
    NoGradGuard no_grad;
    for (Batch& tb : test_loader) {
      Tensor o = run.net.forward(on_input_device(run, tb.input));
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
  const std::vector<double> sums = run.dist.sum({loss_sum, correct, count});
  m.test_loss = sums[0] / std::max(sums[2], 1.0);
  if (data.classification) m.test_accuracy = sums[1] / std::max(sums[2], 1.0);
  if (data.language_model) {
    // Every window has `context` targets, so the mean over windows is the mean over tokens.
    m.perplexity = std::exp(m.test_loss);
    m.unigram_perplexity = data.unigram_perplexity;
  }
}

void print_epoch(const EpochMetrics& m, bool language_model, FILE* out) {
  if (language_model) {
    std::fprintf(out,
                 "epoch %d: train loss %.4f, val loss %.4f, val perplexity %.1f (unigram "
                 "baseline %.1f), %.0f tokens/s\n",
                 m.epoch, m.train_loss, m.test_loss, m.perplexity, m.unigram_perplexity,
                 m.tokens_per_second);
  } else {
    std::fprintf(out, "epoch %d: train loss %.4f, test loss %.4f", m.epoch, m.train_loss,
                 m.test_loss);
    if (m.test_accuracy >= 0) std::fprintf(out, ", test accuracy %.2f%%", 100 * m.test_accuracy);
    std::fprintf(out, ", %.0f samples/s\n", m.samples_per_second);
  }
}

// The main process commits the epoch's checkpoint set (generation `*generation`, then the next)
// with its metrics line; every rank waits for it.
void save_checkpoint(const Run& run, const EpochMetrics& m, int64_t* generation) {
  const TrainConfig& c = run.c;
  // --zero: every rank sends its shard's state to rank 0, which saves it as the plain one.
  if (auto* zero = dynamic_cast<distributed::ZeroRedundancyOptimizer*>(&run.opt)) {
    zero->consolidate_state_dict(0);
  }
  StateDict model_state, optimizer_state;
  if (run.main || run.io.collective) {
    model_state = run.io.model_state();
    optimizer_state = run.io.optimizer_state();
  }
  if (run.main) {
    nlohmann::ordered_json state = {{"format", kTrainingStateFormat},
                                    {"generation", *generation},
                                    {"epoch", m.epoch},
                                    {"model", c.model},
                                    {"mode", c.mode},
                                    {"optimizer", c.optimizer},
                                    {"seed", c.seed}};
    if (m.global_step >= 0) state["global_step"] = m.global_step;
    if (run.data.language_model) state["context"] = c.context;
    // The metrics line before the manifest's rename: a kill between the two leaves a line
    // without its checkpoint, which resume drops, never a checkpoint without its line.
    write_checkpoint(
        c.checkpoint_dir, (*generation)++, model_state, optimizer_state, state,
        [&] { append_metrics(metrics_path(c.checkpoint_dir), c, m, run.dist.world); }, run.out);
  }
  run.dist.barrier();
}

}  // namespace

TrainResult train(const TrainConfig& config, FILE* out) {
  const TrainConfig c = checked_config(config);
  set_dp_device_count(c);
  const std::chrono::milliseconds timeout(std::llround(c.timeout * 1000));
  Distributed dist =
      ranked(c) ? Distributed::init(ddp_backend(c), timeout) : Distributed::single();
  const Device home = Device();  // host:0 in this process
  const bool main = dist.rank == 0;
  int64_t generation = recover_checkpoints(c, dist, out);
  // The data comes before the model: the gpt models' vocabulary is the tokenizer's.
  const Data data = load_checked_data(c, out, main);
  std::shared_ptr<Module> model = build_model(c, data, dist);
  std::shared_ptr<Module> net = wrap_for_mode(c, model, dist);
  const int scale = c.mode == "dp" ? c.devices : dist.world;
  const float lr = c.scale_lr ? c.lr * static_cast<float>(scale) : c.lr;
  // FSDP's parameters are each rank's flat shards.
  std::unique_ptr<optim::Optimizer> opt =
      make_optimizer(c, c.mode == "fsdp" ? net->parameters() : model->parameters(), lr, dist);
  const StateIo io = state_io(*model, *net, *opt);
  // Where the run starts: the epoch after the checkpoint's, with the optimizer steps before it.
  Position at{-1, 0};
  if (c.resume || (c.resume_auto && has_checkpoint(c.checkpoint_dir))) {
    at = resume_training(c, data, io, main, out);
  } else if (c.resume_auto && main) {
    std::fprintf(out, "no checkpoint in %s yet: starting from scratch (--resume auto)\n",
                 c.checkpoint_dir.c_str());
    // Lines of epochs whose checkpoint never came (a run stopped before its first commit) go, as
    // --resume drops the lines past its checkpoint: this run's epochs are not appended to them.
    trim_metrics(metrics_path(c.checkpoint_dir), -1, out);
  }
  const int start_epoch = at.epoch + 1;
  int64_t done = at.global_step;  // -1: unknown (an older checkpoint), and stays so

  std::shared_ptr<Sampler> sampler = make_train_sampler(c, data, dist);
  DataLoaderOptions lo;
  lo.batch_size = c.batch_size;
  lo.sampler = sampler;
  DataLoader loader(data.train, lo);
  DataLoader test_loader(data.test, test_loader_options(c, data, dist));
  const Plan plan = plan_epochs(c, loader, start_epoch, std::max<int64_t>(done, 0));
  if (main) print_run(c, data, *model, dist, lr, out);
  if (main && c.max_steps > 0 && done >= c.max_steps) {
    std::fprintf(out, "nothing to train: %lld steps done, --max-steps %lld\n",
                 static_cast<long long>(done), static_cast<long long>(c.max_steps));
  }

  const Run run{c, compute_device(c), dist, data, *model, *net, *opt, io, main, out};
  TrainResult result;
  for (int epoch = start_epoch; epoch < plan.end_epoch; ++epoch) {
    const int64_t limit =
        c.max_steps > 0 ? std::min(plan.steps_per_epoch, c.max_steps - done) : plan.steps_per_epoch;
    EpochMetrics m = train_epoch(run, epoch, *sampler, loader, limit);
    if (done >= 0) done += m.steps;
    m.global_step = done;
    evaluate(run, test_loader, m);
    if (main) print_epoch(m, data.language_model, out);
    if (!c.checkpoint_dir.empty()) save_checkpoint(run, m, &generation);
    result.epochs.push_back(m);
  }
  // FSDP: the full state dict, which every rank takes part in gathering.
  for (auto& [k, v] : io.model_state()) result.final_state.emplace_back(k, v.to(home).clone());
  return result;
}

}  // namespace dpe::tools
