// state_io: how a run's model and optimizer state goes into and out of checkpoints, whatever
// wraps the model (DataParallel, DDP, FSDP), for train's checkpoint writer and reader.
//
// Threading contract: the functions run on the training thread; under fsdp (collective) every
// rank calls model_state and optimizer_state together.
#pragma once

#include <functional>

#include "engine/io/safetensors.h"
#include "engine/nn/module.h"
#include "engine/optim/grad_scaler.h"
#include "engine/optim/optimizer.h"

namespace dpe::tools {

// How a run's state goes into and out of checkpoints: the bare model's and the optimizer's state
// dicts, or under fsdp the full ones that FSDP's collectives assemble from every rank's shards
// (the files are then those of the unwrapped model).
struct StateIo {
  bool collective = false;  // every rank calls model_state and optimizer_state
  std::function<StateDict()> model_state, optimizer_state;
  std::function<void(const StateDict&)> load_model, load_optimizer;
};

// The StateIo of a run whose bare model is `model`, whose forward runs `net` (the model,
// DataParallel, DDP or FullyShardedDataParallel) and whose optimizer is `opt`; it refers to all
// three, which must outlive it.
StateIo state_io(Module& model, Module& net, optim::Optimizer& opt);

// The prefix of a GradScaler's entries in a checkpoint's optimizer file ("grad_scaler.scale",
// "grad_scaler._growth_tracker", ...: PyTorch's keys, as torch.save({"scaler": ...}) keeps them).
inline constexpr const char* kGradScalerPrefix = "grad_scaler.";

// `io` with `scaler`'s state saved beside the optimizer's, and read back from a checkpoint that
// has it (one without, an fp32 or bf16 run's, leaves the scaler fresh). scaler outlives the result.
StateIo with_grad_scaler(StateIo io, optim::GradScaler& scaler);

}  // namespace dpe::tools
