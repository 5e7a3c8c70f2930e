// //tools:bench writes the JSON it documents: a quick run (toy model, 1 and 2 devices, DP and
// DDP) checked against the schema; figures are never asserted.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace {

std::string g_bench;

TEST(BenchJsonTest, SchemaOfAQuickRun) {
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  const std::string json = dir + "/bench.json", svg = dir + "/bench.svg";
  const std::string cmd = g_bench + " --models toy --devices 1,2 --batches 8 --warmup 1 --steps 2" +
                          " --json " + json + " --svg " + svg + " > " + dir + "/bench.out 2>&1";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "bench failed: see bench.out";
  nlohmann::json j = nlohmann::json::parse(std::ifstream(json));
  EXPECT_GT(j.at("gemm_peak_gflops_1_thread").get<double>(), 0);
  ASSERT_EQ(j.at("results").size(), 3u);  // single on 1 device, dp and ddp on 2
  for (const auto& r : j["results"]) {
    for (const char* key : {"model", "mode", "devices", "global_batch", "step_ms",
                            "samples_per_second", "speedup_vs_1_device", "gflops",
                            "gflops_share_of_peak", "per_device"}) {
      EXPECT_TRUE(r.contains(key)) << key;
    }
    EXPECT_EQ(r["per_device"].size(), r["devices"].get<size_t>());
    for (const auto& d : r["per_device"]) {
      EXPECT_GT(d.at("peak_bytes").get<double>(), 0);
      EXPECT_GE(d.at("busy_share").get<double>(), 0);
      EXPECT_LE(d.at("busy_share").get<double>(), 1);
    }
  }
  std::ifstream s(svg);
  std::string first;
  std::getline(s, first);
  EXPECT_EQ(first.rfind("<svg", 0), 0u);
}

TEST(BenchJsonTest, GptRowsReportTokensPerSecond) {
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  const std::string json = dir + "/bench_gpt.json", svg = dir + "/bench_gpt.svg";
  const std::string cmd = g_bench +
                          " --models gpt-small --devices 1,2 --batches 2 --context 8 --warmup 0" +
                          " --steps 1 --json " + json + " --svg " + svg + " > " + dir +
                          "/bench_gpt.out 2>&1";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "bench failed: see bench_gpt.out";
  nlohmann::json j = nlohmann::json::parse(std::ifstream(json));
  ASSERT_EQ(j.at("results").size(), 3u);  // single, dp and ddp
  for (const auto& r : j["results"]) {
    EXPECT_EQ(r.at("context").get<int>(), 8);
    EXPECT_NEAR(r.at("tokens_per_second").get<double>(),
                8 * r.at("samples_per_second").get<double>(),
                1e-6 * r.at("tokens_per_second").get<double>());
  }
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc < 2) return 2;
  g_bench = argv[1];
  return RUN_ALL_TESTS();
}
