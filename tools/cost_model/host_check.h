// host_check: the cost model's check against //tools:bench on this machine (the "host mode",
// host_cluster.h): the Mlp traced as the bench trains it (one device, DataParallel on 2 host
// devices, one DDP rank of 2), replayed on the host devices described as a cluster with rates
// measured beside the bench's own runs, the best of several rounds on both sides. The measuring
// is //tools:host_check's, a benchmark (docs/cluster_model.md, "Validation"); what is here depends
// on nothing but its arguments, so a test checks it.
//
// Threading contract: trace_host_check sets the host devices (step_trace.h: one thread that is not
// a device worker); the rest are pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "tools/cost_model/host_cluster.h"
#include "tools/cost_model/replay.h"
#include "tools/cost_model/step_trace.h"

namespace dpe::sim {

// The Mlp as //tools:bench trains it: SGD with momentum 0.9, DDP's buckets views of the
// gradients (the bench's DDP rows).
StepSpec host_check_step(int64_t batch_per_device);

struct HostCheckTraces {
  int64_t global_batch = 0;
  TracedStep single;             // one device, the whole batch
  TracedStep dp;                 // DataParallel on 2 host devices
  TracedStep ddp;                // one DDP rank of 2, half the batch
  std::vector<int64_t> buckets;  // the DDP rank's bucket all-reduces, in bytes (bucket_bytes)
  // The size at which the single step's memory-bound ops move their bytes (memory_op_bytes): the
  // memcpy rate is measured there.
  int64_t memory_op_bytes = 0;
};
// dpe::Error for a global batch that is not a positive even number.
HostCheckTraces trace_host_check(int64_t global_batch);

// What one round measures: the rates (the traced GEMMs alone and 2 at once, memcpy at the step's
// size and past the caches, the DDP backend's all-reduce at the buckets' sizes), then the bench's
// step in each mode (medians of its timed steps), in ms.
struct HostCheckRound {
  double gemm_single = 0, gemm_shared = 0, memcpy = 0, dram = 0;
  AllReduceRates all_reduce;
  double single_ms = 0, dp_ms = 0, ddp_ms = 0;
};
// A round's rates as host_cluster takes them: 2 devices share the machine in dp and ddp.
HostRates host_rates(const HostCheckRound& round);
// The best of the rounds on both sides, each field on its own: the fastest rates (the largest
// GFLOP/s and GB/s, the smallest all-reduce alpha) and the fastest steps. A neighbour on a shared
// machine only ever slows a run down, so the best round is the machine undisturbed (timeit's
// rule). The all-reduce's per-size figures (bytes, us) stay empty. dpe::Error without rounds.
HostCheckRound best_of(const std::vector<HostCheckRound>& rounds);

struct HostCheckPrediction {
  Prediction single, dp, ddp;
  double dp_speedup = 0, ddp_speedup = 0;  // single's step over each one's
};
// The three steps replayed on host_cluster(1), host_cluster(2) and host_ddp_cluster(2) with
// host_replay_options().
HostCheckPrediction predict_host_check(const HostCheckTraces& traces, const HostRates& rates);

}  // namespace dpe::sim
