// //tools:bench's exit codes (docs/flags.md, "Exit codes"): bad flags and DPE_* values exit with 2
// before anything runs, missing or corrupt Fashion-MNIST files with 3.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/tools/run_tool.h"

namespace {

using dpe::test::has;

std::string g_bench;

int run(const std::string& args, std::string* output, const std::string& env = "") {
  return dpe::test::run_tool(g_bench, args, output, env);
}

TEST(BenchCliTest, UsageErrorsExitWith2) {
  std::string out;
  for (const char* args :
       {"--models foo", "--devices 0", "--batch-size 0", "--batches 0", "--steps 0", "--warmup -1",
        "--gradient-as-bucket-view maybe", "--bucket-view nope", "--models gpt-small --context 5000",
        "--bogus", "--models resnet50 --image-size -1", "--models resnet18", "--threads 0"}) {
    EXPECT_EQ(run(args, &out), 2) << args << ": " << out;
    EXPECT_FALSE(has(out, "machine:")) << args << ": nothing runs: " << out;
    EXPECT_LT(out.size(), 600u) << args << ": " << out;
  }
  EXPECT_EQ(run("--models toy", &out, "DPE_HOST_DEVICES=two"), 2) << out;
  EXPECT_TRUE(has(out, "DPE_HOST_DEVICES='two'")) << out;
}

// --activation-checkpointing has units only in the gpt models: another model exits 2, naming both.
TEST(BenchCliTest, ActivationCheckpointingNeedsAModelWithBlocks) {
  std::string out;
  EXPECT_EQ(run("--models gpt-small,convnet --activation-checkpointing", &out), 2) << out;
  EXPECT_TRUE(has(out, "--activation-checkpointing: convnet has no unit to checkpoint")) << out;
  EXPECT_FALSE(has(out, "machine:")) << "nothing runs: " << out;
}

TEST(BenchCliTest, MissingDataExitsWith3) {
  const char* t = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(t ? t : "/tmp") + "/no_fashion_mnist_here";
  ::mkdir(dir.c_str(), 0755);
  std::string out;
  for (const char* model : {"mlp", "resnet-tiny"}) {
    EXPECT_EQ(run(std::string("--models ") + model + " --data-dir " + dir, &out), 3) << out;
    EXPECT_TRUE(has(out, dir + "/train-")) << out;
  }
}

// A --data-dir that does not exist is a usage error (2), as train's: a flag naming nothing. A
// folder without the files stays a data error (3, above).
TEST(BenchCliTest, MissingDataDirExitsWith2AsTrainsDoes) {
  std::string out;
  EXPECT_EQ(run("--models mlp --data-dir /no/such/folder", &out), 2) << out;
  EXPECT_TRUE(has(out, "--data-dir /no/such/folder: No such file or directory")) << out;
  EXPECT_FALSE(has(out, "machine:")) << out;
  EXPECT_EQ(run("--models mlp --data-dir /etc/hostname", &out), 2) << out;
  EXPECT_TRUE(has(out, "--data-dir /etc/hostname is not a folder")) << out;
}

// --json and --svg are checked before anything runs: a path that cannot be written is a usage
// error (2) naming the flag, the path and why; nothing says "wrote". They used to be written
// (or not) at the end, with "wrote" and 0 either way.
TEST(BenchCliTest, AnUnwritableOutputPathExitsWith2BeforeRunning) {
  const char* t = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(t ? t : "/tmp");
  const std::string quick = "--models toy --devices 1 --steps 1 --warmup 0 --batch-size 8 ";
  std::string out;
  EXPECT_EQ(run(quick + "--json /no/such/folder/bench.json --svg " + dir + "/b.svg", &out), 2)
      << out;
  EXPECT_TRUE(has(out, "--json /no/such/folder/bench.json: cannot write")) << out;
  EXPECT_TRUE(has(out, "No such file or directory")) << out;
  EXPECT_FALSE(has(out, "machine:")) << out;
  EXPECT_FALSE(has(out, "wrote")) << out;
  EXPECT_EQ(run(quick + "--json " + dir + "/b.json --svg " + dir, &out), 2) << out;
  EXPECT_TRUE(has(out, "--svg " + dir + " is a folder")) << out;
  EXPECT_FALSE(has(out, "wrote")) << out;
  struct stat st {};
  EXPECT_NE(::stat((dir + "/b.json").c_str(), &st), 0) << "nothing was written";
  EXPECT_EQ(run(quick + "--json " + dir + "/b.json --svg " + dir + "/b.svg", &out), 0) << out;
  EXPECT_TRUE(has(out, "wrote " + dir + "/b.json and " + dir + "/b.svg")) << out;
}

// --zero adds a ZeRO-1 row beside each DDP row; without DDP rows (one device) it exits 2.
TEST(BenchCliTest, ZeroAddsARowBesideEachDdpRow) {
  const char* t = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(t ? t : "/tmp");
  const std::string quick = "--models toy --steps 1 --warmup 0 --batch-size 8 --ddp-backends gloo "
                            "--json " + dir + "/z.json --svg " + dir + "/z.svg ";
  std::string out;
  EXPECT_EQ(run(quick + "--devices 1 --zero", &out), 2) << out;
  EXPECT_TRUE(has(out, "--zero needs DDP rows")) << out;
  ASSERT_EQ(run(quick + "--devices 2 --zero", &out), 0) << out;
  EXPECT_TRUE(has(out, " ddp/gloo ")) << out;
  EXPECT_TRUE(has(out, "ddp/gloo+zero")) << out;
}

// --ddp-comm-hooks: a DDP row per hook, each with the bytes rank 0's process group was handed per
// step; the bf16 hook's are half the float32 buckets'.
TEST(BenchCliTest, CommHooksAddARowEachWithTheBytesSent) {
  const char* t = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(t ? t : "/tmp");
  const std::string json = dir + "/hooks.json";
  std::string out;
  ASSERT_EQ(run("--models mlp --steps 2 --warmup 1 --batch-size 16 --ddp-backends gloo "
                "--devices 2 --ddp-comm-hooks none,bf16 --json " + json + " --svg " + dir +
                    "/hooks.svg",
                &out),
            0)
      << out;
  EXPECT_TRUE(has(out, "ddp/gloo+bf16hook")) << out;
  EXPECT_TRUE(has(out, "sent ")) << out;
  std::ifstream in(json);
  const nlohmann::json j = nlohmann::json::parse(in);
  double bytes[2] = {0, 0};
  for (const auto& r : j["results"]) {
    if (r["mode"] != "ddp") continue;
    bytes[r["comm_hook"] == "bf16" ? 1 : 0] = r["bytes_per_step"].get<double>();
  }
  EXPECT_GT(bytes[0], 0);
  EXPECT_DOUBLE_EQ(bytes[1] * 2, bytes[0]);
  EXPECT_EQ(run("--models toy --devices 2 --ddp-comm-hooks int8", &out), 2) << out;
}

// --sharding adds FSDP rows beside each DDP row (one per strategy), which need DDP rows too.
TEST(BenchCliTest, ShardingAddsFsdpRowsBesideEachDdpRow) {
  const char* t = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(t ? t : "/tmp");
  const std::string quick = "--models toy --steps 1 --warmup 0 --batch-size 8 --ddp-backends gloo "
                            "--json " + dir + "/f.json --svg " + dir + "/f.svg ";
  std::string out;
  EXPECT_EQ(run(quick + "--devices 1 --sharding full", &out), 2) << out;
  EXPECT_TRUE(has(out, "--sharding needs DDP rows")) << out;
  EXPECT_EQ(run(quick + "--devices 2 --sharding half", &out), 2) << out;
  ASSERT_EQ(run(quick + "--devices 2 --sharding full,grad-op", &out), 0) << out;
  EXPECT_TRUE(has(out, " ddp/gloo ")) << out;
  EXPECT_TRUE(has(out, "fsdp/gloo+full")) << out;
  EXPECT_TRUE(has(out, "fsdp/gloo+grad-op")) << out;
}

// --device cuda where no CUDA device exists (this machine, or a build without CUDA): exit 2, and
// the message says how many were needed and why there are none. Skipped where a GPU is present.
TEST(BenchCliTest, CudaWithoutAGpuIsAUsageError) {
  if (::access("/dev/nvidia0", F_OK) == 0) GTEST_SKIP() << "a GPU is present";
  std::string out;
  EXPECT_EQ(run("--device cuda --models toy --devices 1,2", &out), 2) << out;
  EXPECT_TRUE(out.find("--device cuda needs 2 CUDA device") != std::string::npos) << out;
  // CUDA devices have 16-bit kernels: --precision is no reason to refuse, the missing GPU is.
  EXPECT_EQ(run("--device cuda --models toy --devices 1 --precision fp16", &out), 2) << out;
  EXPECT_TRUE(out.find("--device cuda needs 1 CUDA device") != std::string::npos) << out;
  EXPECT_EQ(run("--device cuda --models toy --ddp-backends gloo", &out), 2);
  EXPECT_TRUE(out.find("gloo does not run on --device cuda") != std::string::npos) << out;
  EXPECT_EQ(run("--models toy --ddp-backends nccl", &out), 2);  // host devices
  EXPECT_TRUE(out.find("nccl does not run on --device host") != std::string::npos) << out;
}

// Each count and batch flag says in --help what it counts; DDP's defaults are train's.
TEST(BenchCliTest, HelpSaysWhatTheFlagsCount) {
  std::string out;
  EXPECT_EQ(run("--help", &out), 0);
  for (const char* text : {"--batch-size", "GLOBAL batch sizes", "device COUNTS",
                           "--gradient-as-bucket-view", "as train's"}) {
    EXPECT_TRUE(has(out, text)) << text << ": " << out;
  }
  EXPECT_FALSE(has(out, "--ddp-worker")) << out;
  // Boolean flags show their real default, not the value a lone flag takes (BOOLEAN=true).
  EXPECT_FALSE(has(out, "BOOLEAN")) << out;
  for (const char* text : {"--zero [true|false]", "--fuse [true|false]", "(alone: true; default: "
                                                                         "false)"}) {
    EXPECT_TRUE(has(out, text)) << text << ": " << out;
  }
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_cli_test <path to tools/bench>\n");
    return 2;
  }
  g_bench = argv[1];
  return RUN_ALL_TESTS();
}
