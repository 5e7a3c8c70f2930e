// //tools:demo's exit codes (docs/flags.md, "Exit codes"): bad flags and DPE_* values exit with 2
// before anything runs, a --data-dir that is not a folder with 2, missing Fashion-MNIST files in
// one with 3; the older flag spellings (--lm-batch, --lm-context, --train-batch) keep working.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/tools/run_tool.h"

namespace {

using dpe::test::has;

std::string g_demo;

int run(const std::string& args, std::string* output, const std::string& env = "") {
  return dpe::test::run_tool(g_demo, args, output, env);
}

TEST(DemoCliTest, UsageErrorsExitWith2BeforeAnythingRuns) {
  std::string out;
  for (const char* args :
       {"--model foo", "--devices 0", "--batch-size 0", "--lm-devices 1", "--lm-batch-size 0",
        "--lm-batch 0", "--context 0", "--lm-context 0", "--train-batch-size 0", "--train-batch 0",
        "--steps -1", "--bogus", "--model convnet --data-dir /no/such/folder"}) {
    EXPECT_EQ(run(args, &out), 2) << args << ": " << out;
    EXPECT_FALSE(has(out, "In Model")) << args << ": nothing runs: " << out;
    EXPECT_LT(out.size(), 600u) << args << ": " << out;
  }
  EXPECT_EQ(run("", &out, "DPE_HOST_DEVICES=two"), 2) << out;
  EXPECT_TRUE(has(out, "DPE_HOST_DEVICES='two'")) << out;
}

// --context above the model's block size is refused naming the range, as train refuses it; it
// was cut to the block size (128 for gpt-small) without a word. --steps 0 keeps the check quick.
TEST(DemoCliTest, ContextAboveTheBlockSizeIsAUsageError) {
  std::string out;
  for (const char* flag : {"--context", "--lm-context"}) {
    EXPECT_EQ(run(std::string(flag) + " 100000 --steps 0", &out), 2) << flag << ": " << out;
    EXPECT_TRUE(has(out, "--context 100000 must be between 1 and gpt-small's block size 128"))
        << out;
    EXPECT_FALSE(has(out, "In Model")) << out;
  }
  EXPECT_EQ(run("--model gpt2 --context 2048 --steps 0", &out), 2) << out;
  EXPECT_TRUE(has(out, "between 1 and gpt2's block size 1024")) << out;
  EXPECT_EQ(run("--context 128 --steps 0", &out), 0) << out;
}

TEST(DemoCliTest, MissingDataExitsWith3) {
  const char* t = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(t ? t : "/tmp") + "/no_fashion_mnist_here";
  ::mkdir(dir.c_str(), 0755);
  std::string out;
  EXPECT_EQ(run("--model mlp --steps 1 --data-dir " + dir, &out), 3) << out;
  EXPECT_TRUE(has(out, dir + "/train-")) << out;
}

TEST(DemoCliTest, DevicesOverridingTheEnvironmentSaysSo) {
  std::string out;
  EXPECT_EQ(run("--devices 3 --steps 0", &out, "DPE_HOST_DEVICES=2"), 0) << out;
  EXPECT_TRUE(has(out, "--devices 3 overrides DPE_HOST_DEVICES=2")) << out;
  EXPECT_TRUE(has(out, "Let's use 3 devices!")) << out;
}

// --device cuda where no CUDA device exists (this machine, or a build without CUDA): exit 2, and
// the message says how many were needed and why there are none. Skipped where a GPU is present.
TEST(DemoCliTest, CudaWithoutAGpuIsAUsageError) {
  if (::access("/dev/nvidia0", F_OK) == 0) GTEST_SKIP() << "a GPU is present";
  std::string out;
  EXPECT_EQ(run("--device cuda --steps 0", &out), 2) << out;
  EXPECT_TRUE(out.find("--device cuda needs 1 CUDA device") != std::string::npos) << out;
}

// Each batch flag says in --help whether it is global or per device; the older spellings run
// the same demo as the new ones.
TEST(DemoCliTest, BatchFlagsSayWhatTheyCountAndOlderSpellingsWork) {
  std::string out;
  EXPECT_EQ(run("--help", &out), 0);
  for (const char* text : {"--batch-size", "--train-batch-size", "--lm-batch-size", "--context",
                           "GLOBAL batch size of the seeds' demo",
                           "GLOBAL batch size of the training part", "batch size PER DEVICE"}) {
    EXPECT_TRUE(has(out, text)) << text << ": " << out;
  }
  EXPECT_FALSE(has(out, "--lm-ddp-worker")) << out;
  std::string now, old;
  const std::string common = "--model toy --steps 2 --devices 2 --batch-size 30";
  EXPECT_EQ(run(common + " --train-batch-size 12", &now), 0) << now;
  EXPECT_EQ(run(common + " --train-batch 12", &old), 0) << old;
  EXPECT_TRUE(has(now, "global batch 12, 2 steps")) << now;
  EXPECT_TRUE(has(old, "global batch 12, 2 steps")) << old;
  // The language-model part, its DDP ranks included (they get the per-device batch too).
  const std::string lm = "--model gpt-small --lm-devices 2 --lm-steps 1 --steps 1 --devices 2";
  EXPECT_EQ(run(lm + " --lm-batch-size 1 --context 8", &now), 0) << now;
  EXPECT_EQ(run(lm + " --lm-batch 1 --lm-context 8 --no-lm-sharded", &old), 0) << old;
  for (const std::string* o : {&now, &old}) {
    EXPECT_TRUE(has(*o, "1 sequences of 8 tokens (random) per device")) << *o;
    EXPECT_TRUE(has(*o, "DDP ranks")) << *o;
  }
  // The ways out beyond DDP, each with activation checkpointing, unless --no-lm-sharded.
  for (const char* row : {"DDP + ZeRO-1", "FSDP SHARD_GRAD_OP", "FSDP FULL_SHARD +AC"}) {
    EXPECT_TRUE(has(now, row)) << now;
    EXPECT_FALSE(has(old, row)) << old;
  }
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: demo_cli_test <path to tools/demo>\n");
    return 2;
  }
  g_demo = argv[1];
  return RUN_ALL_TESTS();
}
