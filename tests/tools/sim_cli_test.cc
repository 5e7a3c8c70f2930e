// //tools:sim from the command line: a table for each GPU count, JSON with DataParallel's and
// DDP's predictions (DataParallel refused beyond one node), the SVG; bad flags exit with 2; the
// older flag spellings (--batch, --gpu0-batch, --seq, --image) mean what the new ones do.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
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
