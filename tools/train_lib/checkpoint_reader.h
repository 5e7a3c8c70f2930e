// checkpoint_reader: resume, which loads the checkpoint in train's --checkpoint-dir into a run,
// the set named by its manifest or the older single file (design note "checkpoint set" in
// trainer.h). Every value is checked before it is used; what is missing, corrupt or does not fit
// the command line is a DataError naming the file (and the key).
//
// Threading contract: called by every process of a run on its training thread, after the main
// process recovered the directory (checkpoint_recovery.h); collective under fsdp (state_io.h).
#pragma once

#include <cstdint>
#include <string>

#include "tools/train_lib/state_io.h"
#include "tools/train_lib/train_config.h"

namespace dpe::tools {

// Where a checkpoint leaves the run: the epoch it holds and the optimizer steps taken up to it
// (-1: unknown, a checkpoint written before they were counted).
struct Position {
  int epoch = 0;
  int64_t global_step = -1;
};

// Whether `dir` holds a checkpoint to resume from (a manifest, or the older single file); read
// after recover_checkpoints, so every rank sees what rank 0 left.
bool has_checkpoint(const std::string& dir);

// Loads the checkpoint in c.checkpoint_dir into the run through `io`; returns where it leaves the
// run and sets `*from` to the file it was found by. `language_model`: the run trains a gpt model,
// whose checkpoint records its --context.
Position resume(const TrainConfig& c, bool language_model, const StateIo& io, std::string* from);

}  // namespace dpe::tools
