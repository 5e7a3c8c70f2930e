// Trainer: the training loop behind //tools:train, for one device, DataParallel, or DDP (one
// process per device, started by //tools:launch). The models come from the model registry
// (models/registry.h) by task: the image classifiers (mlp, convnet, resnet-tiny: a ResNet with one
// input channel) on Fashion-MNIST or another IDX set of 28x28 images, and the toy regression,
// train with SGD and report test loss (and accuracy); the language models (gpt-small, gpt2) train
// on the windows (engine/data/text_dataset.h) of the built-in corpus or of the user's text
// (--text) with AdamW, the LM loss and gradient clipping, and report validation loss and
// perplexity beside the unigram baseline.
// Per epoch: train with a progress line on the main process, evaluate (reduced over ranks in
// DDP), append a JSON line of metrics and then commit a checkpoint set (rank 0; design note
// "checkpoint set" below). A non-finite loss stops the run with an error naming the epoch and
// step; the last good checkpoint stays as it was. --resume continues from it with the same
// results as an uninterrupted run. --max-steps counts optimizer steps over the whole run, resumed
// runs included, as Hugging Face's max_steps: it overrides --epochs, and the last epoch ends where
// the count is reached (evaluated and checkpointed as any epoch). A run resumed after such a cut
// epoch, with a larger --max-steps, goes on from the next epoch.
#pragma once

#include <cstdio>
#include <vector>

#include "engine/nn/module.h"
#include "tools/train_lib/checkpoint_files.h"
#include "tools/train_lib/epoch_metrics.h"
#include "tools/train_lib/train_config.h"

namespace dpe::tools {

struct TrainResult {
  std::vector<EpochMetrics> epochs;
  StateDict final_state;  // the bare model's parameters and buffers (host copies)
};

// Throws dpe::Error naming the problem: a UsageError (tools/common/exit_codes.h) for a bad flag
// value, flag combination or DPE_* environment value, a DataError for a data set or checkpoint that
// is missing, corrupt or does not fit (every checkpoint metadata value is validated, the message
// names the file and the key), a plain dpe::Error when the run fails (a non-finite loss, a lost
// rank). With checkpoint_dir, the main process first finishes a checkpoint whose commit a kill
// interrupted and removes what killed writes left (design note "checkpoint set"), and on resume
// drops metrics.jsonl's lines after the checkpoint's epoch.
TrainResult train(const TrainConfig& config, FILE* out);

// Design note "checkpoint set": after every epoch rank 0 writes, in checkpoint_dir,
//   model.safetensors      exactly the model's state_dict under PyTorch's names (metadata
//                          {"format": "pt"}), loadable strict into the equivalent PyTorch module;
//   optimizer.safetensors  the optimizer's state_dict (dpe's names: "state.0.momentum_buffer");
//   training_state.json    format dpe-train-2, generation, epoch, model, mode, optimizer, seed
//                          (the samplers' order is a function of seed and epoch), context (gpt),
//                          global_step (the optimizer steps up to the checkpoint, for
//                          --max-steps; left out after a resume from a checkpoint without it,
//                          since the count is then unknown);
//   checkpoint.json        the manifest: format dpe-checkpoint-1, generation, each file's size.
// The three are written as <name>.next.<generation> and fsynced, the epoch's metrics line is
// appended, and the manifest is renamed into place: that rename is the commit. The staged files
// are then renamed to their names. A kill before the commit leaves the previous set (its manifest
// still names it; the staged files are removed at the next start); a kill after it leaves a
// manifest whose staged files the next start renames into place before anything reads them.
// Resume reads the manifest only and checks every file's size and training_state.json's
// generation against it. A directory without a manifest is read in the older single-file layout
// (checkpoint.safetensors, optimizer tensors prefixed "optimizer."), which the next checkpoint
// written there supersedes and removes.
// The files' paths: checkpoint_files.h. Written by checkpoint_writer.h, finished and cleaned at
// start by checkpoint_recovery.h, read by checkpoint_reader.h; metrics.jsonl: metrics_log.h.

}  // namespace dpe::tools
