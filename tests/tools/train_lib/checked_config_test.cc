// The run's checks before any work (tools/train_lib/checked_config.h): a bad flag value, flag
// combination or DPE_* / ddp environment value, --device cuda without enough CUDA devices, or a
// fresh run into a --checkpoint-dir that holds a run is a UsageError naming the flag or the
// variable; a usable config comes back with the model's defaults filled in.
#include "tools/train_lib/checked_config.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/tools/train_lib/train_test_util.h"
#include "tools/common/exit_codes.h"
#include "tools/train_lib/checkpoint_files.h"
#include "tools/train_lib/trainer.h"

namespace dpe::tools {
namespace {

using train_test::tmpdir;
using train_test::small;
using train_test::write_file;

// checked_config's UsageError message for `c` ("" when it accepts it).
std::string usage_error(const TrainConfig& c) {
  try {
    checked_config(c);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(CheckedConfigTest, BadFlagValuesAreUsageErrorsOfTrain) {
  TrainConfig c = small("toy", "single");
  c.lr = std::nanf("");
  EXPECT_THROW(train(c, stdout), UsageError);
  c = small("toy", "single");
  c.batch_size = -1;
  EXPECT_THROW(train(c, stdout), UsageError);
}

TEST(CheckedConfigTest, AUsableConfigComesBackWithTheModelsDefaults) {
  TrainConfig c = small("toy", "single");
  c.optimizer = "";
  c.batch_size = 0;
  const TrainConfig r = checked_config(c);
  EXPECT_EQ(r.optimizer, "sgd");
  EXPECT_EQ(r.batch_size, 100);
  EXPECT_EQ(r.lr, 0.05f);  // as given
}

TEST(CheckedConfigTest, EachBadValueIsNamed) {
  TrainConfig c = small("toy", "single");
  c.mode = "pipeline";
  EXPECT_EQ(usage_error(c), "unknown mode 'pipeline' (expected single, dp, ddp or fsdp)");
  c = small("toy", "single");
  c.epochs = 0;
  EXPECT_EQ(usage_error(c), "--epochs 0 must be between 1 and 1000000");
  c = small("toy", "dp");
  c.devices = 65;
  EXPECT_EQ(usage_error(c), "--devices 65 must be between 1 and 64");
  c = small("toy", "single");
  c.resume = true;
  EXPECT_EQ(usage_error(c), "--resume needs --checkpoint-dir");
  c = small("toy", "single");
  c.max_steps = -1;
  EXPECT_EQ(usage_error(c), "--max-steps and --max-steps-per-epoch must be at least 0");
  c = small("toy", "single");
  c.zero = true;
  EXPECT_EQ(usage_error(c), "--zero needs --mode ddp");
  c = small("toy", "single");
  c.sharding = "half";
  EXPECT_EQ(usage_error(c), "--sharding half must be full or grad-op");
  c = small("toy", "single");
  c.timeout = 0;
  EXPECT_EQ(usage_error(c), "--timeout 0 must be a number of seconds from 0.001 to 1e8");
  c = small("toy", "single");
  c.momentum = -1;
  EXPECT_EQ(usage_error(c), "--momentum -1 must be a finite number >= 0");
  c = small("toy", "ddp");
  c.backend = "nccl";
  EXPECT_EQ(usage_error(c), "--backend nccl needs --device cuda (NCCL reduces CUDA tensors)");
}

// --mode ddp started without a launcher: no RANK and WORLD_SIZE to meet the other ranks by.
TEST(CheckedConfigTest, ADdpRunNeedsItsRanks) {
  for (const char* variable : {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"}) {
    if (std::getenv(variable) != nullptr) GTEST_SKIP() << variable << " is set";
  }
  TrainConfig c = small("toy", "ddp");
  c.backend = "gloo";
  EXPECT_EQ(usage_error(c).rfind("--mode ddp needs RANK and WORLD_SIZE", 0), 0u)
      << usage_error(c);
}

// A fresh run (no --resume) into a directory that holds a run: refused, naming what is there.
TEST(CheckedConfigTest, AFreshRunIntoARunsCheckpointDirIsRefused) {
  TrainConfig c = small("toy", "single");
  c.checkpoint_dir = tmpdir("holds_a_run");
  ::mkdir(c.checkpoint_dir.c_str(), 0755);
  EXPECT_EQ(usage_error(c), "");  // empty: a fresh run may start there
  write_file(metrics_path(c.checkpoint_dir), "{}\n");
  write_file(checkpoint_manifest_path(c.checkpoint_dir), "{}");
  EXPECT_EQ(usage_error(c), "--checkpoint-dir " + c.checkpoint_dir +
                                " already holds a run (checkpoint.json, metrics.jsonl): pass "
                                "--resume to continue it, or choose another directory (nothing "
                                "was written)");
  c.resume_auto = true;
  EXPECT_EQ(usage_error(c), "");
}

}  // namespace
}  // namespace dpe::tools
