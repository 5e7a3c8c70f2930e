// EpochMetrics: what one epoch of //tools:train measured, as train() returns it and metrics.jsonl
// records it.
#pragma once

#include <cstdint>

namespace dpe::tools {

struct EpochMetrics {
  int epoch = 0;
  double train_loss = 0;
  double test_loss = 0;
  double test_accuracy = -1;       // -1 for the toy regression and the gpt models
  double perplexity = -1;          // gpt: exp(validation loss); -1 otherwise
  double unigram_perplexity = -1;  // gpt: the validation split's unigram baseline
  double samples_per_second = 0;
  double tokens_per_second = 0;  // gpt: samples/s x context; 0 otherwise
  int64_t steps = 0;
  int64_t global_step = -1;  // optimizer steps since the run began; -1: unknown (design note)
};

}  // namespace dpe::tools
