// replay: a traced training step (tools/cost_model/step_trace.h) costed on a described cluster
// (tools/cost_model/cluster.h): each op by a roofline, DataParallel's step as device 0's serial
// phases with its transfers contending for links, DDP's as one rank's compute with NCCL's ring
// all-reduce per bucket overlapped with the rest of backward; per-GPU peak memory from the
// trace's allocators. The model, its calibration and what it leaves out: docs/cluster_model.md.
//
// Threading contract: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tools/cost_model/cluster.h"
#include "tools/cost_model/step_trace.h"

namespace dpe::sim {

// The fraction of the GPU's peak each class of op reaches. GEMM-class ops (linear, matmul, bmm)
// and convolutions against the FLOP peak of the precision's math; every other op against the memory
// bandwidth. Convolutions have one factor per math (cuDNN's fp32 kernels, Winograd among them, come
// close to the CUDA cores' peak; tensor cores reach a smaller share of theirs). Calibration and
// sources: docs/cluster_model.md ("Calibration").
struct Efficiency {
  double gemm = 0.54;
  double conv = 0.86;       // fp32 on CUDA cores
  double conv_tf32 = 0.25;  // TF32 tensor cores
  double conv_fp16 = 0.57;  // fp16 tensor cores, fp32 accumulation
  double memory = 0.80;
  double conv_for(Precision p) const;
};

struct ReplayOptions {
  Precision precision = Precision::kFp32;
  Efficiency efficiency;
  Framework framework;  // framework("pytorch") unless set
  // Per GPU, beyond what the trace's allocator held: the CUDA context, cuBLAS/cuDNN workspaces
  // and the caching allocator's rounding (PyTorch on a GPU: ~0.3-0.5 GiB before any tensor).
  double context_gib = 0.4;
  // DDP: whether a bucket's all-reduce needs the ranks' compute resources. False (GPUs, NCCL):
  // it runs on its own stream, overlapped with the rest of backward. True (host devices, Gloo):
  // Gloo's copies and TCP work run on the CPU cores the ranks compute with, so an all-reduce
  // runs after the backward work queued before it and delays the work after it (no overlap).
  bool communication_uses_compute = false;
  // DDP on GPUs whose all-reduce ring goes through host memory inside a node (NCCL's SHM
  // transport: P2P disabled, or PHB/NODE/SYS pairs): false, the all-reduce does not overlap
  // backward and adds its whole time to the step. Measured, not explained: in
  // huggingface/transformers#9371 (2x RTX 3090, GPT-2 124M, run_clm.py) DDP without NVLink cost
  // 101.2, 101.0 and 100.8 ms a step more than one GPU at blocks of 128, 256 and 512 tokens, while
  // the step's compute grew 3x; over NVLink the same runs overlapped. True: treat it as any link.
  bool host_memory_all_reduce_overlaps = false;
  // How much slower compute runs while a collective runs beside it (NCCL's kernels hold SMs and
  // memory bandwidth; a GEMM sized for every SM gets a tail wave): 18.9% on average, 40% at most,
  // measured for GPT and LLaMA training steps on 4 A100, H100, MI250 and MI210 (Characterizing
  // Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning, arXiv 2507.03114).
  // DDP only; 0 turns it off.
  double overlap_slowdown = 0.189;
  // DataParallel: whether reduce-add sums in flight. True (GPUs): PyTorch's reduce_add_coalesced
  // is NCCL's reduce, whose kernels add as the bytes arrive, so only the transfer costs time.
  // False (host devices): device 0's core adds every other device's gradients after the copy.
  bool reduce_add_in_flight = true;
  ReplayOptions();
};

struct Prediction {
  std::string mode;  // "dp", "ddp"
  int gpus = 0;
  bool possible = true;  // false: DataParallel over several nodes (one process cannot)
  std::string note;
  double step_ms = 0;
  // Time per phase in the step's critical path, in order (they sum to step_ms).
  std::vector<std::pair<std::string, double>> phases;
  std::string limiting;            // the phase with the most time
  std::vector<double> peak_gib;    // per GPU (DDP: every rank the same)
  bool out_of_memory = false;      // a peak above the GPU's memory (GpuSpec::mem_gib)
  int64_t comm_bytes_per_gpu = 0;  // DDP: bytes each rank sends; DP: bytes through device 0
  int buckets = 0;                 // DDP: gradient buckets (all-reduces) per step
  // The sharding strategies (sharding.h): what each GPU's peak holds, in GiB, in order.
  std::vector<std::pair<std::string, double>> memory_gib;
};

// Whether a traced event is a kernel on its device's stream: an op, a fill, or a copy within one
// device (a copy between devices is a transfer).
bool is_kernel(const TraceEvent& e);

// The time of one traced op on one GPU, in microseconds (roofline, at least the launch floor).
double op_time_us(const TraceEvent& e, const GpuSpec& gpu, const ReplayOptions& options);

// Collectives over GPUs 0..gpus-1 of `cluster` (node-major numbering), NCCL's algorithms as
// alpha-beta models on the fastest ring the topology allows; microseconds.
double all_reduce_us(const Cluster& cluster, int gpus, int64_t bytes);
double broadcast_us(const Cluster& cluster, int gpus, int64_t bytes);  // from GPU 0; = reduce
// NCCL's ring all-gather and reduce-scatter of `bytes` in all (the gathered buffer; each GPU
// contributes or keeps bytes / gpus): collective_base_us + (N-1)/N x bytes over the ring's
// slowest resource + (N-1) hops. An all-reduce on a ring is a reduce-scatter then an all-gather,
// so their bandwidth terms add up to all_reduce_us's ring term. Ring only, over several nodes too:
// NCCL runs these two on rings (its tree serves all-reduce alone).
double all_gather_us(const Cluster& cluster, int gpus, int64_t bytes);
double reduce_scatter_us(const Cluster& cluster, int gpus, int64_t bytes);
// The same costs with the ring over GPUs 0..gpus-1 searched once (NCCL's ring search tries every
// order of a node's GPUs), for pricing many collectives on one group.
class Collectives {
 public:
  Collectives(const Cluster& cluster, int gpus);
  double all_reduce_us(int64_t bytes) const;
  double all_gather_us(int64_t bytes) const;
  double reduce_scatter_us(int64_t bytes) const { return all_gather_us(bytes); }

 private:
  const Cluster& cluster_;
  int gpus_;
  double us_per_byte_ = 0, latency_us_ = 0;
};
// Whether the all-reduce ring over GPUs 0..gpus-1 crosses host memory inside a node (SHM).
bool all_reduce_through_host(const Cluster& cluster, int gpus);

// DataParallel's answer for more GPUs than one node has: not possible (one process).
Prediction dp_across_nodes(int gpus);
// DataParallel on trace.devices.size() GPUs of one node of `cluster`.
// (dp_across_nodes when that is more than the node has).
Prediction replay_dp(const TracedStep& trace, const Cluster& cluster, const ReplayOptions& options);
// DDP on `gpus` GPUs of `cluster` (over its nodes), from one rank's trace.
Prediction replay_ddp(const TracedStep& trace, int gpus, const Cluster& cluster,
                      const ReplayOptions& options);

}  // namespace dpe::sim
