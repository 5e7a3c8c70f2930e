// //tools:bench writes the JSON it documents: a quick run (toy model, 1 and 2 devices, DP and
// DDP over MPI and Gloo) checked against the schema, the gpt and resnet rows; measured figures are
// never asserted (the analytic FLOPs per sample behind GFLOP/s are); --batch-size and
// --gradient-as-bucket-view with their older spellings.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace {

std::string g_bench;

TEST(BenchJsonTest, SchemaOfAQuickRun) {
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  const std::string json = dir + "/bench.json", svg = dir + "/bench.svg";
  const std::string cmd =
      g_bench + " --models toy --devices 1,2 --batch-size 8 --warmup 1 --steps 2" +
      " --ddp-backends mpi,gloo --json " + json + " --svg " + svg + " > " + dir + "/bench.out 2>&1";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "bench failed: see bench.out";
  nlohmann::json j = nlohmann::json::parse(std::ifstream(json));
  EXPECT_GT(j.at("gemm_peak_gflops_1_thread").get<double>(), 0);
  ASSERT_EQ(j.at("results").size(), 4u);  // single on 1 device, dp, ddp/mpi and ddp/gloo on 2
  EXPECT_EQ(j["results"][2].at("ddp_backend"), "mpi");
  EXPECT_EQ(j["results"][3].at("ddp_backend"), "gloo");
  for (const auto& r : j["results"]) {
    EXPECT_EQ(r.contains("ddp_backend"), r["mode"] == "ddp");
    for (const char* key :
         {"model", "mode", "devices", "global_batch", "step_ms", "samples_per_second",
          "speedup_vs_1_device", "gflops", "gflops_share_of_peak", "per_device", "threads"}) {
      EXPECT_TRUE(r.contains(key)) << key;
    }
    EXPECT_EQ(r["per_device"].size(), r["devices"].get<size_t>());
    // In-process rows carry their traced step's roofline, op by op; DDP's ranks do not.
    ASSERT_EQ(r.contains("roofline"), r["mode"] != "ddp");
    if (r.contains("roofline")) {
      const auto& f = r["roofline"];
      EXPECT_GT(f.at("peak_gflops").get<double>(), 0);
      EXPECT_GT(f.at("memory_gbs").get<double>(), 0);
      EXPECT_NEAR(r.at("share_of_roofline").get<double>(),
                  f.at("bound_ms").get<double>() / r["step_ms"].get<double>(), 1e-9);
      double sum = 0;
      ASSERT_FALSE(f.at("ops").empty());
      for (const auto& o : f["ops"]) {
        const double compute_ms =
            o.at("flops").get<double>() / f["peak_gflops"].get<double>() / 1e6;
        const double memory_ms = o.at("bytes").get<double>() / f["memory_gbs"].get<double>() / 1e6;
        // Summed over calls: at least the larger of the two, at most their sum.
        const double bound = o.at("bound_ms").get<double>(), eps = 1e-9 * (1 + bound);
        EXPECT_GE(bound + eps, std::max(compute_ms, memory_ms)) << o.at("name");
        EXPECT_LE(bound, compute_ms + memory_ms + eps) << o.at("name");
        sum += o["bound_ms"].get<double>();
      }
      EXPECT_NEAR(sum, f.at("bound_ms").get<double>(), 1e-9);
    }
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

TEST(BenchJsonTest, DpLossOnTheReplicasIsARowOfItsOwnWithTheSameLoss) {
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  const std::string json = dir + "/bench_dp_loss.json", svg = dir + "/bench_dp_loss.svg";
  const std::string cmd = g_bench +
                          " --models toy --devices 1,2 --batch-size 8 --warmup 1 --steps 2"
                          " --ddp-backends mpi --dp-loss device0,replicas --json " +
                          json + " --svg " + svg + " > " + dir + "/bench_dp_loss.out 2>&1";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "bench failed";
  nlohmann::json j = nlohmann::json::parse(std::ifstream(json));
  ASSERT_EQ(j.at("results").size(), 4u);  // single, dp, dp (loss on the replicas), ddp/mpi
  const auto& dp = j["results"][1];
  const auto& ploss = j["results"][2];
  EXPECT_EQ(dp.at("dp_loss"), "device0");
  EXPECT_EQ(ploss.at("mode"), "dp");
  EXPECT_EQ(ploss.at("dp_loss"), "replicas");
  // A mean loss over the chunks equals the loss of the gathered outputs: the same training.
  EXPECT_NEAR(ploss.at("final_loss").get<double>(), dp.at("final_loss").get<double>(),
              1e-5 * std::abs(dp["final_loss"].get<double>()));
  EXPECT_TRUE(ploss.contains("roofline"));
}

TEST(BenchJsonTest, ThreadsPerDeviceAreRecordedAndCountInTheShareOfPeak) {
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  const std::string json = dir + "/bench_threads.json";
  const std::string cmd = g_bench +
                          " --models toy --devices 1 --batch-size 8 --warmup 1 --steps 2" +
                          " --threads 2 --json " + json + " --svg " + dir +
                          "/bench_threads.svg > " + dir + "/bench_threads.out 2>&1";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "see bench_threads.out";
  nlohmann::json j = nlohmann::json::parse(std::ifstream(json));
  ASSERT_EQ(j.at("results").size(), 1u);
  const auto& r = j["results"][0];
  EXPECT_EQ(r.at("threads"), 2);
  // The share divides by two threads' worth of the single-thread peak.
  EXPECT_NEAR(r.at("gflops_share_of_peak").get<double>(),
              r.at("gflops").get<double>() / (2 * j.at("gemm_peak_gflops_1_thread").get<double>()),
              1e-9);
}

TEST(BenchJsonTest, GptRowsReportTokensPerSecond) {
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  const std::string json = dir + "/bench_gpt.json", svg = dir + "/bench_gpt.svg";
  const std::string cmd =
      g_bench + " --models gpt-small --devices 1,2 --batch-size 2 --context 8 --warmup 0" +
      " --steps 1 --json " + json + " --svg " + svg + " > " + dir + "/bench_gpt.out 2>&1";
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

// The resnets: resnet-tiny on Fashion-MNIST in every mode, and resnet50 for one step of one
// image at 224 x 224. Their GFLOP/s come from the analytic training FLOPs per image: resnet-tiny
// on 1 x 28 x 28, resnet50 3 x its 4.09 G forward multiply-adds (torchvision's "4.1 GFLOPS")
// x 2, less conv1's input gradient.
TEST(BenchJsonTest, ResnetRows) {
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  const std::string json = dir + "/bench_resnet.json", svg = dir + "/bench_resnet.svg";
  std::string cmd = g_bench +
                    " --models resnet-tiny --devices 1,2 --batch-size 8 --warmup 1 --steps 1" +
                    " --json " + json + " --svg " + svg + " > " + dir + "/bench_resnet.out 2>&1";
  int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "bench failed: see bench_resnet.out";
  nlohmann::json j = nlohmann::json::parse(std::ifstream(json));
  ASSERT_EQ(j.at("results").size(), 3u);  // single, dp and ddp
  auto flops_per_sample = [](const nlohmann::json& r) {
    return r.at("gflops").get<double>() * 1e9 / r.at("samples_per_second").get<double>();
  };
  for (const auto& r : j["results"]) {
    EXPECT_EQ(r.at("model"), "resnet-tiny");
    EXPECT_FALSE(r.contains("image"));
    EXPECT_NEAR(flops_per_sample(r), 2753408, 1);  // 2 x (3 x 484 512 - 76 832)
  }
  cmd = g_bench + " --models resnet50 --devices 1 --batch-size 1 --warmup 0 --steps 1 --json " +
        json + " --svg " + svg + " > " + dir + "/bench_resnet50.out 2>&1";
  status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "bench failed: see bench_resnet50.out";
  j = nlohmann::json::parse(std::ifstream(json));
  ASSERT_EQ(j.at("results").size(), 1u);
  const auto& r = j["results"][0];
  EXPECT_EQ(r.at("image").get<int>(), 224);
  EXPECT_NEAR(flops_per_sample(r), 2.0 * (3 * 4089184256.0 - 118013952), 1e3);
}

// --fuse reaches every row, the DDP workers' too: with batch norm and ReLU apart, each row's
// device 0 holds the pre-ReLU tensor and the ReLU's gradient as well, so its peak is higher.
// --activation-checkpointing recomputes each gpt block in backward: every row's final_loss (single,
// dp, ddp over MPI) is the one without it, and the row says it ran checkpointed.
TEST(BenchJsonTest, ActivationCheckpointingKeepsTheLosses) {
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  std::map<bool, nlohmann::json> runs;
  for (const bool ckpt : {false, true}) {
    const std::string name = dir + "/bench_ckpt_" + (ckpt ? "true" : "false");
    const std::string cmd = g_bench + " --models gpt-small --devices 1,2 --batch-size 2" +
                            " --context 8 --warmup 0 --steps 2 --ddp-backends mpi" +
                            (ckpt ? " --activation-checkpointing" : "") + " --json " + name +
                            ".json > " + name + ".out 2>&1";
    const int status = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "bench failed: see " << name;
    runs[ckpt] = nlohmann::json::parse(std::ifstream(name + ".json"));
  }
  const auto& plain = runs[false]["results"];
  const auto& ckpt = runs[true]["results"];
  ASSERT_EQ(plain.size(), 3u);  // single, dp, ddp/mpi
  ASSERT_EQ(ckpt.size(), 3u);
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(plain[i].at("activation_checkpointing"), false);
    EXPECT_EQ(ckpt[i].at("activation_checkpointing"), true);
    const double want = plain[i].at("final_loss").get<double>();
    EXPECT_NEAR(ckpt[i].at("final_loss").get<double>(), want, 1e-6 * std::abs(want))
        << plain[i].at("mode");
  }
}

TEST(BenchJsonTest, FuseFalseRunsBatchNormAndReluApart) {
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  std::map<bool, nlohmann::json> runs;
  for (const bool fuse : {true, false}) {
    const std::string name = dir + "/bench_fuse_" + (fuse ? "true" : "false");
    const std::string cmd = g_bench + " --models resnet-tiny --devices 1,2 --batch-size 8" +
                            " --warmup 1 --steps 1 --ddp-backends mpi --fuse " +
                            (fuse ? "true" : "false") + " --json " + name + ".json --svg " + name +
                            ".svg > " + name + ".out 2>&1";
    const int status = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "bench failed: see " << name;
    runs[fuse] = nlohmann::json::parse(std::ifstream(name + ".json"));
  }
  const auto& fused = runs[true]["results"];
  const auto& apart = runs[false]["results"];
  ASSERT_EQ(fused.size(), 3u);  // single, dp, ddp/mpi
  ASSERT_EQ(apart.size(), 3u);
  for (size_t i = 0; i < fused.size(); ++i) {
    EXPECT_EQ(fused[i].at("fuse"), true);
    EXPECT_EQ(apart[i].at("fuse"), false);
    EXPECT_LT(fused[i]["per_device"][0].at("peak_bytes").get<double>(),
              apart[i]["per_device"][0].at("peak_bytes").get<double>())
        << fused[i].at("mode");
  }
}

// --batch-size (the global batch) and --gradient-as-bucket-view (true or false, alone true, by
// default true as in train) reach every row, the DDP ranks' included; the older spellings
// --batches and --bucket-view keep working.
// Channels-last batches train as contiguous ones: the same losses, recorded as such.
TEST(BenchJsonTest, ChannelsLastKeepsTheLosses) {
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  double loss[2] = {0, 0};
  for (const bool cl : {false, true}) {
    const std::string json = dir + "/bench_cl.json", svg = dir + "/bench_cl.svg";
    const std::string cmd = g_bench +
                            " --models convnet --devices 1 --batch-size 8 --warmup 1 --steps 1"
                            " --channels-last " +
                            (cl ? "true" : "false") + " --json " + json + " --svg " + svg + " > " +
                            dir + "/bench_cl.out 2>&1";
    const int status = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "bench failed";
    nlohmann::json j = nlohmann::json::parse(std::ifstream(json));
    ASSERT_EQ(j.at("results").size(), 1u);
    EXPECT_EQ(j["results"][0].at("channels_last").get<bool>(), cl);
    loss[cl] = j["results"][0].at("final_loss").get<double>();
  }
  EXPECT_NEAR(loss[1], loss[0], 1e-5 * std::abs(loss[0]));
}

TEST(BenchJsonTest, BatchSizeAndBucketViewSpellings) {
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  const std::pair<const char*, bool> cases[] = {
      {"--batch-size 6", true},
      {"--batch-size 6 --gradient-as-bucket-view false", false},
      {"--batch-size 6 --gradient-as-bucket-view", true},
      {"--batches 6 --bucket-view false", false},
      {"--batches 6 --bucket-view true", true}};
  int i = 0;
  for (const auto& [flags, view] : cases) {
    const std::string name = dir + "/bench_spelling_" + std::to_string(i++);
    const std::string cmd = g_bench + " --models toy --devices 2 --warmup 0 --steps 1 " + flags +
                            " --ddp-backends gloo --json " + name + ".json --svg " + name +
                            ".svg > " + name + ".out 2>&1";
    const int status = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << flags << ": see " << name;
    const nlohmann::json j = nlohmann::json::parse(std::ifstream(name + ".json"));
    ASSERT_EQ(j.at("results").size(), 2u) << flags;  // dp and ddp/gloo on 2 devices
    for (const auto& r : j["results"]) EXPECT_EQ(r.at("global_batch"), 6) << flags;
    EXPECT_EQ(j["results"][1].at("gradient_as_bucket_view"), view) << flags;
  }
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc < 2) return 2;
  g_bench = argv[1];
  return RUN_ALL_TESTS();
}
