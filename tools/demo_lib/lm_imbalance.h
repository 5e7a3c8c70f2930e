// The parameter-server imbalance where users meet it: a GPT language model trained with
// DataParallel on host devices, profiled step by step, in three forms side by side:
//   plain          PyTorch's DataParallel: logits [B, T, V] gathered on device 0, the loss and its
//                  gradient there, every gradient reduced there, AdamW's state there;
//   chunk_weights  device 0 gets a smaller share of the batch (the "balanced DataParallel" idea);
//   parallel_loss  forward_replicas + parallel_criterion: the loss on every device, only scalars
//                  gathered;
// and the process-per-device ways out on the same global batch, as child processes (one host
// device and one thread each): DistributedDataParallel's ranks, DDP with ZeroRedundancyOptimizer
// (ZeRO-1), FullyShardedDataParallel SHARD_GRAD_OP (ZeRO-2) and FULL_SHARD (ZeRO-3) with each
// transformer block a unit. Each row also shows the model states (parameters, gradients and
// optimizer state held together) of device 0 or rank 0 beside what the ZeRO paper's formula
// predicts for its stage.
// Tokens are random (the imbalance depends on shapes, not on text), so the demo needs no corpus.
//
// Threading contract: called by one thread that is not a device worker.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/device/device.h"
#include "engine/parallel/imbalance_report.h"
#include "models/gpt.h"

namespace dpe::tools {

enum class DpVariant { kPlain, kChunkWeights, kParallelLoss, kDdp, kDdpZero, kFsdpGradOp, kFsdpFull };
const char* dp_variant_name(DpVariant v);
// The rows that run one process per device (profile_lm_ddp), and their --lm-strategy names:
// ddp, zero, grad-op, full.
bool runs_ranks(DpVariant v);
const char* strategy_flag(DpVariant v);
DpVariant strategy_from_flag(const std::string& flag);  // throws naming an unknown one
// The ZeRO paper's model states per device for this row, in bytes (tools/cost_model/zero.h, fp32
// AdamW: parameters 4 bytes each, gradients 4, two moments 8, on `devices` devices): 16P for
// DataParallel's device 0 and DDP, 8P + 8P/N for ZeRO-1, 4P + 12P/N for ZeRO-2 (SHARD_GRAD_OP),
// 16P/N for ZeRO-3 (FULL_SHARD).
double zero_formula_bytes(DpVariant v, int64_t parameters, int devices);

struct LmImbalanceOptions {
  models::GptConfig config;
  int64_t batch = 8;     // global batch (sequences)
  int64_t context = 64;  // tokens per sequence (<= config.block_size)
  int warmup_steps = 1;  // not reported: they create the optimizer's state and oneDNN's primitives
  // Sequences per device in a warm-up step: few, since a warm-up only has to create state (memory
  // is measured from each profiled step's start, so the warm-up's size does not show).
  int64_t warmup_batch_per_device = 1;
  int steps = 2;                // profiled; the report takes medians
  double device0_weight = 0.5;  // chunk_weights: device 0's share relative to the others' 1
  uint64_t seed = 0;
  // The process-per-device rows only: every transformer block recomputed in backward
  // (nn::apply_activation_checkpointing; inside each FSDP unit).
  bool activation_checkpointing = false;
  // fp32, or bf16: the forward and the loss under autocast(bfloat16) (PyTorch's default mixed
  // precision: float32 parameters, gradients and AdamW state), on every row.
  std::string precision = "fp32";
};

struct LmImbalanceRun {
  DpVariant variant;
  std::vector<Device> devices;
  ImbalanceReport report;
  float last_loss = 0;
  int64_t parameters = 0;  // the model's, for the ZeRO formula
  bool activation_checkpointing = false;
  std::string precision = "fp32";
};

// Trains a fresh model (same seed every time) for warmup_steps + steps with AdamW.
LmImbalanceRun profile_lm_dp(const LmImbalanceOptions& options, const std::vector<Device>& devices,
                             DpVariant variant);

// DDP on `world` ranks: runs `worker_argv` plus {"--lm-ddp-worker", <a temporary folder>,
// "--lm-strategy", strategy_flag(variant)} and, with options.activation_checkpointing,
// "--lm-activation-checkpointing" and "--lm-precision" <options.precision>, as the ranks (tools/common/local_ranks.h); the program must then call lm_ddp_worker with the same
// options. The run's devices are host:0..world-1, standing for the ranks' devices.
LmImbalanceRun profile_lm_ddp(const LmImbalanceOptions& options, int world,
                              std::vector<std::string> worker_argv,
                              DpVariant variant = DpVariant::kDdp);

// One rank of profile_lm_ddp (RANK, WORLD_SIZE, MASTER_* from the environment): the same model,
// optimizer and random global batch as profile_lm_dp, this rank's shard of it, each step profiled
// on its one device; writes its steps to <result_dir>/rank<R>.json.
void lm_ddp_worker(const LmImbalanceOptions& options, const std::string& result_dir,
                   DpVariant variant = DpVariant::kDdp);

// One line per run: device 0's peak against the others' mean, the step's wall time, device 0's
// model states beside the ZeRO formula, its extra by category, and its busy time per phase; then
// a one-line conclusion per device count.
std::string lm_imbalance_table(const std::vector<LmImbalanceRun>& runs);

}  // namespace dpe::tools
