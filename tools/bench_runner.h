// The measurements behind //tools:bench: training throughput of one configuration — a model, a
// global batch, a device count and a mode (single device, DataParallel, DDP) — as the median of
// timed steps after warm-up, with each device's peak memory and busy share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dpe::tools {

struct BenchConfig {
  std::string model = "convnet";  // toy | mlp | convnet
  std::string mode = "dp";        // single | dp | ddp
  int devices = 1;
  int64_t global_batch = 256;
  int warmup = 5;
  int steps = 20;
  std::string data_dir;
};

struct DeviceUse {
  std::string device;
  double peak_bytes = 0;
  double busy_share = 0;  // busy time / step time (median step)
};

struct BenchResult {
  BenchConfig config;
  double step_ms = 0;  // median
  double samples_per_second = 0;
  double gflops = 0;  // achieved, from the model's analytic FLOPs per training sample
  std::vector<DeviceUse> devices;
  std::vector<double> phase_ms;  // dp: device 0's busy time per phase (StepProfiler order)
};

// Training FLOPs per sample (forward + both backward products, except the input gradient of
// the first layer, which training does not need).
double training_flops_per_sample(const std::string& model);

// Runs single or dp in this process (host devices with one compute thread each).
BenchResult run_in_process(const BenchConfig& config);

// Runs ddp: re-executes `self_exe` as `devices` worker processes (one host device, one thread
// each) rendezvousing on 127.0.0.1, and reads rank 0's result.
BenchResult run_ddp(const BenchConfig& config, const std::string& self_exe);

// The worker side of run_ddp, entered by --ddp-worker: measures, then rank 0 writes its JSON
// result to `result_path`.
void ddp_worker(const BenchConfig& config, const std::string& result_path);

// One oneDNN SGEMM (n x n x n) on one thread; returns GFLOP/s (median of `reps`).
double measure_gemm_gflops(int64_t n, int reps);

}  // namespace dpe::tools
