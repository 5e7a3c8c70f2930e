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

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/data/text_files.h"
#include "engine/nn/module.h"

namespace dpe::tools {

// The most epochs a run may have (--epochs); a checkpoint's epoch is below it.
constexpr int kMaxEpochs = 1000000;

struct TrainConfig {
  std::string mode = "single";    // single | dp | ddp | fsdp
  std::string device = "host";    // host | cuda: the devices the run computes on
  // ddp: gloo | mpi | nccl | auto (nccl with --device cuda; else mpi under mpirun, else gloo)
  std::string backend = "auto";
  int devices = 2;                // dp: devices to use (host:0.. or cuda:0..)
  std::string model = "convnet";  // toy | mlp | convnet | resnet-tiny | gpt-small | gpt2
  int epochs = 1;
  int64_t batch_size = 0;   // global for dp, per process for ddp (as PyTorch); 0: the model's
                            // default (100 images; 16 windows for the gpt models)
  std::string optimizer;    // sgd | adamw; empty: the model's default (adamw for gpt, else sgd)
  float lr = -1;            // < 0: the model's default (sgd 0.01; adamw: gpt-small 1e-3, gpt2 6e-4)
  bool scale_lr = false;    // lr *= world size (ddp) or device count (dp)
  float momentum = 0.9f;    // sgd only
  float weight_decay = -1;  // < 0: the optimizer's PyTorch default (sgd 0, adamw 0.01)
  float clip_grad_norm = -1;  // max global gradient 2-norm; 0: none; < 0: 1.0 for gpt, else none
  uint64_t seed = 0;
  bool sync_bn = false;
  // Recompute each gpt block's activations in backward instead of keeping them
  // (engine/nn/checkpoint.h); the same losses, less activation memory
  bool activation_checkpointing = false;
  // Image batches channels last (torch.channels_last): the convolutional layers' activations stay
  // NHWC on host devices (docs/channels_last.md); the same losses
  bool channels_last = false;
  // ddp (ignored otherwise): PyTorch's DDP option of that name, whose default is false; true as
  // //tools:bench's
  bool gradient_as_bucket_view = true;
  // ddp only: ZeroRedundancyOptimizer (ZeRO stage 1) over the optimizer; rank 0 checkpoints its
  // consolidated state, the same optimizer.safetensors as without it, which resume loads either way
  bool zero = false;
  // --mode fsdp's sharding strategy: "full" (FULL_SHARD) or "grad-op" (SHARD_GRAD_OP).
  std::string sharding = "full";
  // ddp: seconds a collective may take before the job ends naming the rank that holds it up
  // (init_process_group's timeout, PyTorch's default 30 minutes; engine/distributed/watchdog.h)
  double timeout = 1800;
  std::string checkpoint_dir;  // empty: no checkpoints
  bool resume = false;
  // Resume when checkpoint_dir holds a checkpoint, else start from scratch (--resume auto: a
  // worker that dpe-launch --max-restarts started again, as torchrun scripts load theirs).
  bool resume_auto = false;
  std::string data_dir;       // Fashion-MNIST
  // Optimizer steps over the whole run, the steps before a resumed checkpoint included; when > 0
  // it overrides `epochs` (Hugging Face's max_steps). 0: `epochs` decides.
  int64_t max_steps = 0;
  int64_t max_steps_per_epoch = 0;  // 0: the whole pass
  int64_t train_samples = 0;  // 0: the whole training set (a prefix otherwise; windows for gpt)
  int64_t test_samples = 0;   // 0: the whole test set (validation windows for gpt)
  bool progress = true;
  // The gpt models' data: windows of `context` tokens (0: the model's block_size), stride =
  // context, over the language-model corpus tokenized with a `vocab_size` BPE cached in
  // `cache_dir` (empty: default_cache_dir()). `corpus_documents` > 0 keeps only the corpus's
  // first documents (the tests' tiny corpus: a small tokenizer trains in a second).
  int64_t context = 0;
  int64_t vocab_size = 32000;
  std::string cache_dir;
  int64_t corpus_documents = 0;
  // The language models' text instead of the built-in corpus: a UTF-8 file or a folder of them
  // (engine/data/text_files.h), its tokenizer cached under its own name by a hash of the text
  // and the tokenizer's options. A text too small for vocab_size pieces gets fewer. Empty: the
  // built-in corpus.
  std::string text;
  // The most bytes of `text` read (engine/data/text_files.h); past it the run stops, naming the
  // file and the limit.
  uint64_t max_text_bytes = kMaxTextBytes;
};

// The models train takes, from the model registry (models/registry.h): the regression, the
// language models, and the image classifiers made for 28x28 images (Fashion-MNIST's layout, which
// --data-dir's IDX files must have), regression first, each task's by name.
std::vector<std::string> trainable_models();

// `config` with every "model's default" above filled in for config.model; throws dpe::Error
// naming a flag that does not fit the model (a model train does not take, --context above the
// block size or without a gpt model, --text without one, an unknown optimizer).
TrainConfig resolve_defaults(const TrainConfig& config);

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
std::string checkpoint_manifest_path(const std::string& dir);   // checkpoint.json
std::string model_checkpoint_path(const std::string& dir);      // model.safetensors
std::string optimizer_checkpoint_path(const std::string& dir);  // optimizer.safetensors
std::string training_state_path(const std::string& dir);        // training_state.json
std::string legacy_checkpoint_path(const std::string& dir);     // checkpoint.safetensors (older)
std::string metrics_path(const std::string& dir);               // metrics.jsonl

}  // namespace dpe::tools
