#include "tools/train_lib/epoch_plan.h"

#include <algorithm>

#include "tools/common/exit_codes.h"

namespace dpe::tools {

Plan plan_epochs(const TrainConfig& c, int64_t pass_steps, int start, int64_t done) {
  Plan p;
  p.steps_per_epoch = std::max<int64_t>(1, pass_steps);
  if (c.max_steps_per_epoch > 0)
    p.steps_per_epoch = std::min(p.steps_per_epoch, c.max_steps_per_epoch);
  if (c.max_steps == 0) {
    p.end_epoch = std::max(start, c.epochs);
    return p;
  }
  const int64_t left = std::max<int64_t>(0, c.max_steps - done);
  const int64_t epochs = (left + p.steps_per_epoch - 1) / p.steps_per_epoch;
  DPE_TOOLS_CHECK(UsageError, epochs <= kMaxEpochs - start,
                  "--max-steps " << c.max_steps << " needs " << epochs << " more epochs of "
                                 << p.steps_per_epoch << " steps after epoch " << start
                                 << ", over the limit of " << kMaxEpochs << " epochs");
  p.end_epoch = start + static_cast<int>(epochs);
  return p;
}

}  // namespace dpe::tools
