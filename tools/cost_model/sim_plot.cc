#include "tools/cost_model/sim_plot.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "engine/core/error.h"

namespace dpe::sim {

namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4g", v);
  return buf;
}

void text(std::ostream& o, double x, double y, const std::string& s, const char* anchor = "middle",
          int size = 11) {
  o << "<text x='" << num(x) << "' y='" << num(y) << "' font-size='" << size << "' text-anchor='"
    << anchor << "' font-family='sans-serif'>" << s << "</text>\n";
}

}  // namespace

void write_sim_svg(const std::string& path, const std::string& title,
                   const std::vector<Prediction>& dp, const std::vector<Prediction>& ddp) {
  DPE_CHECK(!dp.empty() && dp.size() == ddp.size(), "write_sim_svg: no predictions");
  std::ostringstream o;
  const double W = 900, H = 360;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H << "'>\n"
    << "<rect width='100%' height='100%' fill='white'/>\n";
  text(o, W / 2, 20, title, "middle", 14);

  // Left: throughput against one GPU.
  const double x0 = 60, y0 = 300, pw = 340, ph = 240;
  double max_x = 1, max_y = 1;
  for (size_t i = 0; i < dp.size(); ++i) {
    max_x = std::max(max_x, static_cast<double>(ddp[i].gpus));
    max_y = std::max(max_y, ddp[i].gpus * ddp.front().step_ms / ddp[i].step_ms);
    if (dp[i].possible) max_y = std::max(max_y, dp[i].gpus * dp.front().step_ms / dp[i].step_ms);
  }
  auto px = [&](double g) { return x0 + pw * g / max_x; };
  auto py = [&](double s) { return y0 - ph * s / max_y; };
  o << "<line x1='" << x0 << "' y1='" << y0 << "' x2='" << x0 + pw << "' y2='" << y0
    << "' stroke='black'/>\n<line x1='" << x0 << "' y1='" << y0 << "' x2='" << x0 << "' y2='"
    << y0 - ph << "' stroke='black'/>\n";
  text(o, x0 + pw / 2, y0 + 35, "GPUs");
  text(o, x0 - 40, y0 - ph - 10, "throughput vs 1 GPU", "start");
  for (const Prediction& p : ddp) text(o, px(p.gpus), y0 + 15, std::to_string(p.gpus));
  for (int k = 0; k <= 4; ++k) text(o, x0 - 8, py(max_y * k / 4) + 4, num(max_y * k / 4), "end");
  auto line = [&](const std::vector<Prediction>& ps, const char* color, const char* name,
                  double ly) {
    std::string pts;
    for (const Prediction& p : ps) {
      if (!p.possible) continue;
      pts += num(px(p.gpus)) + "," + num(py(p.gpus * ps.front().step_ms / p.step_ms)) + " ";
    }
    o << "<polyline fill='none' stroke='" << color << "' stroke-width='2' points='" << pts
      << "'/>\n";
    o << "<line x1='" << x0 + 10 << "' y1='" << ly << "' x2='" << x0 + 30 << "' y2='" << ly
      << "' stroke='" << color << "' stroke-width='2'/>\n";
    text(o, x0 + 35, ly + 4, name, "start");
  };
  line(dp, "#d62728", "DataParallel", y0 - ph + 10);
  line(ddp, "#1f77b4", "DDP", y0 - ph + 25);

  // Right: per-GPU peak memory at the largest DataParallel count.
  const Prediction* last = nullptr;
  size_t li = 0;
  for (size_t i = 0; i < dp.size(); ++i) {
    if (dp[i].possible) {
      last = &dp[i];
      li = i;
    }
  }
  const double bx0 = 500, bw = 360;
  double max_m = 0;
  for (double g : last->peak_gib) max_m = std::max(max_m, g);
  for (double g : ddp[li].peak_gib) max_m = std::max(max_m, g);
  const size_t n = last->peak_gib.size();
  const double slot = bw / static_cast<double>(n);
  text(o, bx0, y0 - ph - 10,
       "peak memory per GPU at " + std::to_string(last->gpus) + " GPUs (GiB): DP red, DDP blue",
       "start");
  o << "<line x1='" << bx0 << "' y1='" << y0 << "' x2='" << bx0 + bw << "' y2='" << y0
    << "' stroke='black'/>\n";
  for (size_t k = 0; k < n; ++k) {
    const double hdp = ph * last->peak_gib[k] / max_m, hddp = ph * ddp[li].peak_gib[k] / max_m;
    const double x = bx0 + slot * static_cast<double>(k);
    o << "<rect x='" << num(x + 2) << "' y='" << num(y0 - hdp) << "' width='" << num(slot / 2 - 3)
      << "' height='" << num(hdp) << "' fill='#d62728'/>\n";
    o << "<rect x='" << num(x + slot / 2) << "' y='" << num(y0 - hddp) << "' width='"
      << num(slot / 2 - 3) << "' height='" << num(hddp) << "' fill='#1f77b4'/>\n";
    text(o, x + slot / 2, y0 + 15, "GPU" + std::to_string(k));
    text(o, x + slot / 4, y0 - hdp - 3, num(last->peak_gib[k]), "middle", 9);
  }
  o << "</svg>\n";
  std::ofstream f(path);
  DPE_CHECK(f.good(), "sim: cannot write " << path);
  f << o.str();
}

}  // namespace dpe::sim
