// The sim's picture, as hand-written SVG: throughput against one GPU without DataParallel or DDP
// for both by GPU count, and each GPU's predicted peak memory at the largest count DataParallel can
// run (DDP's alone, at the largest count, when DataParallel can run none).
#pragma once

#include <string>
#include <vector>

#include "tools/cost_model/replay.h"

namespace dpe::sim {

// One requested GPU count: both predictions and their throughput against one GPU without either
// (the caller's, as DataParallel's global batch may be uneven).
struct PlotRow {
  Prediction dp, ddp;  // dp.possible may be false
  double dp_speedup = 0, ddp_speedup = 0;
};

// dpe::Error naming the path when it cannot be written, or when rows is empty.
void write_sim_svg(const std::string& path, const std::string& title,
                   const std::vector<PlotRow>& rows);

}  // namespace dpe::sim
