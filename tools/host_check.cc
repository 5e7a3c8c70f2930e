// //tools:host_check — the cost model's check on this machine, a benchmark: the Mlp (global batch
// 256 by default) traced as //tools:bench trains it, replayed on the host devices described as a
// cluster (tools/cost_model/host_check.h), against the bench's own steps: single, DataParallel on
// 2 host devices, DDP over 2 MPI processes. The rates and the bench's runs are measured in turn,
// --rounds times; the best round on each side is compared. Prints every round, the configuration,
// measured and predicted steps and speed-ups with their ratios, and writes them as JSON. The
// ratios, not the times, are the check: docs/cluster_model.md ("Validation") has the figures seen
// so far. Exit codes (tools/common/exit_codes.h): 0 done, 1 a run failed, 2 bad flags or an
// output path that cannot be written.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tools/bench_lib/bench_runner.h"
#include "tools/common/exit_codes.h"
#include "tools/common/output_file.h"
#include "tools/common/paths.h"
#include "tools/cost_model/host_check.h"

namespace {

using dpe::sim::HostCheckPrediction;
using dpe::sim::HostCheckRound;
using dpe::sim::HostCheckTraces;

// host_check_test's bound before it became this benchmark; printed beside the ratios.
constexpr double kTolerance = 0.15;

struct Options {
  std::string bench;  // //tools:bench, for DDP's ranks; default: the one beside this binary
  int rounds = 5;
  int64_t global_batch = 256;  // as docs/performance.md's bench rows
  int warmup = 5, steps = 30;  // the bench's, per run
  std::string json_path = "host_check.json";
};

std::string self_exe() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

dpe::tools::BenchConfig bench_config(const Options& o, const std::string& mode, int devices) {
  dpe::tools::BenchConfig c;
  c.model = "mlp";
  c.mode = mode;
  c.devices = devices;
  c.global_batch = o.global_batch;
  c.warmup = o.warmup;
  c.steps = o.steps;
  return c;
}

// The rates, then the bench's three modes, back to back: a burst of load on the machine hits a
// round or two of both, and the best of the rounds drops it.
HostCheckRound measure_round(const Options& o, const HostCheckTraces& t) {
  HostCheckRound r;
  r.gemm_single = dpe::sim::measure_gemm_gflops(t.single, 10);
  r.gemm_shared = dpe::sim::measure_gemm_gflops(t.dp, 10);  // = a DDP rank's GEMMs, 2 at once
  r.memcpy = dpe::sim::measure_memcpy_gbs(8, t.memory_op_bytes);
  r.dram = dpe::sim::measure_memcpy_gbs(4);  // 64 MiB: past the caches
  r.all_reduce = dpe::sim::measure_all_reduce(self_exe(), t.buckets, 15);
  r.single_ms = dpe::tools::run_in_process(bench_config(o, "single", 1)).step_ms;
  r.dp_ms = dpe::tools::run_in_process(bench_config(o, "dp", 2)).step_ms;
  r.ddp_ms = dpe::tools::run_ddp(bench_config(o, "ddp", 2), o.bench).step_ms;
  return r;
}

void print_round(const HostCheckRound& r, const HostCheckPrediction& p) {
  std::printf(
      "round: gemm %.1f GFLOP/s alone, %.1f per device 2 at once; memcpy %.2f GB/s, %.2f GB/s "
      "from DRAM; ddp all-reduce alpha %.0f us, %.2f GB/s (",
      r.gemm_single, r.gemm_shared, r.memcpy, r.dram, r.all_reduce.alpha_us, r.all_reduce.gbs);
  for (size_t k = 0; k < r.all_reduce.bytes.size(); ++k) {
    std::printf("%s%lld B %.0f us", k ? ", " : "", static_cast<long long>(r.all_reduce.bytes[k]),
                r.all_reduce.us[k]);
  }
  std::printf("); bench single %.2f dp %.2f ddp %.2f ms\n", r.single_ms, r.dp_ms, r.ddp_ms);
  std::printf(
      "   this round predicts single %.2f dp %.2f ddp %.2f ms; speed-ups dp %.3f/%.3f ddp "
      "%.3f/%.3f\n",
      p.single.step_ms, p.dp.step_ms, p.ddp.step_ms, p.dp_speedup, r.single_ms / r.dp_ms,
      p.ddp_speedup, r.single_ms / r.ddp_ms);
  std::fflush(stdout);
}

// The best round against the prediction from its rates: each step, then the speed-ups.
void print_comparison(const Options& o, const HostCheckRound& best, const HostCheckPrediction& p) {
  std::printf(
      "best of the rounds: gemm %.1f GFLOP/s alone, %.1f per device 2 at once; memcpy %.2f GB/s, "
      "%.2f GB/s from DRAM; ddp all-reduce alpha %.0f us, %.2f GB/s\n",
      best.gemm_single, best.gemm_shared, best.memcpy, best.dram, best.all_reduce.alpha_us,
      best.all_reduce.gbs);
  for (const dpe::sim::Prediction* q : {&p.single, &p.dp, &p.ddp}) {
    std::printf("predicted %-4s %d: %.2f ms:", q->mode.c_str(), q->gpus, q->step_ms);
    for (const auto& [name, ms] : q->phases) std::printf(" %s %.2f", name.c_str(), ms);
    std::printf("\n");
  }
  const double meas_dp = best.single_ms / best.dp_ms, meas_ddp = best.single_ms / best.ddp_ms;
  std::printf("%-10s %12s %12s %8s\n", ("mlp b" + std::to_string(o.global_batch)).c_str(),
              "predicted", "measured", "pred/meas");
  std::printf("%-10s %9.2f ms %9.2f ms %8.3f\n", "single", p.single.step_ms, best.single_ms,
              p.single.step_ms / best.single_ms);
  std::printf("%-10s %9.2f ms %9.2f ms %8.3f\n", "dp 2", p.dp.step_ms, best.dp_ms,
              p.dp.step_ms / best.dp_ms);
  std::printf("%-10s %9.2f ms %9.2f ms %8.3f\n", "ddp 2", p.ddp.step_ms, best.ddp_ms,
              p.ddp.step_ms / best.ddp_ms);
  std::printf("%-10s %12.3f %12.3f %8.3f\n", "dp/single", p.dp_speedup, meas_dp,
              p.dp_speedup / meas_dp);
  std::printf("%-10s %12.3f %12.3f %8.3f\n", "ddp/single", p.ddp_speedup, meas_ddp,
              p.ddp_speedup / meas_ddp);
  const bool within = std::abs(p.dp_speedup / meas_dp - 1) <= kTolerance &&
                      std::abs(p.ddp_speedup / meas_ddp - 1) <= kTolerance;
  std::printf("speed-ups predicted within %.0f%% of the measured ones: %s\n", 100 * kTolerance,
              within ? "yes" : "no");
  std::fflush(stdout);
}

nlohmann::json steps_json(double single, double dp, double ddp) {
  return {{"single", single}, {"dp", dp}, {"ddp", ddp}};
}

nlohmann::json to_json(const Options& o, const std::vector<HostCheckRound>& rounds,
                       const HostCheckRound& best, const HostCheckPrediction& p) {
  nlohmann::json j;
  j["config"] = {{"model", "mlp"},         {"global_batch", o.global_batch},
                 {"rounds", o.rounds},     {"bench_warmup", o.warmup},
                 {"bench_steps", o.steps}, {"ddp_backend", "mpi"},
                 {"devices", 2},           {"cores", std::thread::hardware_concurrency()}};
  j["rounds"] = nlohmann::json::array();
  for (const HostCheckRound& r : rounds) {
    j["rounds"].push_back({{"gemm_gflops", r.gemm_single},
                           {"gemm_gflops_shared", r.gemm_shared},
                           {"memcpy_gbs", r.memcpy},
                           {"dram_gbs", r.dram},
                           {"all_reduce_alpha_us", r.all_reduce.alpha_us},
                           {"all_reduce_gbs", r.all_reduce.gbs},
                           {"measured_ms", steps_json(r.single_ms, r.dp_ms, r.ddp_ms)}});
  }
  const double meas_dp = best.single_ms / best.dp_ms, meas_ddp = best.single_ms / best.ddp_ms;
  j["measured_ms"] = steps_json(best.single_ms, best.dp_ms, best.ddp_ms);
  j["predicted_ms"] = steps_json(p.single.step_ms, p.dp.step_ms, p.ddp.step_ms);
  j["measured_speedup"] = {{"dp", meas_dp}, {"ddp", meas_ddp}};
  j["predicted_speedup"] = {{"dp", p.dp_speedup}, {"ddp", p.ddp_speedup}};
  j["speedup_ratio"] = {{"dp", p.dp_speedup / meas_dp}, {"ddp", p.ddp_speedup / meas_ddp}};
  return j;
}

// Reads the command line into `o`; the exit code when there is nothing to run, else -1.
int parse_options(int argc, char** argv, Options& o) {
  CLI::App app{
      "dpe host_check: the cost model's predicted speed-ups against //tools:bench's on "
      "this machine (a benchmark)"};
  app.add_option("--bench", o.bench,
                 "//tools:bench, whose DDP ranks are measured (default: the bench beside this "
                 "binary)");
  app.add_option("--rounds", o.rounds, "rounds of rates and bench runs; the best of each is kept")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--batch-size", o.global_batch, "GLOBAL batch size (split over 2 devices)")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--json", o.json_path,
                 "where to write the results (checked before the run: a path that cannot be "
                 "written exits 2)")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? dpe::tools::kExitOk : dpe::tools::kExitUsage;
  }
  if (o.global_batch % 2 != 0) {
    std::fprintf(stderr, "host_check: --batch-size %lld does not split over 2 devices\n",
                 static_cast<long long>(o.global_batch));
    return dpe::tools::kExitUsage;
  }
  return -1;
}

void run(Options& o) {
  o.json_path = dpe::tools::user_path(o.json_path);
  o.bench = o.bench.empty() ? (std::filesystem::path(self_exe()).parent_path() / "bench").string()
                            : dpe::tools::user_path(o.bench);
  DPE_TOOLS_CHECK(dpe::tools::UsageError, std::filesystem::is_regular_file(o.bench),
                  "--bench " << o.bench << " is not a file (bazel build //tools:bench)");
  dpe::tools::check_writable("--json", o.json_path);
  std::printf(
      "host_check: mlp, global batch %lld, SGD; single on 1 host device, dp on 2, ddp on 2 "
      "processes over MPI; bench %d warm-up + %d timed steps per run (median), %d rounds, %u "
      "cores; bench %s\n",
      static_cast<long long>(o.global_batch), o.warmup, o.steps, o.rounds,
      std::thread::hardware_concurrency(), o.bench.c_str());
  const HostCheckTraces t = dpe::sim::trace_host_check(o.global_batch);
  std::printf(
      "memory-bound ops of the step move %lld bytes (bytes-weighted median): memcpy at that size\n",
      static_cast<long long>(t.memory_op_bytes));
  std::vector<HostCheckRound> rounds;
  for (int k = 0; k < o.rounds; ++k) {
    rounds.push_back(measure_round(o, t));
    print_round(rounds.back(),
                dpe::sim::predict_host_check(t, dpe::sim::host_rates(rounds.back())));
  }
  const HostCheckRound best = dpe::sim::best_of(rounds);
  const HostCheckPrediction p = dpe::sim::predict_host_check(t, dpe::sim::host_rates(best));
  print_comparison(o, best, p);
  dpe::tools::write_file_atomically(o.json_path, to_json(o, rounds, best, p).dump(2) + "\n");
  std::printf("wrote %s\n", o.json_path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  // measure_all_reduce's ranks are this program, re-executed.
  if (const int code = dpe::sim::all_reduce_worker_main(argc, argv); code >= 0) return code;
  Options o;
  if (const int code = parse_options(argc, argv, o); code >= 0) return code;
  try {
    run(o);
    return dpe::tools::kExitOk;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "host_check: %s\n", e.what());
    return dpe::tools::exit_code_for(e);
  }
}
