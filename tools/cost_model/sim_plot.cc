#include "tools/cost_model/sim_plot.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "engine/core/error.h"
#include "tools/common/output_file.h"

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
                   const std::vector<PlotRow>& rows) {
  DPE_CHECK(!rows.empty(), "write_sim_svg: no predictions");
  std::ostringstream o;
  const double W = 900, H = 360;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H << "'>\n"
    << "<rect width='100%' height='100%' fill='white'/>\n";
  text(o, W / 2, 20, title, "middle", 14);

  // Left: throughput against one GPU.
  const double x0 = 60, y0 = 300, pw = 340, ph = 240;
  double max_x = 1, max_y = 1;
  for (const PlotRow& r : rows) {
    max_x = std::max(max_x, static_cast<double>(r.ddp.gpus));
    max_y = std::max(max_y, r.ddp_speedup);
    if (r.dp.possible) max_y = std::max(max_y, r.dp_speedup);
  }
  auto px = [&](double g) { return x0 + pw * g / max_x; };
  auto py = [&](double s) { return y0 - ph * s / max_y; };
  o << "<line x1='" << x0 << "' y1='" << y0 << "' x2='" << x0 + pw << "' y2='" << y0
    << "' stroke='black'/>\n<line x1='" << x0 << "' y1='" << y0 << "' x2='" << x0 << "' y2='"
    << y0 - ph << "' stroke='black'/>\n";
  text(o, x0 + pw / 2, y0 + 35, "GPUs");
  text(o, x0 - 40, y0 - ph - 10, "throughput vs 1 GPU without DP/DDP", "start");
  for (const PlotRow& r : rows) text(o, px(r.ddp.gpus), y0 + 15, std::to_string(r.ddp.gpus));
  for (int k = 0; k <= 4; ++k) text(o, x0 - 8, py(max_y * k / 4) + 4, num(max_y * k / 4), "end");
  auto line = [&](bool dp, const char* color, const char* name, double ly) {
    std::string pts;
    for (const PlotRow& r : rows) {
      const Prediction& p = dp ? r.dp : r.ddp;
      if (!p.possible) continue;
      pts += num(px(p.gpus)) + "," + num(py(dp ? r.dp_speedup : r.ddp_speedup)) + " ";
    }
    o << "<polyline fill='none' stroke='" << color << "' stroke-width='2' points='" << pts
      << "'/>\n";
    o << "<line x1='" << x0 + 10 << "' y1='" << ly << "' x2='" << x0 + 30 << "' y2='" << ly
      << "' stroke='" << color << "' stroke-width='2'/>\n";
    text(o, x0 + 35, ly + 4, name, "start");
  };
  line(true, "#d62728", "DataParallel", y0 - ph + 10);
  line(false, "#1f77b4", "DDP", y0 - ph + 25);

  // Right: per-GPU peak memory at the largest count DataParallel can run, else DDP's largest.
  const PlotRow* shown = &rows.back();
  bool with_dp = false;
  for (const PlotRow& r : rows) {
    if (r.dp.possible) {
      shown = &r;
      with_dp = true;
    }
  }
  const std::vector<double>& ddp_peaks = shown->ddp.peak_gib;
  double max_m = 0;
  for (double g : ddp_peaks) max_m = std::max(max_m, g);
  if (with_dp) {
    for (double g : shown->dp.peak_gib) max_m = std::max(max_m, g);
  }
  const double bx0 = 500, bw = 360;
  const size_t n = ddp_peaks.size();
  const double slot = bw / static_cast<double>(n);
  text(o, bx0, y0 - ph - 10,
       "peak memory per GPU at " + std::to_string(shown->ddp.gpus) + " GPUs (GiB): " +
           (with_dp ? "DP red, DDP blue" : "DDP (DataParallel cannot span nodes)"),
       "start");
  o << "<line x1='" << bx0 << "' y1='" << y0 << "' x2='" << bx0 + bw << "' y2='" << y0
    << "' stroke='black'/>\n";
  const bool labels = n <= 32;  // past that the bars are too thin to name
  for (size_t k = 0; k < n; ++k) {
    const double x = bx0 + slot * static_cast<double>(k);
    const double hddp = max_m > 0 ? ph * ddp_peaks[k] / max_m : 0;
    if (with_dp) {
      const double hdp = max_m > 0 ? ph * shown->dp.peak_gib[k] / max_m : 0;
      o << "<rect x='" << num(x + 2) << "' y='" << num(y0 - hdp) << "' width='"
        << num(std::max(slot / 2 - 3, 0.5)) << "' height='" << num(hdp) << "' fill='#d62728'/>\n";
      if (labels) text(o, x + slot / 4, y0 - hdp - 3, num(shown->dp.peak_gib[k]), "middle", 9);
    }
    const double bx = with_dp ? x + slot / 2 : x + 1;
    const double bwidth = with_dp ? slot / 2 - 3 : slot - 2;
    o << "<rect x='" << num(bx) << "' y='" << num(y0 - hddp) << "' width='"
      << num(std::max(bwidth, 0.5)) << "' height='" << num(hddp) << "' fill='#1f77b4'/>\n";
    if (labels) text(o, x + slot / 2, y0 + 15, "GPU" + std::to_string(k));
  }
  o << "</svg>\n";
  tools::write_file_atomically(path, o.str());
}

}  // namespace dpe::sim
