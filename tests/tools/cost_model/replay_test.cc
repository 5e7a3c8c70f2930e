// The replay's pieces against hand computations: the roofline of one op, NCCL's ring on a given
// topology, DDP's overlap of bucket all-reduces with backward, DataParallel's phases of a traced
// step.
#include "tools/cost_model/replay.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <utility>

#include "engine/core/error.h"
#include "engine/nn/fusion.h"

namespace dpe::sim {
namespace {

TraceEvent op(const char* cls, double flops, int64_t bytes, bool backward = false) {
  TraceEvent e;
  e.kind = TraceKind::kOp;
  e.name = cls;
  e.op_class = cls;
  e.flops = flops;
  e.bytes_read = bytes;
  e.backward = backward;
  return e;
}

TraceEvent bucket(int64_t bytes) {
  TraceEvent e;
  e.kind = TraceKind::kBucket;
  e.bytes_read = bytes;
  return e;
}

// Appends a backward of 10 ms of compute, bucket A (100 MB), 10 ms more, bucket B (50 MB, the
// last) at `flops_per_ms`; returns the two buckets.
std::pair<TraceEvent, TraceEvent> push_two_bucket_backward(TracedStep& t, double flops_per_ms) {
  t.events.push_back(op("gemm", 10 * flops_per_ms, 0, true));
  const TraceEvent a = bucket(100'000'000);
  t.events.push_back(a);
  t.events.push_back(op("gemm", 10 * flops_per_ms, 0, true));
  const TraceEvent b = bucket(50'000'000);
  t.events.push_back(b);
  return {a, b};
}

// No framework costs: a step's phases are its ops' and its collectives' alone.
ReplayOptions without_framework_costs() {
  ReplayOptions o;
  o.framework.op_dispatch_us = 0;
  o.framework.ddp_fixed_us = 0;
  o.framework.ddp_per_tensor_us = 0;
  o.framework.ddp_per_bucket_us = 0;
  return o;
}

TEST(ReplayTest, AnOpTakesTheSlowerOfItsFlopsAndItsBytesAndAtLeastALaunch) {
  const GpuSpec& gpu = gpu_spec("titanrtx");
  ReplayOptions o;
  const double gemm = op_time_us(op("gemm", 1e12, 0), gpu, o);
  EXPECT_NEAR(gemm, 1e12 / (gpu.fp32_tflops * 1e12 * o.efficiency.gemm) * 1e6, 1e-6);
  const double bytes = op_time_us(op("softmax", 1e3, 1'000'000'000), gpu, o);
  EXPECT_NEAR(bytes, 1e9 / (gpu.mem_bw_gbs * 1e9 * o.efficiency.memory) * 1e6, 1e-6);
  EXPECT_EQ(op_time_us(op("elementwise", 1, 4), gpu, o), gpu.launch_us);
  // Tensor cores speed up GEMMs; mixed precision halves the activations' bytes, not the fp32
  // optimizer's.
  o.precision = Precision::kFp16;
  EXPECT_LT(op_time_us(op("gemm", 1e12, 0), gpu, o), gemm / 4);
  EXPECT_NEAR(op_time_us(op("softmax", 1e3, 1'000'000'000), gpu, o), bytes / 2, 1e-6);
  EXPECT_NEAR(op_time_us(op("optimizer", 0, 1'000'000'000), gpu, o), bytes, 1e-6);
  // bf16 is mixed precision at fp16's rates and bytes (on a GPU that has it: Ampere on).
  const GpuSpec& a100 = gpu_spec("a100");
  const double fp16_gemm = op_time_us(op("gemm", 1e12, 0), a100, o);
  const double fp16_softmax = op_time_us(op("softmax", 1e3, 1'000'000'000), a100, o);
  o.precision = Precision::kBf16;
  EXPECT_DOUBLE_EQ(op_time_us(op("gemm", 1e12, 0), a100, o), fp16_gemm);
  EXPECT_DOUBLE_EQ(op_time_us(op("softmax", 1e3, 1'000'000'000), a100, o), fp16_softmax);
  EXPECT_THROW(op_time_us(op("gemm", 1e12, 0), gpu, o), Error);  // a TITAN RTX has no bf16
  // Convolutions have a factor per math.
  for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kFp16}) {
    o.precision = p;
    EXPECT_NEAR(op_time_us(op("conv", 1e12, 0), gpu, o),
                1e12 / (gpu.peak_tflops(p) * 1e12 * o.efficiency.conv_for(p)) * 1e6, 1e-6);
  }
}

// The GPUs the replay prices run PyTorch's eager ops: batch norm and ReLU traced as two ops, though
// host devices fuse them, and the process's fusion switch left as it was.
TEST(ReplayTest, TracesBatchNormAndReluAsTwoOps) {
  StepSpec spec;
  spec.model = "convnet";
  spec.batch_per_device = 4;
  ASSERT_TRUE(nn::fusion_enabled());
  for (const TracedStep& t : {trace_dp_step(spec, 2), trace_ddp_step(spec)}) {
    int relu = 0, batch_norm = 0, fused = 0;
    for (const TraceEvent& e : t.events) {
      if (e.kind != TraceKind::kOp) continue;
      relu += e.name == "relu";
      batch_norm += e.name == "batch_norm";
      fused += e.name.rfind("batch_norm_relu", 0) == 0;
    }
    EXPECT_GT(relu, 0);
    EXPECT_EQ(batch_norm, relu);  // the ConvNet's ReLUs all follow a batch norm
    EXPECT_EQ(fused, 0);
  }
  EXPECT_TRUE(nn::fusion_enabled());
}

// reduce_add_in_flight (GPUs: NCCL's reduce) leaves reduce-add's adds out of device 0's time;
// on host devices device 0's core does them, after the copies.
TEST(ReplayTest, ReduceAddsSumsCostDeviceZeroOnlyWhenNotInFlight) {
  StepSpec spec;
  spec.model = "mlp";
  spec.batch_per_device = 32;
  const TracedStep t = trace_dp_step(spec, 2);
  int64_t add_bytes = 0;  // backward adds on device 0: for the Mlp, reduce-add's alone
  for (const TraceEvent& e : t.events) {
    if (e.kind == TraceKind::kOp && e.backward && e.name == "add" && e.device == t.devices[0]) {
      add_bytes += e.bytes_read + e.bytes_written;
    }
  }
  ASSERT_GT(add_bytes, 0);
  const Cluster c = cluster_preset("pcie-a100", 2);
  ReplayOptions in_flight, on_device;
  on_device.reduce_add_in_flight = false;
  auto reduce_add_ms = [&](const ReplayOptions& o) {
    for (const auto& [name, ms] : replay_dp(t, c, o).phases) {
      if (name == "reduce_add") return ms;
    }
    return 0.0;
  };
  const double extra_ms = reduce_add_ms(on_device) - reduce_add_ms(in_flight);
  EXPECT_GT(extra_ms, 0);
  // At least the adds' bytes at the memory rate (each op also pays its launch floor).
  EXPECT_GE(extra_ms * 1e3 + 1e-9,
            add_bytes / (c.gpu.mem_bw_gbs * 1e3 * on_device.efficiency.memory));
}

TEST(ReplayTest, TwoGpuAllReduceIsTheBytesOverTheirLinkPlusTwoHops) {
  const Cluster c = cluster_preset("titanrtx-nvlink", 2);
  const int64_t bytes = 500'000'000;
  // 2(N-1)/N = 1 of the bytes each way over NV2, two latency steps.
  EXPECT_NEAR(all_reduce_us(c, 2, bytes),
              c.links.collective_base_us + bytes / (c.pair_gbs(0, 1) * 1e3) +
                  2 * c.pair_latency_us(0, 1),
              1e-6);
  EXPECT_EQ(all_reduce_us(c, 1, bytes), 0);
  // Without P2P both directions share the host's bridge: slower.
  EXPECT_GT(all_reduce_us(cluster_preset("titanrtx-pcie", 2), 2, bytes),
            2 * all_reduce_us(c, 2, bytes));
}

// Every collective pays NCCL's base latency and its hops, and every bucket DDP's launch on the CPU:
// 25 buckets of 1 MiB cost more than one of 25 MiB where nothing hides them (the end of backward).
TEST(ReplayTest, SmallBucketsPayEachCollectivesFixedCosts) {
  const Cluster c = cluster_preset("dgx-a100", 8);
  EXPECT_GT(c.links.collective_base_us, 0);
  EXPECT_GT(ReplayOptions().framework.ddp_per_bucket_us, 0);
  const int64_t mib = int64_t{1} << 20;
  EXPECT_GT(25 * all_reduce_us(c, 8, mib), all_reduce_us(c, 8, 25 * mib) + 24 * 40);
  const ReplayOptions o;
  auto step_ms = [&](int buckets, int64_t bytes) {
    TracedStep t;
    t.events.push_back(op("gemm", 1e9, 0, true));
    for (int i = 0; i < buckets; ++i) t.events.push_back(bucket(bytes));
    t.peak_bytes = {1};
    return replay_ddp(t, 8, c, o).step_ms;
  };
  const double small = step_ms(25, mib), large = step_ms(1, 25 * mib);
  EXPECT_GT(small - large,
            24 * (c.links.collective_base_us + o.framework.ddp_per_bucket_us) / 1e3 - 1e-9);
}

// A peak above the GPU's memory is marked, for DataParallel's device 0 and DDP's ranks alike.
TEST(ReplayTest, APeakAboveTheGpusMemoryIsOutOfMemory) {
  const Cluster c = cluster_preset("dgx1-v100", 2);  // 32 GiB GPUs
  const int64_t gib = int64_t{1} << 30;
  TracedStep t;
  t.events.push_back(op("gemm", 1e9, 0));
  t.devices = {Device(DeviceType::kHost, 0), Device(DeviceType::kHost, 1)};
  t.peak_bytes = {20 * gib, 10 * gib};
  EXPECT_FALSE(replay_dp(t, c, ReplayOptions()).out_of_memory);
  EXPECT_FALSE(replay_ddp(t, 2, c, ReplayOptions()).out_of_memory);
  t.peak_bytes = {40 * gib, 10 * gib};  // device 0 only, as DataParallel's
  EXPECT_TRUE(replay_dp(t, c, ReplayOptions()).out_of_memory);
  EXPECT_TRUE(replay_ddp(t, 2, c, ReplayOptions()).out_of_memory);  // rank 0's trace
}

// Through host memory, two transfers at once (the ring's two directions) share the bridge at
// NCCL's measured efficiency (NVIDIA/nccl#384); one transfer (a broadcast's chain) does not.
TEST(ReplayTest, ConcurrentTransfersThroughHostMemoryShareTheBridgeAtNcclsMeasuredRate) {
  const Cluster c = cluster_preset("titanrtx-pcie", 2);
  const int64_t bytes = 500'000'000;
  const double bridge = c.links.host_bridge_gbs, eff = c.links.host_duplex_efficiency;
  EXPECT_NEAR(eff, 7.8 / 10.31, 1e-9);
  EXPECT_NEAR(all_reduce_us(c, 2, bytes),
              c.links.collective_base_us + bytes / (bridge * eff / 2 * 1e3) +
                  2 * c.pair_latency_us(0, 1),
              1e-6);
  EXPECT_NEAR(broadcast_us(c, 2, bytes), bytes / (bridge * 1e3) + c.pair_latency_us(0, 1), 1e-6);
}

TEST(ReplayTest, TheRingOnADgx1UsesOnlyNvlinks) {
  // DGX-1's hybrid cube-mesh has rings of NVLinks only; GPU order 0..7 crosses SYS (GPU3-GPU4).
  const Cluster c = cluster_preset("dgx1-v100", 8);
  const int64_t bytes = 1'000'000'000;
  const double slowest_nvlink = c.links.nvlink_gbs_per_link;
  const double expected = 2.0 * 7 / 8 * bytes / (slowest_nvlink * 1e3);
  EXPECT_LE(all_reduce_us(c, 8, bytes), expected + 14 * c.links.p2p_latency_us + 1e-6);
  EXPECT_LT(c.pair_gbs(3, 4), slowest_nvlink);  // the pair the ring must avoid
}

TEST(ReplayTest, DdpOverlapsBucketsWithTheRestOfBackward) {
  const Cluster c = cluster_preset("titanrtx-pcie", 2);
  ReplayOptions o = without_framework_costs();
  o.overlap_slowdown = 0;                    // checked on its own below
  o.host_memory_all_reduce_overlaps = true;  // the slow link stands for any link here
  const GpuSpec& gpu = c.gpu;
  // forward 1 ms; backward: 10 ms, bucket A, 10 ms, bucket B (the last); step 1 ms.
  const double flops_per_ms = gpu.fp32_tflops * 1e9 * o.efficiency.gemm;
  TracedStep t;
  t.events.push_back(op("gemm", flops_per_ms, 0));
  const auto [a, b] = push_two_bucket_backward(t, flops_per_ms);
  t.events.push_back(
      op("optimizer", 0, static_cast<int64_t>(gpu.mem_bw_gbs * 1e6 * o.efficiency.memory)));
  t.peak_bytes = {1};
  const Prediction p = replay_ddp(t, 2, c, o);
  const double ar_a = all_reduce_us(c, 2, a.bytes_read) / 1e3,
               ar_b = all_reduce_us(c, 2, b.bytes_read) / 1e3;
  // Bucket A starts at 11 ms, B when both A is done and backward reaches it (21 ms).
  const double comm_end = std::max(11 + ar_a, 21.0) + ar_b;
  std::map<std::string, double> phases(p.phases.begin(), p.phases.end());
  EXPECT_NEAR(phases["forward"], 1, 1e-6);
  EXPECT_NEAR(phases["backward"], 20, 1e-6);
  EXPECT_NEAR(phases["all_reduce_exposed"], comm_end - 21, 1e-6);
  EXPECT_NEAR(phases["step"], 1, 1e-6);
  EXPECT_NEAR(p.step_ms, comm_end + 1, 1e-6);
  EXPECT_NEAR(replay_ddp(t, 1, c, o).step_ms, 22, 1e-9);  // one GPU: nothing to reduce
}

// Through host memory (NCCL's SHM) the all-reduces do not overlap backward: each runs after the
// compute queued before it and delays what follows (huggingface/transformers#9371).
TEST(ReplayTest, AnAllReduceThroughHostMemoryDoesNotOverlapBackward) {
  EXPECT_TRUE(all_reduce_through_host(cluster_preset("titanrtx-pcie", 2), 2));
  EXPECT_FALSE(all_reduce_through_host(cluster_preset("titanrtx-nvlink", 2), 2));
  EXPECT_FALSE(all_reduce_through_host(cluster_preset("dgx1-v100", 8), 8));  // an NVLink ring
  EXPECT_FALSE(all_reduce_through_host(cluster_preset("pcie-a100", 2), 2));  // PIX: PCIe P2P
  EXPECT_TRUE(all_reduce_through_host(cluster_preset("pcie-a100", 8), 8));   // SYS: two sockets
  EXPECT_FALSE(all_reduce_through_host(cluster_preset("titanrtx-pcie", 2), 1));

  const Cluster c = cluster_preset("titanrtx-pcie", 2);
  ReplayOptions o = without_framework_costs();
  const double flops_per_ms = c.gpu.fp32_tflops * 1e9 * o.efficiency.gemm;
  TracedStep t;
  const auto [a, b] = push_two_bucket_backward(t, flops_per_ms);
  t.peak_bytes = {1};
  const double ar = (all_reduce_us(c, 2, a.bytes_read) + all_reduce_us(c, 2, b.bytes_read)) / 1e3;
  std::map<std::string, double> phases;
  const Prediction p = replay_ddp(t, 2, c, o);
  for (const auto& [name, ms] : p.phases) phases[name] = ms;
  EXPECT_NEAR(phases["backward"], 20, 1e-6);  // no compute ran beside a collective
  EXPECT_NEAR(phases["all_reduce_exposed"], ar, 1e-6);
  EXPECT_NEAR(p.step_ms, 20 + ar, 1e-6);
  o.host_memory_all_reduce_overlaps = true;  // as over any other link: bucket A hides
  EXPECT_LT(replay_ddp(t, 2, c, o).step_ms, p.step_ms);
}

TEST(ReplayTest, ComputeBesideAnAllReduceRunsSlower) {
  const Cluster c = cluster_preset("titanrtx-pcie", 2);
  ReplayOptions o = without_framework_costs();
  o.overlap_slowdown = 0.25;
  o.host_memory_all_reduce_overlaps = true;
  const double flops_per_ms = c.gpu.fp32_tflops * 1e9 * o.efficiency.gemm;
  // backward: a bucket whose all-reduce lasts W ms, then 2 ms of compute beside it, then the last
  // (empty) bucket.
  TracedStep t;
  t.events.push_back(op("gemm", 0, 0, true));
  const TraceEvent a = bucket(100'000'000);
  t.events.push_back(a);
  t.events.push_back(op("gemm", 2 * flops_per_ms, 0, true));
  t.events.push_back(bucket(0));
  t.peak_bytes = {1};
  const double w = all_reduce_us(c, 2, a.bytes_read) / 1e3;
  ASSERT_GT(w, 2 * 1.25);  // the op runs entirely beside the all-reduce
  std::map<std::string, double> phases;
  for (const auto& [name, ms] : replay_ddp(t, 2, c, o).phases) phases[name] = ms;
  const double launch = c.gpu.launch_us / 1e3;  // the empty first op's floor
  EXPECT_NEAR(phases["backward"], launch + 2 * 1.25, 1e-6);
  EXPECT_NEAR(phases["backward"] + phases["all_reduce_exposed"], launch + w, 1e-6);
}

TEST(ReplayTest, DataParallelsStepHasEveryPhaseAndDeviceZeroHoldsMore) {
  StepSpec spec;
  spec.model = "mlp";
  spec.batch_per_device = 32;
  const TracedStep t = trace_dp_step(spec, 4);
  const Cluster c = cluster_preset("pcie-a100", 4);
  const Prediction p = replay_dp(t, c, ReplayOptions());
  std::map<std::string, double> phases(p.phases.begin(), p.phases.end());
  for (const char* ph : {"framework", "replicate", "scatter", "forward", "gather", "loss",
                         "grad_scatter", "backward", "reduce_add", "step"}) {
    EXPECT_GT(phases[ph], 0) << ph;
  }
  double sum = 0;
  for (const auto& ph : p.phases) sum += ph.second;
  EXPECT_NEAR(sum, p.step_ms, 1e-9);
  ASSERT_EQ(p.peak_gib.size(), 4u);
  for (int k = 1; k < 4; ++k) EXPECT_GT(p.peak_gib[0], p.peak_gib[k]);
  // Beyond one node DataParallel is not possible; DDP is.
  const Cluster two = cluster_preset("dgx-a100", 8, 2);
  const Prediction across =
      replay_dp(trace_dp_step(spec, 2), cluster_preset("dgx-a100", 1, 2), ReplayOptions());
  EXPECT_FALSE(across.possible);
  EXPECT_NE(across.note.find("one process"), std::string::npos);
  EXPECT_GT(replay_ddp(trace_ddp_step(spec), 16, two, ReplayOptions()).step_ms, 0);
}

// Balanced-DataParallel's gpu0_bsz: device 0 gets its own chunk, the others batch_per_device.
TEST(ReplayTest, DeviceZerosOwnBatchIsTheChunkItComputes) {
  StepSpec spec;
  spec.model = "mlp";
  spec.batch_per_device = 32;
  spec.gpu0_batch = 4;
  EXPECT_EQ(dp_global_batch(spec, 3), 4 + 2 * 32);
  EXPECT_EQ(dp_global_batch(spec, 1), 32);  // one GPU: the plain step
  const TracedStep t = trace_dp_step(spec, 3);
  std::map<int, int64_t> rows;  // device -> rows of its first forward linear
  for (const TraceEvent& e : t.events) {
    if (e.kind == TraceKind::kOp && e.name == "linear" && !e.backward &&
        rows.count(e.device.index()) == 0) {
      rows[e.device.index()] = e.shapes.at(0).at(0);
    }
  }
  EXPECT_EQ(rows, (std::map<int, int64_t>{{0, 4}, {1, 32}, {2, 32}}));
  // Device 0 with no chunk at all (gpu0_bsz 0) computes nothing of forward, yet still steps.
  spec.gpu0_batch = 0;
  const TracedStep none = trace_dp_step(spec, 3);
  for (const TraceEvent& e : none.events) {
    if (e.kind == TraceKind::kOp && e.name == "linear" && !e.backward) {
      EXPECT_NE(e.device.index(), 0);
    }
  }
  const Prediction p = replay_dp(none, cluster_preset("pcie-a100", 3), ReplayOptions());
  EXPECT_GT(p.step_ms, 0);
  ASSERT_EQ(p.peak_gib.size(), 3u);
}

}  // namespace
}  // namespace dpe::sim
