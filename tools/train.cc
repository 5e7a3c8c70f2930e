// //tools:train — train the seeds' models on Fashion-MNIST, or a GPT on the language-model corpus,
// on one host device (--mode single), with DataParallel over several (--mode dp), or as one
// process of a DDP job started by //tools:launch (--mode ddp). Exit codes: 0 done, 1 training
// failed, 2 bad command line or data.
#include <CLI/CLI.hpp>

#include <sys/stat.h>

#include <cstdio>
#include <exception>

#include "engine/core/error.h"
#include "engine/data/fashion_mnist.h"
#include "models/by_name.h"
#include "tools/paths.h"
#include "tools/trainer.h"

int main(int argc, char** argv) {
  dpe::tools::TrainConfig c;
  c.data_dir = dpe::FashionMnist::kDefaultRoot;
  CLI::App app{
      "Train toy, mlp or convnet on Fashion-MNIST, or gpt-small or gpt2 on the language-model\n"
      "corpus (fortunes + the Jargon File, 32k BPE), with dpe.\n"
      "  single: one host device.   dp: DataParallel over --devices host devices.\n"
      "  ddp: one process per device; start it with the launcher, e.g.\n"
      "    tools/bazelw run //tools:launch -- --nproc_per_node=2 bazel-bin/tools/train --mode ddp"};
  app.add_option("--mode", c.mode, "single | dp | ddp")
      ->check(CLI::IsMember({"single", "dp", "ddp"}))
      ->capture_default_str();
  app.add_option("--devices", c.devices, "host devices for --mode dp")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--model", c.model,
                 "toy (synthetic regression) | mlp | convnet (Fashion-MNIST) | gpt-small | gpt2 "
                 "(language-model corpus)")
      ->check(CLI::IsMember({"toy", "mlp", "convnet", "gpt-small", "gpt2"}))
      ->capture_default_str();
  app.add_option("--epochs", c.epochs, "epochs to train")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--batch-size", c.batch_size,
                 "batch size: GLOBAL for single and dp (split over the devices), PER PROCESS for "
                 "ddp (the global batch is batch-size x world size), as in PyTorch; default 100 "
                 "images, 16 windows for gpt")
      ->check(CLI::PositiveNumber);
  app.add_option("--optimizer", c.optimizer,
                 "sgd | adamw (PyTorch's defaults: betas 0.9, 0.999, eps 1e-8, weight decay "
                 "0.01); default adamw for gpt, sgd otherwise")
      ->check(CLI::IsMember({"sgd", "adamw"}));
  app.add_option("--lr", c.lr,
                 "learning rate; default 0.01 for sgd, for adamw 1e-3 (gpt-small) or 6e-4 (gpt2)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--scale-lr", c.scale_lr,
               "multiply the learning rate by the world size (ddp) or device count (dp)");
  CLI::Option* momentum =
      app.add_option("--momentum", c.momentum, "SGD momentum")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--weight-decay", c.weight_decay,
                 "weight decay; default 0 for sgd, 0.01 (decoupled) for adamw")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--clip-grad-norm", c.clip_grad_norm,
                 "clip the global gradient 2-norm to this (0: no clipping); default 1.0 for gpt, "
                 "none otherwise")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", c.seed, "seed of the initial weights and the shuffling")->capture_default_str();
  app.add_flag("--sync-bn", c.sync_bn, "SyncBatchNorm across ranks (ddp only)");
  app.add_option("--checkpoint-dir", c.checkpoint_dir,
                 "write checkpoint.safetensors (atomically, rank 0) and metrics.jsonl here after "
                 "every epoch");
  app.add_flag("--resume", c.resume, "continue from the checkpoint in --checkpoint-dir");
  app.add_option("--data-dir", c.data_dir, "folder with the Fashion-MNIST IDX .gz files")
      ->capture_default_str();
  app.add_option("--context", c.context,
                 "gpt: tokens per training window (stride = context); default the model's block "
                 "size (gpt-small 128, gpt2 1024)")
      ->check(CLI::PositiveNumber);
  app.add_option("--vocab-size", c.vocab_size, "gpt: the BPE tokenizer's vocabulary size")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--cache-dir", c.cache_dir,
                 "gpt: where the tokenizer and tokens are cached (default $DPE_CACHE_DIR, "
                 "$XDG_CACHE_HOME/dpe or ~/.cache/dpe)");
  app.add_option("--corpus-documents", c.corpus_documents,
                 "gpt: use only the corpus's first N documents (0: all; for quick tests)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-steps", c.max_steps, "stop each epoch after this many steps (0: all)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--train-samples", c.train_samples,
                 "use only the first N training samples (gpt: windows) (0: all)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--test-samples", c.test_samples,
                 "use only the first N test samples (gpt: validation windows) (0: all)")
      ->check(CLI::NonNegativeNumber);
  bool quiet = false;
  app.add_flag("--no-progress", quiet, "no progress line");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help or the error
    return code == 0 ? 0 : 2;
  }
  c.progress = !quiet;
  c.data_dir = dpe::tools::user_path(c.data_dir);
  c.checkpoint_dir = dpe::tools::user_path(c.checkpoint_dir);
  c.cache_dir = dpe::tools::user_path(c.cache_dir);
  try {
    const dpe::tools::TrainConfig resolved = dpe::tools::resolve_defaults(c);
    DPE_CHECK(momentum->count() == 0 || resolved.optimizer == "sgd",
              "--momentum is SGD's; " << c.model << " trains with " << resolved.optimizer
                                      << " (pass --optimizer sgd to use it)");
  } catch (const dpe::Error& e) {
    std::fprintf(stderr, "train: %s\n", e.what());
    return 2;
  }
  if (c.model != "toy" && !dpe::models::is_language_model(c.model)) {
    struct stat st {};
    if (stat(c.data_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      std::fprintf(stderr,
                   "train: data directory '%s' does not exist (install dataset-fashion-mnist or "
                   "pass --data-dir)\n",
                   c.data_dir.c_str());
      return 2;
    }
  }
  try {
    dpe::tools::train(c, stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train: %s\n", e.what());
    return 1;
  }
}
