// sharding: the ways out of device 0's memory priced beside DDP, with PyTorch's names: DDP +
// ZeroRedundancyOptimizer (ZeRO-1), FSDP SHARD_GRAD_OP (ZeRO-2) and FSDP FULL_SHARD (ZeRO-3), each
// with or without activation checkpointing per transformer block. A step is summarised as a
// StepProfile (one GPU's compute per phase, its activations, the FSDP units' sizes), taken from a
// traced step or, for GPTs too large to trace, from the GPT's configuration (Korthikanti et al.
// 2022 for activations); predict_strategy adds each strategy's model states (zero.h),
// collectives and their overlap. Formulas and assumptions: docs/cluster_model.md ("Sharding").
//
// Threading contract: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/gpt.h"
#include "tools/cost_model/cluster.h"
#include "tools/cost_model/replay.h"
#include "tools/cost_model/step_trace.h"

namespace dpe::sim {

enum class Strategy { kDdp, kZero1, kShardGradOp, kFullShard };
const std::vector<Strategy>& all_strategies();  // in that order
std::string strategy_flag(Strategy s);   // --strategy's "ddp", "zero1", "grad-op", "full-shard"
std::string strategy_label(Strategy s);  // "DDP", "DDP+ZeRO-1", "FSDP SHARD_GRAD_OP", ...
int zero_stage(Strategy s);              // 0, 1, 2, 3
Strategy strategy_from_flag(const std::string& flag);  // dpe::Error listing the flags

struct StepProfile {
  int64_t params = 0;  // Ψ
  // FSDP's wrapped units, [0] the root (a GPT's embeddings, final LayerNorm and tied head), then
  // one per transformer block; a model without blocks is one root unit. Sums to params.
  std::vector<int64_t> unit_params;
  // One GPU's compute for its batch, without communication: forward, backward, the optimizer's
  // step over all Ψ, and with activation checkpointing the forward of the checkpointed blocks.
  double forward_us = 0, backward_us = 0, optimizer_us = 0, recompute_us = 0;
  // The activations' peak (with inputs, outputs, logits and the loss), in the run's precision,
  // without and with checkpointing per block.
  double activation_bytes = 0, checkpointed_activation_bytes = 0;
  bool checkpointable = false;  // a GPT: per-block checkpointing applies
};

// A GPT as dpe's models/gpt.h builds it (tied head, learned positions, biases):
//   Ψ = L (12 d² + 13 d) + V d + context d + 2 d.
int64_t gpt_block_parameters(const models::GptConfig& c);
int64_t gpt_parameters(const models::GptConfig& c);
// Forward FLOPs of `batch` sequences of `seq` tokens: 2 x tokens x (12 L d² + V d) for the GEMMs
// and 4 b s² d L for attention's two batched products (the whole square, as dpe computes it);
// backward is twice that (6Ψ per token in all, plus attention).
double gpt_forward_flops(const models::GptConfig& c, int64_t batch, int64_t seq);
// Activations kept for backward, in bytes (Korthikanti et al. 2022, table 2, no tensor or
// sequence parallelism): per block sbh (34 + 5 a s / h) in fp16 with dropout (16 sbh + 2 a s² b
// 16-bit values and 2 sbh + a s² b one-byte masks), fp32 doubling the values (66 sbh + 9 a s² b);
// without dropout 16 sbh + a s² b values. Outside the blocks: the embedding's dropout mask, the
// final LayerNorm's and the head's inputs (sbh each), the logits (sbV) and the loss's fp32
// log-softmax (4 sbV bytes). With checkpointing: each block's input (sbh) plus one block's full
// set (the one being recomputed) and the same outside part.
double gpt_activation_bytes(const models::GptConfig& c, int64_t batch, int64_t seq,
                            Precision precision, bool checkpointing);
// The analytic profile: GEMMs at the GPU's peak for the precision x Efficiency::gemm; memory-bound
// work as twice the activations' bytes (each written by one memory-bound op and read by one) at
// the memory bandwidth x Efficiency::memory, backward twice forward; the optimizer streams 28
// bytes per parameter (AdamW: reads parameter, gradient, two moments, writes three) or 20 (SGD).
StepProfile gpt_profile(const models::GptConfig& c, int64_t batch, int64_t seq, const GpuSpec& gpu,
                        const ReplayOptions& options, const std::string& optimizer);
// The profile of a traced DDP step (trace_ddp_step): each kernel's replay time summed per phase
// (forward, backward, optimizer), the activations as the trace's peak less its parameters,
// gradients, optimizer state and buckets (halved in fp16: the trace is fp32). For a GPT (`gpt`
// set), the units and the checkpointed share of activations and forward come from the
// configuration (the trace does not see block boundaries).
StepProfile traced_profile(const TracedStep& ddp_trace, const std::optional<models::GptConfig>& gpt,
                           int64_t batch, int64_t seq, const GpuSpec& gpu,
                           const ReplayOptions& options);

struct StrategyOptions {
  Strategy strategy = Strategy::kDdp;
  bool activation_checkpointing = false;
  std::string optimizer = "adamw";  // "adamw", "adam", "sgd"
  double bucket_cap_mb = 25;        // DDP's buckets
};
std::string strategy_mode(const StrategyOptions& s);  // "zero1", "full-shard+ac", ...

// One strategy on `gpus` GPUs of `cluster`: phases (framework, all_gather_forward, forward,
// backward, recompute, all_gather_backward, all_reduce_exposed or reduce_scatter_exposed, step,
// param_all_gather), peak memory per GPU with its parts (memory_gib), OOM against the GPU.
// Collectives run on NCCL's stream: DDP's buckets and FSDP's reduce-scatters overlap the rest of
// backward (the compute beside them slowed by ReplayOptions::overlap_slowdown); all-gathers are
// exposed (no prefetch); ZeRO-1's all-gather of the updated parameters follows the step.
// dpe::Error for checkpointing on a profile that is not checkpointable or gpus outside the cluster.
Prediction predict_strategy(const StepProfile& profile, const StrategyOptions& strategy, int gpus,
                            const Cluster& cluster, const ReplayOptions& options);
// The same with the group's collectives already set up (Collectives(cluster, gpus)).
Prediction predict_strategy(const StepProfile& profile, const StrategyOptions& strategy, int gpus,
                            const Cluster& cluster, const ReplayOptions& options,
                            const Collectives& nccl);

// --largest-gpt: the GPT-2 and GPT-3 shapes (Radford et al. 2019; Brown et al. 2020, table 2.1)
// and GPT-NeoX-20B's, MPT-30B's and a LLaMA-65B-sized one between them, smallest first.
struct GptRung {
  std::string name;
  int64_t layers, d_model, heads;
};
const std::vector<GptRung>& gpt_ladder();
models::GptConfig gpt_rung_config(const GptRung& rung, int64_t vocab, int64_t context);
struct LargestGpt {
  StrategyOptions strategy;
  int rung = -1;          // the largest rung that fits; -1: none
  Prediction prediction;  // of that rung (of the smallest when none fits)
  int64_t params = 0;
};
// Per strategy, the largest rung whose peak fits the GPU's memory on `gpus` GPUs, priced
// analytically (gpt_profile) at `batch` sequences of `seq` tokens per GPU.
std::vector<LargestGpt> largest_gpt(const std::vector<StrategyOptions>& strategies, int64_t batch,
                                    int64_t seq, int64_t vocab, int gpus, const Cluster& cluster,
                                    const ReplayOptions& options);

}  // namespace dpe::sim
