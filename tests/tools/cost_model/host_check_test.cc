// The cost model's "host mode" against //tools:bench on this machine (the check): the Mlp
// traced (single, DataParallel on 2 host devices, one DDP rank) and replayed on host_cluster, then
// measured with the bench's own runs (run_in_process; run_ddp with the bench binary, 2 processes
// over Gloo). Asserts the predicted speed-up of dp 2 over one device within 15% of the measured
// one (ratios survive machine load better than times); prints ddp 2's and the absolute figures.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "tools/bench_runner.h"
#include "tools/cost_model/host_cluster.h"
#include "tools/cost_model/replay.h"
#include "tools/cost_model/step_trace.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DPE_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define DPE_SANITIZED 1
#endif
#endif

namespace dpe::sim {
namespace {

std::string g_bench;  // the path of //tools:bench (argv[1])

constexpr int64_t kBatch = 256;  // global batch, as the README's bench rows
constexpr int kRounds = 3;       // single, dp, ddp measured in turn, kRounds times

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

StepSpec mlp(int64_t batch_per_device) {
  StepSpec s;
  s.model = "mlp";
  s.batch_per_device = batch_per_device;
  s.optimizer = "sgd";  // the bench's: SGD with momentum 0.9
  return s;
}

tools::BenchConfig bench(const std::string& mode, int devices) {
  tools::BenchConfig c;
  c.model = "mlp";
  c.mode = mode;
  c.devices = devices;
  c.global_batch = kBatch;
  c.warmup = 5;
  c.steps = 40;
  return c;
}

TEST(HostCheckTest, MlpDataParallelSpeedupMatchesTheBenchWithin15Percent) {
  ASSERT_FALSE(g_bench.empty()) << "usage: host_check_test <path to tools/bench>";
  const GlooRates gloo = measure_gloo_all_reduce();  // first: it forks
  HostRates rates = measure_host_rates(2);
  rates.gloo_alpha_us = gloo.alpha_us;
  rates.gloo_gbs = gloo.gbs;
  std::printf(
      "gloo all-reduce, 2 ranks: 64 KiB %.0f us, 4 MiB %.0f us -> alpha %.1f us, %.2f "
      "GB/s\n",
      gloo.small_us, gloo.large_us, gloo.alpha_us, gloo.gbs);
  std::printf(
      "host: SGEMM 512^3 %.1f GFLOP/s alone, %.1f per device with 2 at once; memcpy "
      "%.2f GB/s\n",
      rates.sgemm_gflops, rates.sgemm_gflops_shared, rates.memcpy_gbs);

  const ReplayOptions options = host_replay_options();
  const Prediction single =
      replay_dp(trace_dp_step(mlp(kBatch), 1), host_cluster(1, rates), options);
  const Prediction dp =
      replay_dp(trace_dp_step(mlp(kBatch / 2), 2), host_cluster(2, rates), options);
  const Prediction ddp =
      replay_ddp(trace_ddp_step(mlp(kBatch / 2)), 2, host_ddp_cluster(2, rates), options);
  for (const Prediction* p : {&single, &dp, &ddp}) {
    std::printf("predicted %-4s %d: %.2f ms:", p->mode.c_str(), p->gpus, p->step_ms);
    for (const auto& [name, ms] : p->phases) std::printf(" %s %.2f", name.c_str(), ms);
    std::printf("\n");
  }

#ifdef DPE_SANITIZED
  GTEST_SKIP() << "timings under a sanitizer say nothing about the cost model";
#else
  // Interleaved rounds: a burst of load on the machine hits one round of every mode, not one mode.
  std::vector<double> m_single, m_dp, m_ddp;
  for (int r = 0; r < kRounds; ++r) {
    m_single.push_back(tools::run_in_process(bench("single", 1)).step_ms);
    m_dp.push_back(tools::run_in_process(bench("dp", 2)).step_ms);
    m_ddp.push_back(tools::run_ddp(bench("ddp", 2), g_bench).step_ms);
  }
  const double ms_single = median(m_single), ms_dp = median(m_dp), ms_ddp = median(m_ddp);
  const double pred_dp = single.step_ms / dp.step_ms, pred_ddp = single.step_ms / ddp.step_ms;
  const double meas_dp = ms_single / ms_dp, meas_ddp = ms_single / ms_ddp;
  std::printf("%-10s %12s %12s %8s\n", "mlp b256", "predicted", "measured", "pred/meas");
  std::printf("%-10s %9.2f ms %9.2f ms %8.3f\n", "single", single.step_ms, ms_single,
              single.step_ms / ms_single);
  std::printf("%-10s %9.2f ms %9.2f ms %8.3f\n", "dp 2", dp.step_ms, ms_dp, dp.step_ms / ms_dp);
  std::printf("%-10s %9.2f ms %9.2f ms %8.3f\n", "ddp 2", ddp.step_ms, ms_ddp,
              ddp.step_ms / ms_ddp);
  std::printf("%-10s %12.3f %12.3f %8.3f\n", "dp/single", pred_dp, meas_dp, pred_dp / meas_dp);
  std::printf("%-10s %12.3f %12.3f %8.3f\n", "ddp/single", pred_ddp, meas_ddp, pred_ddp / meas_ddp);
  std::fflush(stdout);
  EXPECT_NEAR(pred_dp / meas_dp, 1.0, 0.15) << "DataParallel's speed-up on 2 host devices";
  // DDP is printed, not asserted: on this 2-core machine the replay's DDP speed-up is 1.2-1.5x
  // the bench's. The replay overlaps Gloo's all-reduce with backward and costs it at the rate
  // measured with idle ranks, but Gloo's TCP copies need a core, and both cores run the ranks'
  // compute: the overlap is not there and the rate drops. A host-mode DDP model needs a
  // "communication takes a compute core" option in replay_ddp (not in this change).
  if (std::abs(pred_ddp / meas_ddp - 1.0) > 0.15) {
    std::printf(
        "note: DDP's predicted speed-up is off by more than 15%% (known gap, see the "
        "comment above)\n");
  }
#endif
}

}  // namespace
}  // namespace dpe::sim

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc >= 2) dpe::sim::g_bench = argv[1];
  return RUN_ALL_TESTS();
}
