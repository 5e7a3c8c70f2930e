// //tools:sim from the command line: a table for each GPU count, JSON with DataParallel's and
// DDP's predictions (DataParallel refused beyond one node), the SVG; bad flags exit with 2.
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
  ASSERT_EQ(run("--model mlp --batch 32 --cluster dgx-a100 --gpus 1,2,8,16 --json " + json +
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

TEST(SimCliTest, BadFlagsExitWith2) {
  std::string out;
  for (const char* args :
       {"--model foo", "--cluster nowhere", "--gpus 0", "--batch 0", "--precision fp8", "--bogus",
        "--cluster titanrtx-nvlink --gpus 2 "
        "--nodes 1 --gpus 4"}) {
    EXPECT_EQ(run(args, &out), 2) << args << ": " << out;
  }
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
