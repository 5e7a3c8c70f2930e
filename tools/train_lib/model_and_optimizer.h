// model_and_optimizer: what a train run computes with: the bare model built by name and seeded,
// the module its forward runs for the mode (the model, DataParallel, DDP or FSDP) on its devices,
// and the optimizer that steps it (SGD or AdamW, under ZeRO-1 with --zero).
//
// Threading contract: call them on the tool's main thread before training; the ranked modes'
// wrappers are collective (every rank builds its own, in the same order).
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "engine/device/device.h"
#include "engine/nn/module.h"
#include "engine/optim/optimizer.h"
#include "tools/common/train_distributed.h"
#include "tools/train_lib/train_config.h"
#include "tools/train_lib/train_data.h"

namespace dpe::tools {

// The bare model, seeded by --seed, its BatchNorms synchronised across ranks with --sync-bn, its
// gpt blocks checkpointed with --activation-checkpointing. The gpt models' vocabulary comes from
// the tokenizer, hence from `data`.
std::shared_ptr<Module> build_model(const TrainConfig& c, const Data& data,
                                    const Distributed& dist);

// The device a single or ddp process computes on, where its batches go before forward (host:0, or
// cuda:0 / cuda:LOCAL_RANK); none in dp, whose scatter sends each device its chunk.
std::optional<Device> compute_device(const TrainConfig& c);

// What forward runs for the mode: `model` itself (single), DataParallel over --devices, DDP, or
// FSDP (each gpt block a unit); the model is on its compute device (dp: device_ids[0]) first.
std::shared_ptr<Module> wrap_for_mode(const TrainConfig& c, std::shared_ptr<Module> model,
                                      const Distributed& dist);

// The run's optimizer over `params` at learning rate `lr`: SGD (with --momentum) or AdamW, both
// with --weight-decay. --zero: each rank steps its shard with the plain optimizer, which the
// ZeroRedundancyOptimizer wrapper builds.
std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& c, std::vector<Tensor> params,
                                                 float lr, const Distributed& dist);

}  // namespace dpe::tools
