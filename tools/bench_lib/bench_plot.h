// The bench's picture, as hand-written SVG: for each model, samples per second against the
// number of devices for DataParallel and DDP (one line per global batch), and a bar chart of each
// device's peak memory under DP and DDP for the largest device count.
#pragma once

#include <string>
#include <vector>

#include "tools/bench_lib/bench_runner.h"

namespace dpe::tools {

void write_bench_svg(const std::string& path, const std::vector<BenchResult>& results);

}  // namespace dpe::tools
