// //tools:train — train the seeds' models on Fashion-MNIST, or a GPT on the language-model corpus,
// on one host device (--mode single), with DataParallel over several (--mode dp), or as one process
// of a DDP job started by //tools:launch (--mode ddp). Exit codes (tools/common/exit_codes.h): 0
// done, 1 training failed, 2 bad flags or DPE_* environment values, 3 data or checkpoint files
// missing, corrupt or not fitting. The user's own data: --data-dir takes any IDX set of 28x28
// images (MNIST's too), --text a UTF-8 text file or folder for the language models.
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "engine/core/error.h"
#include "engine/data/fashion_mnist.h"
#include "models/by_name.h"
#include "tools/common/bool_flag.h"
#include "tools/common/exit_codes.h"
#include "tools/common/paths.h"
#include "tools/common/precision.h"
#include "tools/train_lib/trainer.h"

namespace {

// --model's help: every model train takes (tools/train_lib/trainer.h), with the registry's summary
// and the data it trains on.
std::string model_help() {
  std::string help = "the model (models/registry.h):";
  for (const std::string& name : dpe::tools::trainable_models()) {
    const dpe::models::ModelInfo info = dpe::models::model_info(name);
    const char* data = info.task == dpe::models::ModelTask::kLanguageModel ? "language model"
                       : info.task == dpe::models::ModelTask::kRegression  ? "synthetic data"
                                                                           : "--data-dir images";
    help += "\n" + name + ": " + info.summary + " (" + data + ")";
  }
  return help;
}

// A finite number of at least `min` (CLI11's NonNegativeNumber lets nan and inf through).
CLI::Validator finite_at_least(double min, bool strict) {
  char shown[32];
  std::snprintf(shown, sizeof shown, "%g", min);
  const std::string bound = shown;
  return CLI::Validator(
      [min, strict, bound](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        const bool ok =
            !text.empty() && *end == '\0' && std::isfinite(v) && (strict ? v > min : v >= min);
        if (ok) return "";
        return "'" + text + "' is not a finite number " + (strict ? "above " : "of at least ") +
               bound;
      },
      (strict ? "NUMBER > " : "NUMBER >= ") + bound);
}

// --devices defaults to DPE_HOST_DEVICES when that is a valid count for it.
int devices_from_env(int fallback) {
  const char* env = std::getenv("DPE_HOST_DEVICES");
  if (env == nullptr || *env == '\0') return fallback;
  char* end = nullptr;
  const long v = std::strtol(env, &end, 10);
  return *end == '\0' && v >= 1 && v <= 64 ? static_cast<int>(v) : fallback;
}

// The flags that main looks at again after parsing: given or not, and values that are not the
// config's.
struct Flags {
  CLI::Option* devices = nullptr;
  CLI::Option* momentum = nullptr;
  CLI::Option* bucket_view = nullptr;
  CLI::Option* sharding = nullptr;
  CLI::Option* resume = nullptr;
  std::string resume_value;
  std::string rdzv_timeout;
  bool quiet = false;
};

// --mode, --device, --backend, --devices, --model, --epochs, --batch-size.
void add_run_flags(CLI::App& app, dpe::tools::TrainConfig& c, Flags& f) {
  app.add_option("--mode", c.mode,
                 "single | dp | ddp | fsdp (FullyShardedDataParallel, one process per device as "
                 "ddp; each transformer block of a gpt model is a unit, other models are one)")
      ->check(CLI::IsMember({"single", "dp", "ddp", "fsdp"}))
      ->capture_default_str();
  app.add_option("--device", c.device,
                 "host (the default: host devices) or cuda (CUDA devices: cuda:0 for single, "
                 "cuda:0..N-1 for dp, cuda:LOCAL_RANK for ddp)")
      ->check(CLI::IsMember({"host", "cuda"}))
      ->capture_default_str();
  app.add_option("--backend", c.backend,
                 "ddp's process group: mpi (start with mpirun -np N), gloo (start with "
                 "//tools:launch), nccl (CUDA devices), auto: nccl with --device cuda, else mpi "
                 "under mpirun, else gloo")
      ->check(CLI::IsMember({"auto", "gloo", "mpi", "nccl"}))
      ->capture_default_str();
  f.devices =
      app.add_option("--devices", c.devices,
                     "how many devices --mode dp runs on, a COUNT: host:0..N-1, or cuda:0..N-1 "
                     "with --device cuda (default DPE_HOST_DEVICES when set, else 2; the flag wins "
                     "over the variable and says so)")
          ->check(CLI::Range(1, 64));
  app.add_option("--model", c.model, model_help())
      ->check(CLI::IsMember(dpe::tools::trainable_models()))
      ->capture_default_str();
  app.add_option("--epochs", c.epochs, "epochs to train")
      ->check(CLI::Range(1, dpe::tools::kMaxEpochs))
      ->capture_default_str();
  app.add_option("--batch-size", c.batch_size,
                 "batch size: GLOBAL for single and dp (split over the devices), PER PROCESS for "
                 "ddp (the global batch is batch-size x world size), as in PyTorch; default 100 "
                 "images, 16 windows for gpt")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
}

// --optimizer, --lr, --scale-lr, --momentum, --weight-decay, --clip-grad-norm, --seed.
void add_optimizer_flags(CLI::App& app, dpe::tools::TrainConfig& c, Flags& f) {
  app.add_option("--optimizer", c.optimizer,
                 "sgd | adamw (PyTorch's defaults: betas 0.9, 0.999, eps 1e-8, weight decay "
                 "0.01); default adamw for gpt, sgd otherwise")
      ->check(CLI::IsMember({"sgd", "adamw"}));
  app.add_option("--lr", c.lr,
                 "learning rate; default 0.01 for sgd, for adamw 1e-3 (gpt-small) or 6e-4 (gpt2)")
      ->check(finite_at_least(0, false));
  dpe::tools::add_switch(app, "--scale-lr", c.scale_lr,
                         "multiply the learning rate by the world size (ddp) or device count (dp)");
  f.momentum = app.add_option("--momentum", c.momentum, "SGD momentum")
                   ->check(finite_at_least(0, false))
                   ->capture_default_str();
  app.add_option("--weight-decay", c.weight_decay,
                 "weight decay; default 0 for sgd, 0.01 (decoupled) for adamw")
      ->check(finite_at_least(0, false));
  app.add_option("--clip-grad-norm", c.clip_grad_norm,
                 "clip the global gradient 2-norm to this (0: no clipping); default 1.0 for gpt, "
                 "none otherwise")
      ->check(finite_at_least(0, false));
  app.add_option("--seed", c.seed, "seed of the initial weights and the shuffling")
      ->capture_default_str();
}

// How the model is wrapped and laid out: --sync-bn, --activation-checkpointing, --channels-last,
// --gradient-as-bucket-view, --zero, --sharding.
void add_parallel_flags(CLI::App& app, dpe::tools::TrainConfig& c, Flags& f) {
  dpe::tools::add_switch(app, "--sync-bn", c.sync_bn, "SyncBatchNorm across ranks (ddp only)");
  dpe::tools::add_bool_option(
      app, "--activation-checkpointing", c.activation_checkpointing,
      "gpt models: recompute each transformer block's activations in backward instead "
      "of keeping them (torch.utils.checkpoint, non-reentrant): the same losses, less "
      "activation memory, about one more forward per step");
  dpe::tools::add_bool_option(
      app, "--channels-last", c.channels_last,
      "image models: batches laid out channels last (torch.channels_last), so the "
      "convolutions, batch norms and poolings run on NHWC activations with no reorder "
      "between layers; the same losses");
  f.bucket_view = dpe::tools::add_bool_option(
      app, "--gradient-as-bucket-view", c.gradient_as_bucket_view,
      "ddp only: DDP's gradient_as_bucket_view, the "
      "gradients are views of the all-reduce buckets and linear layers write theirs "
      "straight into them; false (PyTorch's default) copies into and out of the "
      "buckets (the default, as bench's). DDP's other settings are PyTorch's "
      "defaults and bench's: bucket_cap_mb 25, broadcast_buffers, no "
      "find_unused_parameters, all-reduces overlapping backward as bench's "
      "--overlap auto decides");
  dpe::tools::add_bool_option(
      app, "--zero", c.zero,
      "ddp only: ZeroRedundancyOptimizer (ZeRO stage 1) over the optimizer, each rank "
      "holding 1/world of its state; checkpoints are the same files as without it");
  f.sharding =
      app.add_option("--sharding", c.sharding,
                     "fsdp only: full (FULL_SHARD, ZeRO-3: parameters gathered per block for its "
                     "forward and again for its backward) or grad-op (SHARD_GRAD_OP, ZeRO-2: "
                     "gathered once a step); gradients and optimizer state are sharded in both")
          ->check(CLI::IsMember({"full", "grad-op"}))
          ->capture_default_str();
}

// --precision, --ddp-comm-hook.
void add_precision_flags(CLI::App& app, dpe::tools::TrainConfig& c) {
  app.add_option("--ddp-comm-hook", c.ddp_comm_hook,
                 "--mode ddp's communication hook: none (all-reduce float32 buckets), bf16 or "
                 "fp16 (PyTorch's bf16_compress_hook and fp16_compress_hook: each bucket, divided "
                 "by the world size, all-reduced in 16 bits, half the bytes on the wire)")
      ->check(CLI::IsMember({"none", "bf16", "fp16"}))
      ->capture_default_str();
  app.add_option("--precision", c.precision,
                 "fp32, bf16 or fp16: bf16 and fp16 are mixed precision, the forward and loss "
                 "under autocast in that dtype (torch.autocast's lists; parameters, gradients, "
                 "optimizer state and checkpoints stay float32), fp16 with a GradScaler (its "
                 "state checkpointed beside the optimizer's; not with --mode fsdp)")
      ->check(CLI::IsMember(dpe::tools::precision_names()))
      ->capture_default_str();
}

// --checkpoint-dir, --resume, and the data: --data-dir, --text and the language models' knobs.
void add_checkpoint_and_data_flags(CLI::App& app, dpe::tools::TrainConfig& c, Flags& f) {
  app.add_option("--checkpoint-dir", c.checkpoint_dir,
                 "after every epoch write model.safetensors (the model's state_dict, PyTorch's "
                 "names), optimizer.safetensors and training_state.json here, committed together "
                 "by checkpoint.json (rank 0), and a line of metrics.jsonl");
  f.resume =
      app.add_option("--resume", f.resume_value,
                     "continue from the checkpoint in --checkpoint-dir (also reads the older "
                     "single-file checkpoint.safetensors); --resume auto: from it when there is "
                     "one, else from scratch (what a worker restarted by dpe-launch "
                     "--max-restarts needs)")
          ->expected(0, 1)
          ->check(CLI::IsMember({"auto"}));
  app.add_option("--data-dir", c.data_dir,
                 "folder with the Fashion-MNIST IDX .gz files (or any set of 28x28 images and "
                 "labels 0-9 under the same four names, e.g. MNIST's)")
      ->capture_default_str();
  app.add_option("--text", c.text,
                 "gpt: train on this UTF-8 text file, or every file in this folder (recursively, "
                 "hidden names skipped), instead of the built-in corpus; its tokenizer is "
                 "trained once and cached in --cache-dir");
  app.add_option("--max-text-bytes", c.max_text_bytes,
                 "gpt: the most bytes of --text to read (default 64 MiB); past it the run stops "
                 "naming the file. A run takes about 45 bytes of memory per byte of text")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 50));
  app.add_option("--context", c.context,
                 "gpt: tokens per training window (stride = context); default the model's block "
                 "size (gpt-small 128, gpt2 1024)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--vocab-size", c.vocab_size, "gpt: the BPE tokenizer's vocabulary size")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--cache-dir", c.cache_dir,
                 "gpt: where the tokenizer and tokens are cached (default $DPE_CACHE_DIR, "
                 "$XDG_CACHE_HOME/dpe or ~/.cache/dpe)");
  app.add_option("--corpus-documents", c.corpus_documents,
                 "gpt: use only the corpus's first N documents (0: all; for quick tests)")
      ->check(CLI::Range(int64_t{0}, INT64_MAX))
      ->group("");  // a test knob: it works, --help leaves it out
}

// How long a run is and may wait: the step and sample limits, --timeout, --rdzv-timeout, and
// --no-progress.
void add_limit_flags(CLI::App& app, dpe::tools::TrainConfig& c, Flags& f) {
  app.add_option("--max-steps", c.max_steps,
                 "optimizer steps in all, over every epoch and the steps before a --resume "
                 "(Hugging Face's max_steps): the run stops after that many and takes as many "
                 "epochs as they need, whatever --epochs says (0: --epochs decides)")
      ->check(CLI::Range(int64_t{0}, INT64_MAX));
  app.add_option("--max-steps-per-epoch", c.max_steps_per_epoch,
                 "end each epoch after this many steps (0: the whole pass)")
      ->check(CLI::Range(int64_t{0}, INT64_MAX));
  app.add_option("--train-samples", c.train_samples,
                 "use only the first N training samples (gpt: windows) (0: all)")
      ->check(CLI::Range(int64_t{0}, INT64_MAX));
  app.add_option("--test-samples", c.test_samples,
                 "use only the first N test samples (gpt: validation windows) (0: all)")
      ->check(CLI::Range(int64_t{0}, INT64_MAX));
  app.add_option("--timeout", c.timeout,
                 "ddp: SECONDS a collective may take; past it the job ends (exit 1) with a "
                 "message naming the rank that stopped answering or fell behind, on gloo and mpi "
                 "alike (init_process_group's timeout, which also bounds the rendezvous unless "
                 "--rdzv-timeout is given; default 1800, 30 minutes, as PyTorch)")
      ->check(finite_at_least(0, true))
      ->check(CLI::Range(0.0, 1e8));
  app.add_option("--rdzv-timeout", f.rdzv_timeout,
                 "ddp: seconds to wait for every rank at the rendezvous (sets DPE_RDZV_TIMEOUT; "
                 "default: that variable, else 30 minutes)")
      ->check(finite_at_least(0, true));
  dpe::tools::add_switch(app, "--no-progress", f.quiet, "no progress line");
}

// The flags that belong to one mode, given with another: the message, or "" when none is.
std::string mode_mismatch(const dpe::tools::TrainConfig& c, const Flags& f) {
  if (f.bucket_view->count() > 0 && c.mode != "ddp") {
    return "--gradient-as-bucket-view needs --mode ddp";
  }
  if (f.sharding->count() > 0 && c.mode != "fsdp") return "--sharding needs --mode fsdp";
  if (c.ddp_comm_hook != "none" && c.mode != "ddp") {
    return "--ddp-comm-hook " + c.ddp_comm_hook + " needs --mode ddp (a hook of DDP's buckets)";
  }
  if (c.precision == "fp16" && c.mode == "fsdp") {
    return "--precision fp16 with --mode fsdp needs a sharded GradScaler (each rank sees only "
           "its shards' overflows; PyTorch's ShardedGradScaler), which dpe does not have; use "
           "--precision bf16, which needs no scaling";
  }
  if (c.zero && c.mode != "ddp") {
    return "--zero needs --mode ddp (ZeroRedundancyOptimizer shards the optimizer state across "
           "the DDP ranks)";
  }
  return "";
}

// The parsed flags into `c`, checked: kExitOk, or kExitUsage after printing why not.
int finish_config(dpe::tools::TrainConfig& c, const Flags& f) {
  const std::string mismatch = mode_mismatch(c, f);
  if (!mismatch.empty()) {
    std::fprintf(stderr, "train: %s\n", mismatch.c_str());
    return dpe::tools::kExitUsage;
  }
  c.resume = f.resume->count() > 0 && f.resume_value.empty();
  c.resume_auto = f.resume_value == "auto";
  c.progress = !f.quiet;
  if (f.devices->count() == 0) c.devices = devices_from_env(c.devices);
  if (!f.rdzv_timeout.empty()) ::setenv("DPE_RDZV_TIMEOUT", f.rdzv_timeout.c_str(), 1);
  c.data_dir = dpe::tools::user_path(c.data_dir);
  c.checkpoint_dir = dpe::tools::user_path(c.checkpoint_dir);
  c.cache_dir = dpe::tools::user_path(c.cache_dir);
  c.text = dpe::tools::user_path(c.text);
  try {
    const dpe::tools::TrainConfig resolved = dpe::tools::resolve_defaults(c);
    DPE_CHECK(f.momentum->count() == 0 || resolved.optimizer == "sgd",
              "--momentum is SGD's; " << c.model << " trains with " << resolved.optimizer
                                      << " (pass --optimizer sgd to use it)");
  } catch (const dpe::Error& e) {
    std::fprintf(stderr, "train: %s\n", e.what());
    return dpe::tools::kExitUsage;
  }
  if (dpe::models::model_info(c.model).task == dpe::models::ModelTask::kImageClassification) {
    struct stat st {};
    if (stat(c.data_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      std::fprintf(stderr,
                   "train: data directory '%s' does not exist (install dataset-fashion-mnist or "
                   "pass --data-dir)\n",
                   c.data_dir.c_str());
      return dpe::tools::kExitUsage;
    }
  }
  return dpe::tools::kExitOk;
}

// Trains, and returns the exit code.
int run(const dpe::tools::TrainConfig& c) {
  try {
    dpe::tools::train(c, stdout);
    return dpe::tools::kExitOk;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train: %s\n", e.what());
    const int code = dpe::tools::exit_code_for(e);
    if (c.mode == "ddp" || c.mode == "fsdp") {
      // A failed rank leaves without tearing its process group down: the peers it would say
      // goodbye to may be stopped or gone (a stopped store server holds every goodbye for the
      // store's reply timeout), and under mpirun MPI_Finalize would wait for ranks that never
      // come. The launcher (or mpirun) ends the others.
      std::fflush(nullptr);
      std::_Exit(code);
    }
    return code;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Line by line, even into the launcher's pipe: a worker that the launcher stops (a failed peer,
  // a restart) loses none of the lines it finished.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  dpe::tools::TrainConfig c;
  c.data_dir = dpe::FashionMnist::kDefaultRoot;
  CLI::App app{
      "Train toy, mlp, convnet or resnet-tiny on Fashion-MNIST, or gpt-small or gpt2 on the\n"
      "language-model corpus (fortunes + the Jargon File, 32k BPE) or your own text (--text).\n"
      "  single: one device.   dp: DataParallel over --devices devices (--device host or cuda).\n"
      "  ddp: one process per device; start it with the launcher, e.g.\n"
      "    tools/bazelw run //tools:launch -- --nproc_per_node=2 bazel-bin/tools/train --mode ddp\n"
      "  or with Open MPI (shared memory on one host, the faster there):\n"
      "    mpirun -np 2 bazel-bin/tools/train --mode ddp"};
  Flags f;
  add_run_flags(app, c, f);
  add_optimizer_flags(app, c, f);
  add_parallel_flags(app, c, f);
  add_precision_flags(app, c);
  add_checkpoint_and_data_flags(app, c, f);
  add_limit_flags(app, c, f);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help or the error
    return code == 0 ? dpe::tools::kExitOk : dpe::tools::kExitUsage;
  }
  const int checked = finish_config(c, f);
  return checked != dpe::tools::kExitOk ? checked : run(c);
}
