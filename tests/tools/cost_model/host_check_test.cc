// The cost model's "host mode" against //tools:bench on this machine: the Mlp
// traced (single, DataParallel on 2 host devices, one DDP rank) and replayed on host_cluster, then
// measured with the bench's own runs (run_in_process; run_ddp with the bench binary, 2 processes
// over MPI, the bench's default). The rates (the traced GEMMs alone and 2 at once, memcpy, MPI's
// all-reduce at the DDP buckets' sizes) are measured in every round beside the bench's runs; the
// best of the rounds on both sides (the fastest rates, the fastest steps: a neighbour on this VM
// only ever slows a run down, so the best round is the machine undisturbed, timeit's rule). Asserts
// the predicted speed-ups of dp 2 and ddp 2 over one device within 15% of the measured ones (ratios
// survive machine load better than times); prints the absolute figures.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "tools/bench_lib/bench_runner.h"
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

constexpr int64_t kBatch = 256;  // global batch, as docs/performance.md's bench rows
constexpr int kRounds = 5;       // rates, single, dp, ddp measured in turn, kRounds times

// The best of `v`: its largest value for a rate, its smallest for a time.
double best(const std::vector<double>& v, bool rate) {
  if (v.empty()) return 0;
  return rate ? *std::max_element(v.begin(), v.end()) : *std::min_element(v.begin(), v.end());
}

StepSpec mlp(int64_t batch_per_device) {
  StepSpec s;
  s.model = "mlp";
  s.batch_per_device = batch_per_device;
  s.optimizer = "sgd";               // the bench's: SGD with momentum 0.9
  s.gradient_as_bucket_view = true;  // and its DDP rows' buckets
  return s;
}

tools::BenchConfig bench(const std::string& mode, int devices) {
  tools::BenchConfig c;
  c.model = "mlp";
  c.mode = mode;
  c.devices = devices;
  c.global_batch = kBatch;
  c.warmup = 5;
  c.steps = 30;
  return c;
}

// One round: the rates, then the bench's three modes, back to back.
struct Round {
  double gemm_single = 0, gemm_shared = 0, memcpy = 0, dram = 0;
  AllReduceRates all_reduce;           // the bench's DDP backend (mpi)
  double single = 0, dp = 0, ddp = 0;  // the bench's step times (medians of its steps), ms
};

TEST(HostCheckTest, MlpDataParallelAndDdpSpeedupsMatchTheBenchWithin15Percent) {
  ASSERT_FALSE(g_bench.empty()) << "usage: host_check_test <path to tools/bench>";
#ifdef DPE_SANITIZED
  GTEST_SKIP() << "timings under a sanitizer say nothing about the cost model";
#endif
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const TracedStep t_single = trace_dp_step(mlp(kBatch), 1);
  const TracedStep t_dp = trace_dp_step(mlp(kBatch / 2), 2);
  const TracedStep t_ddp = trace_ddp_step(mlp(kBatch / 2));
  const std::vector<int64_t> buckets = bucket_bytes(t_ddp);
  ASSERT_FALSE(buckets.empty());

  // Rates and bench rounds interleaved: a burst of load on the machine hits a round or two of the
  // rates and the modes, and the best of the rounds drops it. (Medians did not: in CI, right after
  // the build, DataParallel's step took 9.5-9.8 ms in 2 rounds of 5 and 7.0-7.3 in two more, 5.9
  // in the fifth, while single and DDP ran steady.)
  std::printf(
      "memory-bound ops of the step move %lld bytes (bytes-weighted median): memcpy at that size\n",
      static_cast<long long>(memory_op_bytes(t_single.events)));
  std::vector<Round> rounds(kRounds);
  for (Round& r : rounds) {
    r.gemm_single = measure_gemm_gflops(t_single, 10);
    r.gemm_shared = measure_gemm_gflops(t_dp, 10);  // = a DDP rank's GEMMs, 2 at once
    r.memcpy = measure_memcpy_gbs(8, memory_op_bytes(t_single.events));
    r.dram = measure_memcpy_gbs(4);  // 64 MiB: past the caches
    r.all_reduce = measure_all_reduce(self, buckets, 15);
    r.single = tools::run_in_process(bench("single", 1)).step_ms;
    r.dp = tools::run_in_process(bench("dp", 2)).step_ms;
    r.ddp = tools::run_ddp(bench("ddp", 2), g_bench).step_ms;
    std::printf(
        "round: gemm %.1f GFLOP/s alone, %.1f per device 2 at once; memcpy %.2f GB/s, %.2f GB/s "
        "from DRAM; ddp all-reduce alpha %.0f us, %.2f GB/s (",
        r.gemm_single, r.gemm_shared, r.memcpy, r.dram, r.all_reduce.alpha_us, r.all_reduce.gbs);
    for (size_t k = 0; k < r.all_reduce.bytes.size(); ++k) {
      std::printf("%s%lld B %.0f us", k ? ", " : "", static_cast<long long>(r.all_reduce.bytes[k]),
                  r.all_reduce.us[k]);
    }
    std::printf("); bench single %.2f dp %.2f ddp %.2f ms\n", r.single, r.dp, r.ddp);
    HostRates hr;
    hr.sgemm_gflops = r.gemm_single;
    hr.sgemm_gflops_shared = r.gemm_shared;
    hr.shared_devices = 2;
    hr.memcpy_gbs = r.memcpy;
    hr.dram_gbs = r.dram;
    hr.ddp_alpha_us = r.all_reduce.alpha_us;
    hr.ddp_gbs = r.all_reduce.gbs;
    const ReplayOptions o = host_replay_options();
    const double ps = replay_dp(t_single, host_cluster(1, hr), o).step_ms;
    const double pd = replay_dp(t_dp, host_cluster(2, hr), o).step_ms;
    const double pq = replay_ddp(t_ddp, 2, host_ddp_cluster(2, hr), o).step_ms;
    std::printf(
        "   this round predicts single %.2f dp %.2f ddp %.2f ms; speed-ups dp %.3f/%.3f ddp "
        "%.3f/%.3f\n",
        ps, pd, pq, ps / pd, r.single / r.dp, ps / pq, r.single / r.ddp);
  }
  auto of_rounds = [&](double Round::*field, bool rate) {
    std::vector<double> v;
    for (const Round& r : rounds) v.push_back(r.*field);
    return best(v, rate);
  };
  auto of_all_reduce = [&](double AllReduceRates::*field, bool rate) {
    std::vector<double> v;
    for (const Round& r : rounds) v.push_back(r.all_reduce.*field);
    return best(v, rate);
  };
  HostRates rates;
  rates.sgemm_gflops = of_rounds(&Round::gemm_single, true);
  rates.sgemm_gflops_shared = of_rounds(&Round::gemm_shared, true);
  rates.shared_devices = 2;
  rates.memcpy_gbs = of_rounds(&Round::memcpy, true);
  rates.dram_gbs = of_rounds(&Round::dram, true);
  rates.ddp_alpha_us = of_all_reduce(&AllReduceRates::alpha_us, false);
  rates.ddp_gbs = of_all_reduce(&AllReduceRates::gbs, true);
  std::printf(
      "best of the rounds: gemm %.1f GFLOP/s alone, %.1f per device 2 at once; memcpy %.2f GB/s, "
      "%.2f GB/s from DRAM; ddp all-reduce alpha %.0f us, %.2f GB/s\n",
      rates.sgemm_gflops, rates.sgemm_gflops_shared, rates.memcpy_gbs, rates.dram_gbs,
      rates.ddp_alpha_us, rates.ddp_gbs);

  const ReplayOptions options = host_replay_options();
  const Prediction single = replay_dp(t_single, host_cluster(1, rates), options);
  const Prediction dp = replay_dp(t_dp, host_cluster(2, rates), options);
  const Prediction ddp = replay_ddp(t_ddp, 2, host_ddp_cluster(2, rates), options);
  for (const Prediction* p : {&single, &dp, &ddp}) {
    std::printf("predicted %-4s %d: %.2f ms:", p->mode.c_str(), p->gpus, p->step_ms);
    for (const auto& [name, ms] : p->phases) std::printf(" %s %.2f", name.c_str(), ms);
    std::printf("\n");
  }
  std::fflush(stdout);

  const double ms_single = of_rounds(&Round::single, false), ms_dp = of_rounds(&Round::dp, false),
               ms_ddp = of_rounds(&Round::ddp, false);
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
  // Speed-ups, not times: a load that slows the machine slows the rates and the bench alike.
  EXPECT_NEAR(pred_dp / meas_dp, 1.0, 0.15) << "DataParallel's speed-up on 2 host devices";
  EXPECT_NEAR(pred_ddp / meas_ddp, 1.0, 0.15) << "DDP's speed-up on 2 processes";
}

}  // namespace
}  // namespace dpe::sim

int main(int argc, char** argv) {
  // measure_all_reduce's ranks are this program, re-executed.
  if (const int code = dpe::sim::all_reduce_worker_main(argc, argv); code >= 0) return code;
  testing::InitGoogleTest(&argc, argv);
  if (argc >= 2) dpe::sim::g_bench = argv[1];
  return RUN_ALL_TESTS();
}
