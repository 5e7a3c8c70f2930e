#include "tools/cost_model/host_check.h"

#include <algorithm>

#include "engine/core/error.h"

namespace dpe::sim {

StepSpec host_check_step(int64_t batch_per_device) {
  StepSpec s;
  s.model = "mlp";
  s.batch_per_device = batch_per_device;
  s.optimizer = "sgd";
  s.gradient_as_bucket_view = true;
  return s;
}

HostCheckTraces trace_host_check(int64_t global_batch) {
  DPE_CHECK(global_batch >= 2 && global_batch % 2 == 0, "trace_host_check: a global batch of "
                                                            << global_batch
                                                            << " does not split over 2 devices");
  HostCheckTraces t;
  t.global_batch = global_batch;
  t.single = trace_dp_step(host_check_step(global_batch), 1);
  t.dp = trace_dp_step(host_check_step(global_batch / 2), 2);
  t.ddp = trace_ddp_step(host_check_step(global_batch / 2));
  t.buckets = bucket_bytes(t.ddp);
  t.memory_op_bytes = memory_op_bytes(t.single.events);
  return t;
}

HostRates host_rates(const HostCheckRound& r) {
  HostRates h;
  h.sgemm_gflops = r.gemm_single;
  h.sgemm_gflops_shared = r.gemm_shared;
  h.shared_devices = 2;
  h.memcpy_gbs = r.memcpy;
  h.dram_gbs = r.dram;
  h.ddp_alpha_us = r.all_reduce.alpha_us;
  h.ddp_gbs = r.all_reduce.gbs;
  return h;
}

HostCheckRound best_of(const std::vector<HostCheckRound>& rounds) {
  DPE_CHECK(!rounds.empty(), "best_of: no rounds");
  HostCheckRound b = rounds.front();
  b.all_reduce.bytes.clear();
  b.all_reduce.us.clear();
  for (const HostCheckRound& r : rounds) {
    b.gemm_single = std::max(b.gemm_single, r.gemm_single);
    b.gemm_shared = std::max(b.gemm_shared, r.gemm_shared);
    b.memcpy = std::max(b.memcpy, r.memcpy);
    b.dram = std::max(b.dram, r.dram);
    b.all_reduce.alpha_us = std::min(b.all_reduce.alpha_us, r.all_reduce.alpha_us);
    b.all_reduce.gbs = std::max(b.all_reduce.gbs, r.all_reduce.gbs);
    b.single_ms = std::min(b.single_ms, r.single_ms);
    b.dp_ms = std::min(b.dp_ms, r.dp_ms);
    b.ddp_ms = std::min(b.ddp_ms, r.ddp_ms);
  }
  return b;
}

HostCheckPrediction predict_host_check(const HostCheckTraces& t, const HostRates& rates) {
  const ReplayOptions o = host_replay_options();
  HostCheckPrediction p;
  p.single = replay_dp(t.single, host_cluster(1, rates), o);
  p.dp = replay_dp(t.dp, host_cluster(2, rates), o);
  p.ddp = replay_ddp(t.ddp, 2, host_ddp_cluster(2, rates), o);
  p.dp_speedup = p.single.step_ms / p.dp.step_ms;
  p.ddp_speedup = p.single.step_ms / p.ddp.step_ms;
  return p;
}

}  // namespace dpe::sim
