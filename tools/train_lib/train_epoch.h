// train_epoch: one epoch of a train run: a pass over the training set (forward, the loss,
// backward, clipping, the optimizer's step) with its progress line, the evaluation on the test
// set, and the epoch's line of results.
//
// Threading contract: run on the training thread of every process of the run; train_epoch and
// evaluate are collective in the ranked modes (the loss and the sums are reduced over ranks).
#pragma once

#include <cstdio>
#include <optional>

#include "engine/data/data_loader.h"
#include "engine/data/sampler.h"
#include "engine/device/device.h"
#include "engine/nn/module.h"
#include "engine/optim/grad_scaler.h"
#include "engine/optim/optimizer.h"
#include "tools/common/train_distributed.h"
#include "tools/train_lib/epoch_metrics.h"
#include "tools/train_lib/state_io.h"
#include "tools/train_lib/train_config.h"
#include "tools/train_lib/train_data.h"

namespace dpe::tools {

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
  optim::GradScaler* scaler = nullptr;  // --precision fp16: the loss scaling
};

// One pass over the training set (at most `max_batches` of it) with a progress line on the main
// process; returns the epoch's steps, mean training loss and throughput. A non-finite loss stops
// the run with a dpe::Error naming the epoch and the step.
EpochMetrics train_epoch(const Run& run, int epoch, Sampler& sampler, DataLoader& loader,
                         int64_t max_batches);

// Test: loss and accuracy (perplexity for gpt) over the whole test set, every rank's shard
// reduced, into `m`.
void evaluate(const Run& run, DataLoader& test_loader, EpochMetrics& m);

// The epoch's line of results on `out`: losses and accuracy, or perplexities for a language
// model, and the throughput.
void print_epoch(const EpochMetrics& m, bool language_model, FILE* out);

}  // namespace dpe::tools
