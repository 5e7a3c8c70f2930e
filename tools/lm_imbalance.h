// The parameter-server imbalance where users meet it: a GPT language model trained with
// DataParallel on host devices, profiled step by step, in three forms side by side:
//   plain          PyTorch's DataParallel: logits [B, T, V] gathered on device 0, the loss and its
//                  gradient there, every gradient reduced there, AdamW's state there;
//   chunk_weights  device 0 gets a smaller share of the batch (the "balanced DataParallel" idea);
//   parallel_loss  forward_replicas + parallel_criterion: the loss on every device, only scalars
//                  gathered.
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

enum class DpVariant { kPlain, kChunkWeights, kParallelLoss };
const char* dp_variant_name(DpVariant v);

struct LmImbalanceOptions {
  models::GptConfig config;
  int64_t batch = 8;      // global batch (sequences)
  int64_t context = 64;   // tokens per sequence (<= config.block_size)
  int warmup_steps = 1;   // not reported: they pay one-time costs
  int steps = 2;          // profiled; the report takes medians
  double device0_weight = 0.5;  // chunk_weights: device 0's share relative to the others' 1
  uint64_t seed = 0;
};

struct LmImbalanceRun {
  DpVariant variant;
  std::vector<Device> devices;
  ImbalanceReport report;
  float last_loss = 0;
};

// Trains a fresh model (same seed every time) for warmup_steps + steps with AdamW.
LmImbalanceRun profile_lm_dp(const LmImbalanceOptions& options, const std::vector<Device>& devices,
                             DpVariant variant);

// One line per run: device 0's peak against the others' mean, its extra by category, and device
// 0's busy time per phase; then a one-line conclusion per device count.
std::string lm_imbalance_table(const std::vector<LmImbalanceRun>& runs);

}  // namespace dpe::tools
