// --activation-checkpointing for the tools that build a model by name (train, bench): wraps each
// checkpointing unit of the model in nn::CheckpointWrapper (engine/nn/checkpoint.h). The units: the
// gpt models' transformer blocks (models::is_gpt_block); other models have none.
//
// Threading contract: called once per process on the bare model, before DataParallel or DDP wrap
// it.
#pragma once

#include <string>

#include "engine/nn/module.h"

namespace dpe::tools {

// Wraps `model`'s units; throws UsageError (exit 2) naming the model and the flag when it has none.
void apply_activation_checkpointing_flag(const std::string& model_name, Module& model);

}  // namespace dpe::tools
