// checked_config: every flag value, flag combination and DPE_* environment value of a train run
// checked before any work, as one UsageError naming the flag or variable (exit 2).
//
// Threading contract: reads the environment and the checkpoint directory; call it from the
// tool's main thread before the run starts.
#pragma once

#include "tools/train_lib/train_config.h"

namespace dpe::tools {

// `config` with the model's defaults filled in (resolve_defaults), once every flag value, flag
// combination and DPE_* environment value is found usable: a UsageError otherwise, before any
// work. Among them: the ddp environment as init_process_group reads it, --device cuda on a
// machine without enough CUDA devices, a fresh run into a --checkpoint-dir that holds a run.
TrainConfig checked_config(const TrainConfig& config);

}  // namespace dpe::tools
