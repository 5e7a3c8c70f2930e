// The run's config (tools/train_lib/train_config.h): the models train takes, each model's
// defaults, flags that do not fit the model named, the ranked modes and the backend --backend
// auto stands for.
#include "tools/train_lib/train_config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/tools/train_lib/train_test_util.h"
#include "tools/common/exit_codes.h"
#include "tools/train_lib/trainer.h"

namespace dpe::tools {
namespace {

using train_test::small;
using train_test::tiny_gpt;
using train_test::error_of;

// resolve_defaults' UsageError message for `c` ("" when it accepts it).
std::string usage_error(const TrainConfig& c) {
  try {
    resolve_defaults(c);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(TrainConfigTest, TrainTakesTheRegressionTheLanguageModelsAndThe28x28Classifiers) {
  const std::vector<std::string> names = trainable_models();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.front(), "toy");
  for (const char* name : {"mlp", "convnet", "resnet-tiny", "gpt-small", "gpt2"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
  // torchvision's ResNet-50 is made for 224x224 images, not Fashion-MNIST's.
  EXPECT_EQ(std::find(names.begin(), names.end(), "resnet50"), names.end());
}

TEST(TrainConfigTest, ResolveDefaultsFillsInTheModelsDefaults) {
  TrainConfig c;
  c.model = "convnet";
  TrainConfig r = resolve_defaults(c);
  EXPECT_EQ(r.optimizer, "sgd");
  EXPECT_EQ(r.lr, 0.01f);
  EXPECT_EQ(r.weight_decay, 0.0f);
  EXPECT_EQ(r.clip_grad_norm, 0.0f);
  EXPECT_EQ(r.batch_size, 100);
  EXPECT_EQ(r.context, 0);
  c.model = "gpt-small";
  r = resolve_defaults(c);
  EXPECT_EQ(r.optimizer, "adamw");
  EXPECT_EQ(r.lr, 1e-3f);
  EXPECT_EQ(r.weight_decay, 0.01f);
  EXPECT_EQ(r.clip_grad_norm, 1.0f);
  EXPECT_EQ(r.batch_size, 16);
  EXPECT_EQ(r.context, 128);  // the block size
  c.model = "gpt2";
  r = resolve_defaults(c);
  EXPECT_EQ(r.lr, 6e-4f);
  EXPECT_EQ(r.context, 1024);
  // What the flags gave stays.
  c.optimizer = "sgd";
  c.lr = 0.5f;
  c.batch_size = 7;
  c.context = 64;
  r = resolve_defaults(c);
  EXPECT_EQ(r.lr, 0.5f);
  EXPECT_EQ(r.batch_size, 7);
  EXPECT_EQ(r.context, 64);
  EXPECT_EQ(r.weight_decay, 0.0f);  // SGD's
}

TEST(TrainConfigTest, FlagsThatDoNotFitTheModelAreUsageErrors) {
  TrainConfig c;
  c.model = "resnet50";
  EXPECT_EQ(usage_error(c).rfind("--model resnet50: train takes one of toy, ", 0), 0u)
      << usage_error(c);
  c.model = "gpt-small";
  c.sync_bn = true;
  EXPECT_EQ(usage_error(c), "--sync-bn: gpt-small has no BatchNorm to synchronise");
  c.sync_bn = false;
  c.vocab_size = 1;
  EXPECT_EQ(usage_error(c), "--vocab-size 1 is too small");
  c = TrainConfig();
  c.model = "mlp";
  c.activation_checkpointing = true;
  EXPECT_EQ(usage_error(c).rfind("--activation-checkpointing: mlp has no unit to checkpoint", 0),
            0u)
      << usage_error(c);
  c.activation_checkpointing = false;
  c.text = "notes.txt";
  EXPECT_EQ(usage_error(c), "--text is the language models' data (gpt-small, gpt2), not mlp's");
}

TEST(TrainConfigTest, BadGptSettingsAreNamed) {
  TrainConfig c = tiny_gpt("single");
  c.context = 129;
  EXPECT_NE(error_of(c).find("--context 129 must be between 1 and gpt-small's block size 128"),
            std::string::npos)
      << error_of(c);
  c = tiny_gpt("single");
  c.optimizer = "rmsprop";
  EXPECT_NE(error_of(c).find("unknown optimizer 'rmsprop'"), std::string::npos);
  c = small("mlp", "single");
  c.context = 16;
  EXPECT_NE(error_of(c).find("--context applies to the gpt models only"), std::string::npos);
}

TEST(TrainConfigTest, RankedModesAndTheBackendAutoStandsFor) {
  TrainConfig c;
  for (const char* mode : {"single", "dp"}) {
    c.mode = mode;
    EXPECT_FALSE(ranked(c)) << mode;
  }
  for (const char* mode : {"ddp", "fsdp"}) {
    c.mode = mode;
    EXPECT_TRUE(ranked(c)) << mode;
  }
  c.backend = "gloo";
  c.device = "cuda";
  EXPECT_EQ(ddp_backend(c), "gloo");  // as given
  c.backend = "auto";
  EXPECT_EQ(ddp_backend(c), "nccl");
  c.device = "host";
  const char* mpirun = std::getenv("OMPI_COMM_WORLD_RANK");
  const std::string saved = mpirun ? mpirun : "";
  ::unsetenv("OMPI_COMM_WORLD_RANK");
  EXPECT_EQ(ddp_backend(c), "gloo");
  ::setenv("OMPI_COMM_WORLD_RANK", "0", 1);
  EXPECT_EQ(ddp_backend(c), "mpi");  // started by mpirun
  if (mpirun) {
    ::setenv("OMPI_COMM_WORLD_RANK", saved.c_str(), 1);
  } else {
    ::unsetenv("OMPI_COMM_WORLD_RANK");
  }
}

}  // namespace
}  // namespace dpe::tools
