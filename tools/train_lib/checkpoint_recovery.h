// checkpoint_recovery: what train's main process does to its checkpoint directory at start,
// before any process reads it (design note "checkpoint set" in trainer.h): it finishes a commit
// that a kill interrupted and removes what killed writes left.
//
// Threading contract: free functions without shared state; one process (rank 0) runs recovery
// while the others wait.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace dpe::tools {

// The names killed checkpoint writes leave, and only those: the temporaries of the manifest and of
// the old single file (name.tmp.XXXXXX), staged files (model.safetensors.next.N) and theirs.
bool left_by_a_write(const std::string& name);

// A write killed after its manifest was renamed (the commit) but before its staged files were:
// those renames are finished, so the set is the manifest's. Then what killed writes left is
// removed: names of our patterns only (left_by_a_write). Each step is said on `out`. Returns the
// generation of the next checkpoint (1 in a directory without a readable manifest). Throws
// dpe::Error naming a staged file that cannot be renamed.
int64_t recover_checkpoint_dir(const std::string& dir, FILE* out);

}  // namespace dpe::tools
