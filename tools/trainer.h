// Trainer: the training loop behind //tools:train, for one device, DataParallel, or DDP (one
// process per device, started by //tools:launch). Per epoch: train with a progress line on the
// main process, evaluate on the test set (reduced over ranks in DDP), write an atomic checkpoint
// (rank 0) and append a JSON line of metrics. A non-finite loss stops the run with an error naming
// the epoch and step; the last good checkpoint stays as it was. --resume continues from it with
// the same results as an uninterrupted run.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/nn/module.h"

namespace dpe::tools {

struct TrainConfig {
  std::string mode = "single";  // single | dp | ddp
  int devices = 2;              // dp: host devices to use
  std::string model = "convnet";  // toy | mlp | convnet
  int epochs = 1;
  int64_t batch_size = 100;  // global for dp, per process for ddp (as PyTorch)
  float lr = 0.01f;
  bool scale_lr = false;  // lr *= world size (ddp) or device count (dp)
  float momentum = 0.9f;
  float weight_decay = 0.0f;
  uint64_t seed = 0;
  bool sync_bn = false;
  std::string checkpoint_dir;  // empty: no checkpoints
  bool resume = false;
  std::string data_dir;
  int64_t max_steps = 0;       // per epoch; 0: the whole epoch
  int64_t train_samples = 0;   // 0: the whole training set (a prefix otherwise)
  int64_t test_samples = 0;    // 0: the whole test set
  bool progress = true;
};

struct EpochMetrics {
  int epoch = 0;
  double train_loss = 0;
  double test_loss = 0;
  double test_accuracy = -1;  // -1 for the toy regression
  double samples_per_second = 0;
  int64_t steps = 0;
};

struct TrainResult {
  std::vector<EpochMetrics> epochs;
  StateDict final_state;  // the bare model's parameters and buffers (host copies)
};

// Throws dpe::Error naming the problem (bad flag combination, missing data, non-finite loss).
TrainResult train(const TrainConfig& config, FILE* out);

// Where train() keeps its checkpoint and log inside checkpoint_dir.
std::string checkpoint_path(const std::string& dir);
std::string metrics_path(const std::string& dir);

}  // namespace dpe::tools
