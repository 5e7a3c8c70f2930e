// metrics_log: metrics.jsonl in train's checkpoint directory, a JSON line per epoch (design note
// "checkpoint set" in trainer.h): appended and fsynced before the epoch's checkpoint commits, and
// trimmed on resume to the epochs a checkpoint holds.
//
// Threading contract: free functions without shared state; one process (rank 0) writes the log.
#pragma once

#include <cstdio>
#include <string>

#include "tools/train_lib/epoch_metrics.h"
#include "tools/train_lib/train_config.h"

namespace dpe::tools {

// Appends the JSON line of `m` (a run of `world` processes configured by `c`) to `path` and
// fsyncs it. It is appended before the epoch's manifest is renamed into place, so a checkpoint
// never exists without its line; a line whose checkpoint never came (a kill between the two) is
// dropped on resume by trim_metrics. Throws dpe::Error naming the file.
void append_metrics(const std::string& path, const TrainConfig& c, const EpochMetrics& m,
                    int world);

// Keeps the lines of `path` up to `last_epoch` (the checkpoint's; -1: none) and drops the rest:
// lines of epochs whose checkpoint was never written, and torn lines. Rewritten atomically; says
// on `out` how many lines went. A missing file is left as it is.
void trim_metrics(const std::string& path, int last_epoch, FILE* out);

}  // namespace dpe::tools
