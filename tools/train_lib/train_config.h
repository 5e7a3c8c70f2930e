// TrainConfig: what a //tools:train run is asked to do (its flags, one field each), the model's
// defaults filled in by resolve_defaults, and the few facts read off a config (ranked,
// ddp_backend).
//
// Threading contract: free functions without shared state (ddp_backend reads the environment);
// call them from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/text_files.h"

namespace dpe::tools {

// The most epochs a run may have (--epochs); a checkpoint's epoch is below it.
constexpr int kMaxEpochs = 1000000;

struct TrainConfig {
  std::string mode = "single";  // single | dp | ddp | fsdp
  std::string device = "host";  // host | cuda: the devices the run computes on
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
  // fp32, or bf16: forward and loss under autocast(bfloat16) (engine/autograd/autocast.h), the
  // parameters, gradients, optimizer state and checkpoints float32, as PyTorch's CPU autocast
  std::string precision = "fp32";
  // --mode ddp's comm hook: none (all-reduce), bf16 or fp16 (PyTorch's compress hooks).
  std::string ddp_comm_hook = "none";
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
  std::string data_dir;  // Fashion-MNIST
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

// ddp and fsdp run one process per device, in a job of ranks.
bool ranked(const TrainConfig& c);

// The ddp backend --backend auto stands for: NCCL on CUDA devices (as PyTorch's choice for GPUs),
// else MPI when mpirun started the job, else Gloo.
std::string ddp_backend(const TrainConfig& c);

}  // namespace dpe::tools
