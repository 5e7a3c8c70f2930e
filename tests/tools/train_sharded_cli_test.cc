// //tools:train's sharded modes, 2 ranks over Gloo:
// - --zero (ZeroRedundancyOptimizer under DDP) writes the same checkpoint files (model and
//   optimizer) as the run without it, for SGD with momentum and AdamW; a --zero run resumed from
//   its checkpoint ends where the uninterrupted plain run does;
// - --mode fsdp (both --sharding values) on a small gpt writes the files DDP writes, within float
//   tolerance (a reduce-scatter sums in another order), and resumes from them;
// - --mode fsdp on a model without transformer blocks (toy: one unit) writes DDP's files too;
// - the flags without their mode exit 2 naming the flag.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "engine/io/safetensors.h"
#include "engine/tensor/tensor.h"
#include "tests/tools/run_tool.h"
#include "tests/util/free_port.h"

namespace {

using dpe::test::has;

std::string g_train;

const std::string kToy =
    "--mode ddp --model toy --train-samples 400 --test-samples 64 --no-progress";

std::string temp_dir(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  return std::string(t ? t : "/tmp") + "/" + name;
}

// Two ranks over Gloo, started as dpe-launch would; rank 1's output is dropped. Nonzero when
// either rank failed.
int run_two_ranks(const std::string& args, std::string* out) {
  const std::string env = "WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                          std::to_string(dpe::test::free_port()) + " DPE_HOST_DEVICES=1";
  const std::string both = "(RANK=0 LOCAL_RANK=0 " + env + " " + g_train + " " + args +
                           " & p=$!; RANK=1 LOCAL_RANK=1 " + env + " " + g_train + " " + args +
                           " > /dev/null 2>&1; b=$?; wait $p; a=$?; exit $((a | b)))";
  return dpe::test::run_tool(both, "", out);
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The files of two checkpoint directories: the same tensors under the same names (within `tol`)
// and, with `same_bytes` (ZeRO's step is the plain step on each shard), the same bytes.
void expect_same_checkpoint(const std::string& a, const std::string& b, float tol = 1e-6f,
                            bool same_bytes = true) {
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    const auto ta = dpe::read_safetensors(a + "/" + file).tensors;
    const auto tb = dpe::read_safetensors(b + "/" + file).tensors;
    ASSERT_EQ(ta.size(), tb.size()) << file;
    ASSERT_GT(ta.size(), 0u) << file;
    for (size_t k = 0; k < ta.size(); ++k) {
      ASSERT_EQ(ta[k].first, tb[k].first) << file;
      ASSERT_EQ(ta[k].second.dtype(), tb[k].second.dtype()) << file << " " << ta[k].first;
      if (ta[k].second.dtype() == dpe::DType::kInt64) {
        EXPECT_EQ(ta[k].second.to_vector<int64_t>(), tb[k].second.to_vector<int64_t>());
        continue;
      }
      const auto va = ta[k].second.to_vector<float>(), vb = tb[k].second.to_vector<float>();
      ASSERT_EQ(va.size(), vb.size());
      for (size_t i = 0; i < va.size(); ++i) {
        ASSERT_NEAR(va[i], vb[i], tol * (1 + std::abs(vb[i])))
            << file << " " << ta[k].first << "[" << i << "]";
      }
    }
    if (same_bytes) {
      EXPECT_EQ(bytes_of(a + "/" + file), bytes_of(b + "/" + file)) << file;
    }
  }
}

TEST(TrainZeroCliTest, WithoutDdpExitsWith2) {
  std::string out;
  EXPECT_EQ(dpe::test::run_tool(g_train, "--model toy --zero", &out), 2) << out;
  EXPECT_TRUE(has(out, "--zero needs --mode ddp")) << out;
  EXPECT_EQ(dpe::test::run_tool(g_train, "--mode dp --model toy --zero", &out), 2) << out;
  EXPECT_TRUE(has(out, "--zero needs --mode ddp")) << out;
}

TEST(TrainZeroCliTest, CheckpointsEqualPlainDdpsAndResume) {
  for (const std::string optimizer : {"sgd", "adamw"}) {
    SCOPED_TRACE(optimizer);
    const std::string args = kToy + " --epochs 2 --optimizer " + optimizer;
    const std::string plain = temp_dir("plain_" + optimizer), zero = temp_dir("zero_" + optimizer),
                      resumed = temp_dir("resumed_" + optimizer);
    std::string out;
    ASSERT_EQ(run_two_ranks(args + " --checkpoint-dir " + plain, &out), 0) << out;
    ASSERT_EQ(run_two_ranks(args + " --zero --checkpoint-dir " + zero, &out), 0) << out;
    EXPECT_TRUE(has(out, "ZeRO-1 " + optimizer)) << out;
    expect_same_checkpoint(zero, plain);
    // One epoch with --zero, then resumed with --zero: every rank loads its shard of the file.
    ASSERT_EQ(run_two_ranks(kToy + " --epochs 1 --optimizer " + optimizer +
                                " --zero --checkpoint-dir " + resumed,
                            &out),
              0)
        << out;
    ASSERT_EQ(run_two_ranks(args + " --zero --resume --checkpoint-dir " + resumed, &out), 0)
        << out;
    EXPECT_TRUE(has(out, "resumed from")) << out;
    expect_same_checkpoint(resumed, plain);
  }
}

// gpt-small on a slice of the corpus with a small tokenizer cached in the test's directory,
// windows of 16 tokens, two epochs of two steps.
std::string tiny_gpt() {
  return "--model gpt-small --context 16 --batch-size 2 --epochs 2 --max-steps-per-epoch 2 "
         "--test-samples 4 --train-samples 16 --corpus-documents 600 --vocab-size 400 "
         "--no-progress --cache-dir " +
         temp_dir("lm_cache");
}

TEST(TrainFsdpCliTest, ShardingOutsideFsdpExitsWith2) {
  std::string out;
  EXPECT_EQ(dpe::test::run_tool(g_train, "--model toy --sharding grad-op", &out), 2) << out;
  EXPECT_TRUE(has(out, "--sharding needs --mode fsdp")) << out;
}

TEST(TrainFsdpCliTest, AModelWithoutBlocksIsOneUnit) {
  const std::string ddp = temp_dir("toy_ddp"), fsdp = temp_dir("toy_fsdp");
  std::string out;
  ASSERT_EQ(run_two_ranks(kToy + " --epochs 1 --optimizer adamw --checkpoint-dir " + ddp, &out), 0)
      << out;
  std::string args = kToy.substr(kToy.find(' ', 7));  // kToy without its "--mode ddp"
  ASSERT_EQ(run_two_ranks("--mode fsdp" + args + " --epochs 1 --optimizer adamw --checkpoint-dir " +
                              fsdp,
                          &out),
            0)
      << out;
  expect_same_checkpoint(fsdp, ddp, 2e-5f, /*same_bytes=*/false);
}

TEST(TrainFsdpCliTest, CheckpointsEqualDdpsAndResume) {
  const std::string ddp = temp_dir("fsdp_ddp");
  std::string out;
  ASSERT_EQ(run_two_ranks("--mode ddp " + tiny_gpt() + " --checkpoint-dir " + ddp, &out), 0)
      << out;
  for (const std::string sharding : {"full", "grad-op"}) {
    SCOPED_TRACE(sharding);
    const std::string fsdp = temp_dir("fsdp_" + sharding),
                      resumed = temp_dir("fsdp_resumed_" + sharding);
    const std::string args = "--mode fsdp --sharding " + sharding + " " + tiny_gpt();
    ASSERT_EQ(run_two_ranks(args + " --checkpoint-dir " + fsdp, &out), 0) << out;
    EXPECT_TRUE(has(out, "mode fsdp (2 process(es))")) << out;
    expect_same_checkpoint(fsdp, ddp, 2e-5f, /*same_bytes=*/false);
    // One epoch, then resumed for the second: every rank loads its shards of the full files.
    ASSERT_EQ(run_two_ranks(args + " --max-steps 2 --checkpoint-dir " + resumed, &out), 0) << out;
    ASSERT_EQ(run_two_ranks(args + " --resume --checkpoint-dir " + resumed, &out), 0) << out;
    EXPECT_TRUE(has(out, "resumed from")) << out;
    expect_same_checkpoint(resumed, fsdp, 1e-6f, /*same_bytes=*/false);
  }
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: train_sharded_cli_test <path to tools/train>\n");
    return 2;
  }
  g_train = argv[1];
  return RUN_ALL_TESTS();
}
