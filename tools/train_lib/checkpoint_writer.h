// checkpoint_writer: writes one epoch's checkpoint set into train's checkpoint directory and
// commits it by renaming its manifest into place (design note "checkpoint set" in trainer.h).
//
// Threading contract: one caller at a time per directory (rank 0 of a run).
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/io/safetensors.h"

namespace dpe::tools {

// Writes the set of generation `generation` in `dir` (created when missing): the three files
// staged under their .next.N names and fsynced, then `before_commit` (the metrics line), then the
// manifest renamed into place (the commit), then the staged files renamed to their names. An old
// single-file checkpoint in `dir` is superseded and removed, which `out` is told. Throws
// dpe::Error naming the file that cannot be written.
void write_checkpoint(const std::string& dir, int64_t generation, const StateDict& model_state,
                      const StateDict& optimizer_state,
                      const nlohmann::ordered_json& training_state,
                      const std::function<void()>& before_commit, FILE* out);

}  // namespace dpe::tools
