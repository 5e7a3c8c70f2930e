// host_check: what the cost model's check on this machine computes apart from the timing (which is
// //tools:host_check's, a benchmark): the Mlp's three traced steps, the host devices described as
// a cluster, the best of the rounds, and predictions that are finite, follow the trace and answer
// the rates they are given.
#include "tools/cost_model/host_check.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "engine/core/error.h"

namespace dpe::sim {
namespace {

constexpr int64_t kBatch = 256;  // the benchmark's default global batch

// Rates of the order a 2-core VM measures (docs/cluster_model.md), fixed: nothing is timed here.
HostCheckRound fixed_round() {
  HostCheckRound r;
  r.gemm_single = 100;
  r.gemm_shared = 90;
  r.memcpy = 20;
  r.dram = 8;
  r.all_reduce.alpha_us = 30;
  r.all_reduce.gbs = 6;
  r.single_ms = 5;
  r.dp_ms = 3.5;
  r.ddp_ms = 3.2;
  return r;
}

const HostCheckTraces& traces() {
  static const HostCheckTraces t = trace_host_check(kBatch);
  return t;
}

double phase_sum(const Prediction& p) {
  double ms = 0;
  for (const auto& phase : p.phases) ms += phase.second;
  return ms;
}

TEST(HostCheckTest, TracesTheMlpAsTheBenchTrainsIt) {
  const HostCheckTraces& t = traces();
  EXPECT_EQ(t.global_batch, kBatch);
  EXPECT_EQ(t.single.devices.size(), 1u);
  EXPECT_EQ(t.dp.devices.size(), 2u);
  EXPECT_EQ(t.ddp.devices.size(), 1u);  // one rank of 2
  for (const TracedStep* s : {&t.single, &t.dp, &t.ddp}) {
    EXPECT_FALSE(s->events.empty());
    EXPECT_EQ(s->param_bytes, t.single.param_bytes);
  }
  ASSERT_FALSE(t.buckets.empty());
  EXPECT_EQ(t.buckets, bucket_bytes(t.ddp));
  // float32 gradients, every one in a bucket: the buckets hold the parameters' bytes.
  EXPECT_EQ(std::accumulate(t.buckets.begin(), t.buckets.end(), int64_t{0}), t.single.param_bytes);
  EXPECT_EQ(t.memory_op_bytes, memory_op_bytes(t.single.events));
  EXPECT_GT(t.memory_op_bytes, 0);
  const StepSpec spec = host_check_step(128);
  EXPECT_EQ(spec.model, "mlp");
  EXPECT_EQ(spec.optimizer, "sgd");
  EXPECT_TRUE(spec.gradient_as_bucket_view);
  EXPECT_THROW(trace_host_check(255), Error);
}

TEST(HostCheckTest, HostRatesDescribeTwoDevicesSharingTheMachine) {
  const HostCheckRound r = fixed_round();
  const HostRates h = host_rates(r);
  EXPECT_EQ(h.sgemm_gflops, r.gemm_single);
  EXPECT_EQ(h.sgemm_gflops_shared, r.gemm_shared);
  EXPECT_EQ(h.shared_devices, 2);
  EXPECT_EQ(h.memcpy_gbs, r.memcpy);
  EXPECT_EQ(h.dram_gbs, r.dram);
  EXPECT_EQ(h.ddp_alpha_us, r.all_reduce.alpha_us);
  EXPECT_EQ(h.ddp_gbs, r.all_reduce.gbs);
  const Cluster dp = host_cluster(2, h);
  EXPECT_EQ(dp.total_gpus(), 2);
  EXPECT_NO_THROW(validate_topology(dp.topology));
  EXPECT_DOUBLE_EQ(dp.gpu.peak_tflops(Precision::kFp32) * 1e3, r.gemm_shared);
  EXPECT_DOUBLE_EQ(dp.pair_gbs(0, 1), r.dram);  // copies between host devices: from DRAM
  const Cluster ddp = host_ddp_cluster(2, h);
  EXPECT_EQ(ddp.nodes, 2);
  EXPECT_EQ(ddp.total_gpus(), 2);
  EXPECT_DOUBLE_EQ(ddp.network.gbs_per_node, r.all_reduce.gbs);
  EXPECT_DOUBLE_EQ(ddp.network.latency_us, r.all_reduce.alpha_us);
  EXPECT_DOUBLE_EQ(host_cluster(1, h).gpu.peak_tflops(Precision::kFp32) * 1e3, r.gemm_single);
}

TEST(HostCheckTest, BestOfTakesTheFastestOfEachSideOnItsOwn) {
  HostCheckRound a = fixed_round(), b = fixed_round();
  a.all_reduce.bytes = {4096};
  a.all_reduce.us = {20};
  b.gemm_single = 120;  // b: faster GEMMs and all-reduce latency, a slower dp step
  b.memcpy = 15;
  b.all_reduce.alpha_us = 25;
  b.all_reduce.gbs = 5;
  b.dp_ms = 4;
  b.ddp_ms = 3;
  const HostCheckRound best = best_of({a, b});
  EXPECT_EQ(best.gemm_single, 120);
  EXPECT_EQ(best.gemm_shared, 90);
  EXPECT_EQ(best.memcpy, 20);
  EXPECT_EQ(best.dram, 8);
  EXPECT_EQ(best.all_reduce.alpha_us, 25);
  EXPECT_EQ(best.all_reduce.gbs, 6);
  EXPECT_EQ(best.single_ms, 5);
  EXPECT_EQ(best.dp_ms, 3.5);
  EXPECT_EQ(best.ddp_ms, 3);
  EXPECT_TRUE(best.all_reduce.bytes.empty());
  EXPECT_TRUE(best.all_reduce.us.empty());
  EXPECT_THROW(best_of({}), Error);
}

TEST(HostCheckTest, PredictionsAreFiniteAndFollowTheTrace) {
  const HostCheckTraces& t = traces();
  const HostCheckPrediction p = predict_host_check(t, host_rates(fixed_round()));
  for (const Prediction* q : {&p.single, &p.dp, &p.ddp}) {
    EXPECT_TRUE(std::isfinite(q->step_ms)) << q->mode;
    EXPECT_GT(q->step_ms, 0) << q->mode;
    EXPECT_TRUE(q->possible) << q->mode;
    EXPECT_NEAR(phase_sum(*q), q->step_ms, 1e-9 * q->step_ms) << q->mode;
  }
  EXPECT_EQ(p.single.mode, "dp");
  EXPECT_EQ(p.single.gpus, 1);
  EXPECT_EQ(p.dp.mode, "dp");
  EXPECT_EQ(p.dp.gpus, 2);
  EXPECT_EQ(p.ddp.mode, "ddp");
  EXPECT_EQ(p.ddp.gpus, 2);
  EXPECT_EQ(p.ddp.buckets, static_cast<int>(t.buckets.size()));
  EXPECT_DOUBLE_EQ(p.dp_speedup, p.single.step_ms / p.dp.step_ms);
  EXPECT_DOUBLE_EQ(p.ddp_speedup, p.single.step_ms / p.ddp.step_ms);
  // Two devices at most halve the step; the Mlp's communication keeps them short of it.
  for (double s : {p.dp_speedup, p.ddp_speedup}) {
    EXPECT_GT(s, 0.5);
    EXPECT_LT(s, 2.0);
  }
  // A pure function of the trace and the rates: the same rates, the same figures.
  const HostCheckPrediction again = predict_host_check(t, host_rates(fixed_round()));
  EXPECT_EQ(again.single.step_ms, p.single.step_ms);
  EXPECT_EQ(again.dp.step_ms, p.dp.step_ms);
  EXPECT_EQ(again.ddp.step_ms, p.ddp.step_ms);
}

TEST(HostCheckTest, FasterRatesPredictFasterSteps) {
  const HostCheckTraces& t = traces();
  HostCheckRound slow = fixed_round(), fast = fixed_round();
  fast.gemm_single *= 2;
  fast.gemm_shared *= 2;
  fast.memcpy *= 2;
  fast.dram *= 2;
  fast.all_reduce.gbs *= 2;
  fast.all_reduce.alpha_us /= 2;
  const HostCheckPrediction a = predict_host_check(t, host_rates(slow));
  const HostCheckPrediction b = predict_host_check(t, host_rates(fast));
  EXPECT_LT(b.single.step_ms, a.single.step_ms);
  EXPECT_LT(b.dp.step_ms, a.dp.step_ms);
  EXPECT_LT(b.ddp.step_ms, a.ddp.step_ms);
}

}  // namespace
}  // namespace dpe::sim
