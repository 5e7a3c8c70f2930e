#include "tools/train_lib/train_data.h"

#include <sys/stat.h>

#include <algorithm>
#include <sstream>
#include <utility>
#include <vector>

#include "engine/core/error.h"
#include "engine/data/distributed_sampler.h"
#include "engine/data/fashion_mnist.h"
#include "engine/data/random_sampler.h"
#include "engine/data/text_corpus.h"
#include "engine/data/text_dataset.h"
#include "engine/data/text_files.h"
#include "engine/data/token_cache.h"
#include "models/by_name.h"
#include "tools/common/exit_codes.h"
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

}  // namespace

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

std::shared_ptr<Sampler> make_train_sampler(const TrainConfig& c, const Data& data,
                                            const Distributed& dist) {
  if (ranked(c)) {
    return std::make_shared<DistributedSampler>(data.train->size(), dist.world, dist.rank, true,
                                                c.seed);
  }
  return std::make_shared<RandomSampler>(data.train->size(), c.seed);
}

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

}  // namespace dpe::tools
