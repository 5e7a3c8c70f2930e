// epoch_plan: which epochs a train run trains, and how many steps each, from --epochs,
// --max-steps (Hugging Face's max_steps, a total over the run) and --max-steps-per-epoch.
//
// Threading contract: a pure function; call it from any thread.
#pragma once

#include <cstdint>

#include "tools/train_lib/train_config.h"

namespace dpe::tools {

// The epochs to train, from `start`, and each one's most steps. Without --max-steps: to --epochs,
// each of at most --max-steps-per-epoch steps (0: the whole pass). With it (Hugging Face's
// max_steps, which overrides the epochs): as many epochs as the steps still to take need after
// `done`, the last one cut short.
struct Plan {
  int end_epoch = 0;            // one past the last epoch to train
  int64_t steps_per_epoch = 0;  // a whole epoch's steps (a pass, or --max-steps-per-epoch)
};

// The plan of a run whose pass over the training set takes `pass_steps` steps (its loader's
// batches), from epoch `start` with `done` optimizer steps taken before it. A --max-steps that
// needs epochs past kMaxEpochs is a UsageError.
Plan plan_epochs(const TrainConfig& c, int64_t pass_steps, int start, int64_t done);

}  // namespace dpe::tools
