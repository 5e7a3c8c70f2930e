// //tools:sim from the command line: a table for each GPU count, JSON with DataParallel's and
// DDP's predictions (DataParallel refused beyond one node), the SVG; bad flags exit with 2; the
// older flag spellings (--batch, --gpu0-batch, --seq, --image) mean what the new ones do.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <utility>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tests/tools/run_tool.h"

namespace {

using dpe::test::has;

std::string g_sim;

int run(const std::string& args, std::string* output) {
  return dpe::test::run_tool(g_sim, args, output);
}

std::string tmp(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  return std::string(t ? t : "/tmp") + "/" + name;
}

TEST(SimCliTest, PredictsEveryGpuCountAndWritesJsonAndSvg) {
  std::string out;
  const std::string json = tmp("sim.json"), svg = tmp("sim.svg");
  ASSERT_EQ(run("--model mlp --batch-size 32 --cluster dgx-a100 --gpus 1,2,8,16 --json " + json +
                    " --svg " + svg,
                &out),
            0)
      << out;
  EXPECT_TRUE(has(out, "2 nodes of 8 x A100-SXM4-80GB")) << out;
  std::ifstream in(json);
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j["runs"].size(), 8u);  // DataParallel and DDP for each count
  for (const auto& r : j["runs"]) {
    const bool dp_beyond_node = r["mode"] == "dp" && r["gpus"] == 16;
    EXPECT_EQ(r["possible"], !dp_beyond_node) << r.dump();
    if (dp_beyond_node) continue;
    EXPECT_GT(r["step_ms"].get<double>(), 0) << r.dump();
    EXPECT_EQ(r["peak_gib"].size(), r["gpus"].get<size_t>()) << r.dump();
    double sum = 0;
    for (const auto& [name, ms] : r["phases_ms"].items()) sum += ms.get<double>();
    EXPECT_NEAR(sum, r["step_ms"].get<double>(), 1e-6) << r.dump();
  }
  std::ifstream s(svg);
  std::stringstream text;
  text << s.rdbuf();
  EXPECT_TRUE(has(text.str(), "<svg")) << text.str().substr(0, 200);
  EXPECT_TRUE(has(text.str(), "DataParallel")) << text.str().substr(0, 200);
}

TEST(SimCliTest, Gpu0BatchIsDeviceZerosChunkAndCountsInTheSpeedup) {
  std::string out;
  const std::string json = tmp("sim_gpu0.json");
  ASSERT_EQ(
      run("--model mlp --batch-size 32 --gpu0-batch-size 0 --cluster pcie-a100 --gpus 1,4 --json " +
              json + " --svg " + tmp("sim_gpu0.svg"),
          &out),
      0)
      << out;
  EXPECT_TRUE(has(out, "device 0 takes 0, the others 32 each")) << out;
  std::ifstream in(json);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["gpu0_batch"], 0);
  // Four GPUs with nothing on device 0 take 96 samples, not 128: DataParallel's speed-up is
  // 96 / 32 x (one GPU's step / the step), below the GPU count even if the step did not grow.
  double one = 0, four = 0;
  for (const auto& r : j["runs"]) {
    if (r["mode"] != "dp") continue;
    (r["gpus"] == 1 ? one : four) = r["step_ms"].get<double>();
  }
  ASSERT_GT(one, 0);
  ASSERT_GT(four, 0);
  char want[32];
  std::snprintf(want, sizeof want, "%.2f", 3.0 * one / four);
  std::istringstream lines(out);
  std::string line, dp_x;
  while (std::getline(lines, line)) {
    std::istringstream cols(line);
    std::string gpus, dp_ms, ddp_ms;
    if (cols >> gpus >> dp_ms >> ddp_ms >> dp_x && gpus == "4") break;
    dp_x.clear();
  }
  EXPECT_EQ(dp_x, want) << out;  // the table's "DP x" column
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// Counts below, at and above one node on every preset, and a count that fits no node (16: DataParallel
// has no row to draw, and on the 2-GPU presets 1..8 do not fit either): a table, the JSON and the
// plot, never a crash. The toy model keeps it quick under the sanitizers.
TEST(SimCliTest, EveryPresetTakesCountsBelowAtAndAboveOneNode) {
  for (const char* cluster : {"titanrtx-nvlink", "titanrtx-pcie", "dgx1-v100", "dgx-a100",
                              "dgx-h100", "pcie-a100", "pcie-t4", "pcie-l4", "pcie-rtx4090"}) {
    for (const char* gpus : {"1,2,3,4,8,9,16", "16"}) {
      std::string out;
      const std::string json = tmp("sim_presets.json"), svg = tmp("sim_presets.svg");
      std::remove(svg.c_str());
      ASSERT_EQ(run(std::string("--model toy --batch-size 4 --cluster ") + cluster + " --gpus " +
                        gpus + " --json " + json + " --svg " + svg,
                    &out),
                0)
          << cluster << " --gpus " << gpus << ": " << out;
      EXPECT_EQ(read_json(json)["runs"].size(),
                2 * static_cast<size_t>(std::count(gpus, gpus + std::strlen(gpus), ',') + 1));
      std::ifstream plot(svg);
      std::stringstream text;
      text << plot.rdbuf();
      EXPECT_TRUE(has(text.str(), "</svg>")) << cluster << " --gpus " << gpus;
    }
  }
}

// Every speed-up is against one GPU without DataParallel or DDP, its own row: three GPUs alone do
// not make 3.00x.
TEST(SimCliTest, SpeedupsAreAgainstOneGpuWithoutDataParallelOrDdp) {
  std::string out;
  const std::string json = tmp("sim_base.json");
  ASSERT_EQ(run("--model mlp --batch-size 32 --cluster pcie-a100 --gpus 3 --json " + json +
                    " --svg " + tmp("sim_base.svg"),
                &out),
            0)
      << out;
  EXPECT_TRUE(has(out, "(one GPU, no DP/DDP)")) << out;
  const nlohmann::json j = read_json(json);
  EXPECT_EQ(j["single_gpu"]["mode"], "single");
  EXPECT_EQ(j["single_gpu"]["gpus"], 1);
  const double base = j["single_gpu"]["step_ms"].get<double>();
  double ddp = 0;
  for (const auto& r : j["runs"]) {
    if (r["mode"] == "ddp") ddp = r["step_ms"].get<double>();
  }
  ASSERT_GT(ddp, base);  // the all-reduce and DDP's own costs
  char want[32];
  std::snprintf(want, sizeof want, "%.2f", 3 * base / ddp);
  EXPECT_TRUE(has(out, want)) << want << "\n" << out;
  EXPECT_FALSE(has(out, "3.00")) << out;
  // The topology comes after the table, and says when P2P is off.
  EXPECT_LT(out.find("DDP x"), out.find("nvidia-smi topo -m")) << out;
  ASSERT_EQ(run("--model mlp --batch-size 8 --cluster titanrtx-pcie --gpus 2 --json " + json +
                    " --svg " + tmp("sim_base.svg"),
                &out),
            0);
  EXPECT_TRUE(has(out, "P2P disabled")) << out;
}

// A GPT of any size: --model gpt with --layers/--d-model/--heads/--vocab/--context, or gpt2 and
// gpt-small resized; more layers take longer; heads that do not divide the width, or GPT flags on
// another model, are usage errors.
TEST(SimCliTest, PricesAGptOfAnySize) {
  auto step_ms = [&](const std::string& flags) {
    std::string out;
    const std::string json = tmp("sim_gpt.json");
    EXPECT_EQ(run(flags + " --batch-size 1 --cluster dgx-a100 --gpus 2 --json " + json +
                      " --svg " + tmp("sim_gpt.svg"),
                  &out),
              0)
        << flags << ": " << out;
    const nlohmann::json j = read_json(json);
    return std::make_pair(j, j["single_gpu"]["step_ms"].get<double>());
  };
  const auto [small, small_ms] =
      step_ms("--model gpt --layers 2 --d-model 64 --heads 4 --vocab 1000 --context 32");
  EXPECT_EQ(small["model"], "gpt");
  EXPECT_EQ(small["gpt"]["layers"], 2);
  EXPECT_EQ(small["gpt"]["d_model"], 64);
  EXPECT_EQ(small["gpt"]["heads"], 4);
  EXPECT_EQ(small["gpt"]["vocab"], 1000);
  EXPECT_EQ(small["gpt"]["block_size"], 32);
  const auto [deep, deep_ms] =
      step_ms("--model gpt --layers 8 --d-model 64 --heads 4 --vocab 1000 --context 32");
  EXPECT_GT(deep_ms, small_ms);
  // gpt-small past its 128-token context: the block grows with --context.
  const auto [longer, longer_ms] = step_ms("--model gpt-small --context 256");
  EXPECT_EQ(longer["gpt"]["block_size"], 256);
  std::string out;
  EXPECT_EQ(run("--model gpt --d-model 64 --heads 5", &out), 2) << out;
  EXPECT_TRUE(has(out, "does not divide")) << out;
  EXPECT_EQ(run("--model mlp --layers 3", &out), 2) << out;
}

TEST(SimCliTest, PricesResNet101AndTheBucketSizes) {
  std::string out;
  const std::string json = tmp("sim_r101.json");
  ASSERT_EQ(run("--model resnet101 --batch-size 2 --image-size 32 --cluster dgx-a100 --gpus 2 "
                "--bucket-cap-mb 1 --first-bucket-mb 0.5 --json " +
                    json + " --svg " + tmp("sim_r101.svg"),
                &out),
            0)
      << out;
  const nlohmann::json j = read_json(json);
  EXPECT_EQ(j["model"], "resnet101");
  EXPECT_EQ(j["bucket_cap_mb"], 1.0);
  EXPECT_EQ(j["first_bucket_mb"], 0.5);
  // ResNet-101's 170 MiB of gradients in buckets of about 1 MiB (a big tensor closes one alone):
  // several times the 8 of the 25 MiB default.
  int small = 0;
  for (const auto& r : j["runs"]) {
    if (r["mode"] == "ddp") small = r["buckets"].get<int>();
  }
  EXPECT_GT(small, 20);
  EXPECT_EQ(run("--model mlp --bucket-cap-mb 0", &out), 2) << out;
}

// --strategy adds a table and the JSON's "strategies" (each GPU count, each strategy, with
// --activation-checkpointing its checkpointed variant after it); without it the output is today's.
// A small GPT keeps it quick under the sanitizers.
TEST(SimCliTest, StrategiesAddTheirRowsWhenNamed) {
  const std::string gpt =
      "--model gpt --layers 4 --d-model 128 --heads 4 --vocab 2000 --context 64 --batch-size 2 "
      "--cluster dgx-a100 --gpus 1,8 --svg " + tmp("sim_strategy.svg") + " --json ";
  std::string out;
  const std::string plain = tmp("sim_plain.json");
  ASSERT_EQ(run(gpt + plain, &out), 0) << out;
  EXPECT_FALSE(has(out, "sharding strategies")) << out;
  EXPECT_FALSE(read_json(plain).contains("strategies"));

  const std::string json = tmp("sim_strategy.json");
  ASSERT_EQ(run(gpt + json +
                    " --strategy dp,ddp,zero1,grad-op,full-shard --activation-checkpointing",
                &out),
            0)
      << out;
  for (const char* label : {"DDP+ZeRO-1 +AC", "FSDP SHARD_GRAD_OP", "FSDP FULL_SHARD +AC"}) {
    EXPECT_TRUE(has(out, label)) << label << ": " << out;
  }
  const nlohmann::json j = read_json(json);
  ASSERT_EQ(j["strategies"].size(), 16u);  // 2 GPU counts x 4 strategies x with and without AC
  std::map<std::string, nlohmann::json> on8;
  for (const auto& r : j["strategies"]) {
    if (r["gpus"] == 8) on8[r["mode"].get<std::string>()] = r;
  }
  const auto peak = [&](const std::string& m) { return on8[m]["peak_gib"][0].get<double>(); };
  const auto ms = [&](const std::string& m) { return on8[m]["step_ms"].get<double>(); };
  const auto acts = [&](const std::string& m) {
    return on8[m]["memory_gib"]["activations"].get<double>();
  };
  EXPECT_GT(peak("ddp"), peak("zero1"));
  EXPECT_GT(peak("zero1"), peak("grad-op"));
  EXPECT_GT(peak("grad-op"), peak("full-shard"));
  EXPECT_GT(ms("full-shard"), ms("grad-op"));
  for (const char* m : {"ddp", "zero1", "grad-op", "full-shard"}) {
    EXPECT_LT(acts(std::string(m) + "+ac"), acts(m)) << m;
    EXPECT_GT(ms(std::string(m) + "+ac"), ms(m)) << m;
  }
  // Checkpointing alone prices DDP with and without it; a model without blocks cannot.
  ASSERT_EQ(run(gpt + json + " --activation-checkpointing", &out), 0) << out;
  EXPECT_EQ(read_json(json)["strategies"].size(), 4u);
  EXPECT_EQ(run("--model mlp --activation-checkpointing", &out), 2) << out;
  EXPECT_EQ(run("--model mlp --strategy zero2", &out), 2) << out;
}

// The largest GPT on 8 x 40 GiB A100s: a row per strategy with and without checkpointing, each
// the largest rung that fits (the next one does not), FULL_SHARD fitting at least what the others
// fit. Priced from the shapes: no trace, so it is quick.
TEST(SimCliTest, LargestGptPrintsARowPerStrategy) {
  std::string out;
  const std::string json = tmp("sim_largest.json");
  ASSERT_EQ(run("--cluster dgx-a100-40g --gpus 8 --largest-gpt --batch-size 4 --context 1024 "
                "--precision fp16 --json " + json,
                &out),
            0)
      << out;
  EXPECT_TRUE(has(out, "8 x A100-SXM4-40GB (40 GiB each, dgx-a100-40g)")) << out;
  const nlohmann::json j = read_json(json);
  ASSERT_EQ(j["rows"].size(), 8u);
  std::map<std::string, int64_t> params;
  for (const auto& r : j["rows"]) {
    const std::string m = r["strategy"];
    ASSERT_FALSE(r["largest"].is_null()) << m;
    params[m] = r["largest"]["params"].get<int64_t>();
    EXPECT_LE(r["prediction"]["peak_gib"][0].get<double>(), 40.0) << m;
    if (r.contains("next")) {
      EXPECT_GT(r["next"]["peak_gib"].get<double>(), 40.0) << m;
    }
  }
  for (const char* ac : {"", "+ac"}) {
    const std::string x = ac;
    EXPECT_GE(params["zero1" + x], params["ddp" + x]);
    EXPECT_GE(params["grad-op" + x], params["zero1" + x]);
    EXPECT_GE(params["full-shard" + x], params["grad-op" + x]);
  }
  EXPECT_GT(params["full-shard"], params["ddp"]);
  EXPECT_GE(params["full-shard+ac"], params["full-shard"]);
}

// --precision bf16 has bench's and train's meaning: mixed precision, here at fp16's tensor-core
// rate on an A100 (the same step time), and refused on a GPU without bf16 tensor cores.
TEST(SimCliTest, Bf16IsMixedPrecisionWhereTheGpuHasIt) {
  std::string out;
  double step[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    const std::string json = tmp("sim_bf16.json");
    ASSERT_EQ(run(std::string("--model mlp --batch-size 32 --cluster dgx-a100 --gpus 1 --precision ") +
                      (i == 0 ? "fp16" : "bf16") + " --json " + json + " --svg " +
                      tmp("sim_bf16.svg"),
                  &out),
              0)
        << out;
    const nlohmann::json j = read_json(json);
    EXPECT_EQ(j["precision"], i == 0 ? "fp16" : "bf16");
    step[i] = j["single_gpu"]["step_ms"].get<double>();
  }
  EXPECT_GT(step[0], 0);
  EXPECT_DOUBLE_EQ(step[1], step[0]);
  EXPECT_EQ(run("--model mlp --cluster dgx1-v100 --gpus 1 --precision bf16", &out), 2) << out;
  EXPECT_TRUE(has(out, "has no bf16 tensor cores")) << out;
}

TEST(SimCliTest, BadFlagsExitWith2) {
  std::string out;
  for (const char* args :
       {"--model foo", "--cluster nowhere", "--gpus 0", "--batch-size 0", "--batch 0",
        "--precision fp8", "--bogus", "--gpu0-batch-size -1", "--context 0", "--image-size 16",
        "--cluster titanrtx-nvlink --gpus 2 "
        "--nodes 1 --gpus 4"}) {
    EXPECT_EQ(run(args, &out), 2) << args << ": " << out;
  }
}

// --topology: a file that cannot be opened is a usage error (2); one that is not nvidia-smi's
// matrix, or holds more than 4 MiB (a few KB is what nvidia-smi prints), a data error (3). Each
// names the file; the size is counted while reading, so /dev/zero stops at the limit.
TEST(SimCliTest, TopologyFileErrorsNameTheFile) {
  std::string out;
  const std::string quick = "--model toy --gpus 1,2 --json " + tmp("sim_topo.json") + " --svg " +
                            tmp("sim_topo.svg") + " --topology ";
  EXPECT_EQ(run(quick + tmp("no_such_topology"), &out), 2) << out;
  EXPECT_TRUE(has(out, tmp("no_such_topology") + ": No such file or directory")) << out;

  const std::string sparse = tmp("sparse_topology");
  std::ofstream(sparse).close();
  ASSERT_EQ(::truncate(sparse.c_str(), 5 << 20), 0);
  EXPECT_EQ(run(quick + sparse, &out), 3) << out;
  EXPECT_TRUE(has(out, sparse + " holds more than 4194304 bytes (4 MiB)")) << out;
  EXPECT_FALSE(has(out, "wrote")) << out;
  EXPECT_EQ(run(quick + "/dev/zero", &out), 3) << out;  // endless: read up to the limit
  EXPECT_TRUE(has(out, "/dev/zero holds more than 4194304 bytes (4 MiB)")) << out;

  const std::string bad = tmp("bad_topology");
  std::ofstream(bad) << "        GPU0    GPU1\nGPU0     X      FOO\nGPU1    FOO      X\n";
  EXPECT_EQ(run(quick + bad, &out), 3) << out;
  EXPECT_TRUE(has(out, bad + ": parse_topology: ")) << out;

  const std::string good = tmp("good_topology");
  std::ofstream(good) << "        GPU0    GPU1\nGPU0     X      NV2\nGPU1    NV2      X\n";
  EXPECT_EQ(run(quick + good, &out), 0) << out;
  EXPECT_TRUE(has(out, "1 node of 2 x")) << out;
}

// --json and --svg are checked before anything runs: a path that cannot be written is a usage
// error (2) naming the flag, the path and why; nothing says "wrote". It used to print "wrote" and
// exit 0 whether the JSON was written or not.
TEST(SimCliTest, AnUnwritableOutputPathExitsWith2BeforeRunning) {
  std::string out;
  const std::string quick = "--model toy --gpus 1,2 ";
  EXPECT_EQ(run(quick + "--json /no/such/folder/sim.json --svg " + tmp("s.svg"), &out), 2) << out;
  EXPECT_TRUE(has(out, "--json /no/such/folder/sim.json: cannot write")) << out;
  EXPECT_TRUE(has(out, "No such file or directory")) << out;
  EXPECT_FALSE(has(out, "dpe sim:")) << out;
  EXPECT_FALSE(has(out, "wrote")) << out;
  EXPECT_EQ(run(quick + "--json " + tmp("s.json") + " --svg /etc/hostname/s.svg", &out), 2) << out;
  EXPECT_TRUE(has(out, "--svg /etc/hostname/s.svg: cannot write")) << out;
  EXPECT_TRUE(has(out, "Not a directory")) << out;
  EXPECT_FALSE(has(out, "wrote")) << out;
}

// One name per concept across the tools: --batch-size (per GPU here, as the help says),
// --context, --image-size; the older spellings give the same predictions.
TEST(SimCliTest, OlderSpellingsMeanTheSame) {
  std::string out;
  EXPECT_EQ(run("--help", &out), 0);
  EXPECT_TRUE(has(out, "--batch-size")) << out;
  EXPECT_TRUE(has(out, "PER GPU")) << out;
  EXPECT_TRUE(has(out, "--context")) << out;
  EXPECT_TRUE(has(out, "--image-size")) << out;
  EXPECT_TRUE(has(out, "--gpu0-batch-size")) << out;
  const auto predict = [&](const std::string& flags, const std::string& name) {
    const std::string json = tmp(name + ".json");
    std::string text;
    EXPECT_EQ(run("--model mlp --cluster pcie-a100 --gpus 1,2 " + flags + " --json " + json +
                      " --svg " + tmp(name + ".svg"),
                  &text),
              0)
        << text;
    std::ifstream in(json);
    return nlohmann::json::parse(in);
  };
  const nlohmann::json now =
      predict("--batch-size 8 --gpu0-batch-size 4 --context 20 --image-size 64", "sim_new");
  const nlohmann::json old = predict("--batch 8 --gpu0-batch 4 --seq 20 --image 64", "sim_old");
  EXPECT_EQ(now["batch_per_gpu"], 8);
  EXPECT_EQ(now["gpu0_batch"], 4);
  EXPECT_EQ(now["seq"], 20);
  EXPECT_EQ(now["image"], 64);
  EXPECT_EQ(now.dump(), old.dump());
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: sim_cli_test <path to tools/sim>\n");
    return 2;
  }
  g_sim = argv[1];
  return RUN_ALL_TESTS();
}
