// The exit codes of dpe's command-line tools (train, bench, demo, launch) and the two errors that
// choose them. One rule everywhere (docs/flags.md, "Exit codes"):
//   0  done
//   1  the run failed (a non-finite loss, a lost rank, a rendezvous that timed out, out of memory)
//   2  usage: a bad flag or flag value, or a bad DPE_* environment value; nothing was run
//   3  data: a data or checkpoint file is missing, corrupt or does not fit the command line
// The launcher passes its first failed worker's code on, so a DDP job follows the same rule.
#pragma once

#include <exception>
#include <new>

#include "engine/core/error.h"

namespace dpe::tools {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr int kExitData = 3;

// A flag, a flag value or an environment variable that cannot be used.
class UsageError : public Error {
 public:
  using Error::Error;
};

// A data set, tokenizer cache or checkpoint that is missing, corrupt or does not fit the run.
class DataError : public Error {
 public:
  using Error::Error;
};

// Out of memory: dpe's OutOfMemoryError or std::bad_alloc. Always kExitFailure, never a data
// error, however it came (a reader's errors become DataErrors; these must not).
inline bool out_of_memory(const std::exception& e) {
  return dynamic_cast<const OutOfMemoryError*>(&e) != nullptr ||
         dynamic_cast<const std::bad_alloc*>(&e) != nullptr;
}

// The exit code for an exception that ended a tool: kExitUsage, kExitData or kExitFailure.
inline int exit_code_for(const std::exception& e) {
  if (dynamic_cast<const UsageError*>(&e) != nullptr) return kExitUsage;
  if (dynamic_cast<const DataError*>(&e) != nullptr) return kExitData;
  return kExitFailure;
}

}  // namespace dpe::tools

// Throws `type` (UsageError or DataError) with the streamed message unless `cond` holds.
#define DPE_TOOLS_CHECK(type, cond, msg)      \
  do {                                        \
    if (!(cond)) {                            \
      ::dpe::detail::MessageBuilder dpe_mb_;  \
      dpe_mb_ << msg;                         \
      throw type(dpe_mb_.str());              \
    }                                         \
  } while (0)
