// //tools:train — train the seeds' models on Fashion-MNIST on one host device (--mode single),
// with DataParallel over several (--mode dp), or as one process of a DDP job started by
// //tools:launch (--mode ddp). Exit codes: 0 done, 1 training failed, 2 bad command line or data.
#include <CLI/CLI.hpp>

#include <sys/stat.h>

#include <cstdio>
#include <exception>

#include "engine/core/error.h"
#include "engine/data/fashion_mnist.h"
#include "tools/paths.h"
#include "tools/trainer.h"

int main(int argc, char** argv) {
  dpe::tools::TrainConfig c;
  c.data_dir = dpe::FashionMnist::kDefaultRoot;
  CLI::App app{
      "Train toy, mlp or convnet on Fashion-MNIST with dpe.\n"
      "  single: one host device.   dp: DataParallel over --devices host devices.\n"
      "  ddp: one process per device; start it with the launcher, e.g.\n"
      "    tools/bazelw run //tools:launch -- --nproc_per_node=2 bazel-bin/tools/train --mode ddp"};
  app.add_option("--mode", c.mode, "single | dp | ddp")
      ->check(CLI::IsMember({"single", "dp", "ddp"}))
      ->capture_default_str();
  app.add_option("--devices", c.devices, "host devices for --mode dp")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--model", c.model, "toy (synthetic regression) | mlp | convnet")
      ->check(CLI::IsMember({"toy", "mlp", "convnet"}))
      ->capture_default_str();
  app.add_option("--epochs", c.epochs, "epochs to train")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--batch-size", c.batch_size,
                 "batch size: GLOBAL for single and dp (split over the devices), PER PROCESS for "
                 "ddp (the global batch is batch-size x world size), as in PyTorch")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--lr", c.lr, "learning rate")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_flag("--scale-lr", c.scale_lr,
               "multiply the learning rate by the world size (ddp) or device count (dp)");
  app.add_option("--momentum", c.momentum, "SGD momentum")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--weight-decay", c.weight_decay, "SGD weight decay")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--seed", c.seed, "seed of the initial weights and the shuffling")->capture_default_str();
  app.add_flag("--sync-bn", c.sync_bn, "SyncBatchNorm across ranks (ddp only)");
  app.add_option("--checkpoint-dir", c.checkpoint_dir,
                 "write checkpoint.safetensors (atomically, rank 0) and metrics.jsonl here after "
                 "every epoch");
  app.add_flag("--resume", c.resume, "continue from the checkpoint in --checkpoint-dir");
  app.add_option("--data-dir", c.data_dir, "folder with the Fashion-MNIST IDX .gz files")
      ->capture_default_str();
  app.add_option("--max-steps", c.max_steps, "stop each epoch after this many steps (0: all)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--train-samples", c.train_samples, "use only the first N training samples (0: all)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--test-samples", c.test_samples, "use only the first N test samples (0: all)")
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
  if (c.model != "toy") {
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
