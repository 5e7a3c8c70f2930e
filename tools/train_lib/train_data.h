// train_data: a train run's data: the training and test (validation) sets of its model's task
// (Fashion-MNIST or another IDX set, the toy regression, or a language model's windows of the
// built-in corpus or of --text) and the order the run visits them in.
//
// Threading contract: load_checked_data runs on the tool's main thread before training; a Data
// is then read-only, its datasets read by the DataLoader as any Dataset.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "engine/data/data_loader.h"
#include "engine/data/dataset.h"
#include "engine/data/sampler.h"
#include "tools/common/train_distributed.h"
#include "tools/train_lib/train_config.h"

namespace dpe::tools {

struct Data {
  std::shared_ptr<const Dataset> train, test;
  bool classification = true;
  bool language_model = false;
  int64_t vocab_size = 0;          // language model: the tokenizer's
  double unigram_perplexity = -1;  // language model: the validation split's baseline
  std::string text_source;         // language model: "language-model corpus", or --text's
};

// The run's data, neither split empty: --train-samples and --test-samples keep a prefix of each.
// The language models' tokenizer is trained once and cached (engine/data/token_cache.h), the
// built-in corpus and --text each under their own name; every DDP rank loads the same files; the
// tokenizer's messages go to `out` on the main process (`main`). A text too small for
// --vocab-size pieces gets a smaller vocabulary, and the log says so. A data set that cannot be
// read is a DataError (exit 3), a missing --data-dir a UsageError (exit 2), out of memory a failed
// run (exit 1).
Data load_checked_data(const TrainConfig& c, FILE* out, bool main);

// The training set's order: each rank's shard in ddp, the whole set shuffled otherwise; a
// function of --seed and the epoch.
std::shared_ptr<Sampler> make_train_sampler(const TrainConfig& c, const Data& data,
                                            const Distributed& dist);

// The test set in order, 1000 images (or --batch-size windows) a batch; each rank's shard in ddp.
DataLoaderOptions test_loader_options(const TrainConfig& c, const Data& data,
                                      const Distributed& dist);

}  // namespace dpe::tools
