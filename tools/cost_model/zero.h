// zero: the model-state memory per GPU of ZeRO's stages (Rajbhandari et al. 2020, "ZeRO: Memory
// Optimizations Toward Training Trillion Parameter Models", section 5 and figure 1): parameters,
// gradients and optimizer state of Ψ parameters on N data-parallel GPUs, each stage sharding one
// more of them. The formulas and their PyTorch names: docs/cluster_model.md ("Sharding").
//
// Threading contract: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "tools/cost_model/cluster.h"

namespace dpe::sim {

// Bytes per GPU, each part already divided by N where the stage shards it.
struct ModelStateBytes {
  double parameters = 0;
  double gradients = 0;
  double optimizer_state = 0;
  double total() const { return parameters + gradients + optimizer_state; }
};

// Bytes per parameter of each model state before sharding:
//  - fp16 (mixed precision, the paper's accounting): fp16 parameters 2, fp16 gradients 2, and
//    K bytes of optimizer state: Adam/AdamW K = 12 (fp32 master copy, momentum, variance), SGD with
//    momentum K = 8 (master copy, momentum buffer);
//  - fp32 and tf32 (fp32 storage, no master copy): parameters 4, gradients 4, Adam/AdamW 8 (two
//    moments), SGD with momentum 4.
// `optimizer`: "adam", "adamw" or "sgd" (with momentum, as dpe's); dpe::Error otherwise.
ModelStateBytes model_state_bytes_per_parameter(Precision precision, const std::string& optimizer);

// The paper's per-GPU model states for `stage`:
//   0 (DDP, no sharding):             (2 + 2 + K) Ψ
//   1 (P_os, ZeroRedundancyOptimizer): (2 + 2) Ψ + K Ψ / N
//   2 (P_os+g, FSDP SHARD_GRAD_OP):    2 Ψ + (2 + K) Ψ / N
//   3 (P_os+g+p, FSDP FULL_SHARD):     (2 + 2 + K) Ψ / N
// (the 2s are 4s in fp32). dpe::Error for a stage outside 0..3, params < 0 or world < 1.
ModelStateBytes zero_model_state_bytes(int stage, int64_t params, int world, Precision precision,
                                       const std::string& optimizer);

}  // namespace dpe::sim
