// The sim's picture, as hand-written SVG: throughput against one GPU for DataParallel and DDP by
// GPU count, and each GPU's predicted peak memory under both at the largest DataParallel count.
#pragma once

#include <string>
#include <vector>

#include "tools/cost_model/replay.h"

namespace dpe::sim {

// dp[i] and ddp[i] are the predictions for the same GPU count (dp[i].possible may be false).
void write_sim_svg(const std::string& path, const std::string& title,
                   const std::vector<Prediction>& dp, const std::vector<Prediction>& ddp);

}  // namespace dpe::sim
