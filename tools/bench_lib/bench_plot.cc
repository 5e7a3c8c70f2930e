#include "tools/bench_lib/bench_plot.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "engine/core/error.h"
#include "tools/common/output_file.h"

namespace dpe::tools {

namespace {

constexpr int kPanelW = 320, kPanelH = 240, kMargin = 48;

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// A bar label in MiB with two decimals below 10 MiB.
std::string fmt_mib(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, v < 10 ? "%.2f" : "%.1f", v);
  return buf;
}

// dp blue, ddp/mpi red, ddp/gloo orange; shades by batch.
std::string color_for(const std::string& label, size_t batch_index) {
  static const char* dp[] = {"#1f77b4", "#6baed6", "#08519c"};
  static const char* mpi[] = {"#d62728", "#fc9272", "#a50f15"};
  static const char* gloo[] = {"#ff7f0e", "#fdae6b", "#a63603"};
  if (label == "ddp/gloo") return gloo[batch_index % 3];
  return label.rfind("ddp", 0) == 0 ? mpi[batch_index % 3] : dp[batch_index % 3];
}

// One panel: samples/s (y) against devices (x) for one model.
void throughput_panel(std::ostringstream& svg, int x0, int y0, const std::string& model,
                      const std::vector<BenchResult>& results) {
  std::set<int> devices;
  std::set<int64_t> batches;
  double ymax = 0;
  for (const auto& r : results) {
    if (r.config.model != model) continue;
    devices.insert(r.config.devices);
    batches.insert(r.config.global_batch);
    ymax = std::max(ymax, r.samples_per_second);
  }
  if (devices.empty()) return;
  ymax *= 1.15;
  const int dmax = *devices.rbegin();
  auto px = [&](int d) {
    return x0 + kMargin + (kPanelW - kMargin - 10) * (d - 1) / std::max(1, dmax - 1);
  };
  auto py = [&](double v) {
    return y0 + kPanelH - kMargin + 0.0 - (kPanelH - kMargin - 20) * v / ymax;
  };
  svg << "<text x='" << x0 + kPanelW / 2 << "' y='" << y0 + 14
      << "' text-anchor='middle' font-weight='bold'>" << model << "</text>\n";
  svg << "<line x1='" << px(1) << "' y1='" << py(0) << "' x2='" << px(dmax) << "' y2='" << py(0)
      << "' stroke='black'/>\n";
  svg << "<line x1='" << px(1) << "' y1='" << py(0) << "' x2='" << px(1) << "' y2='" << py(ymax)
      << "' stroke='black'/>\n";
  for (int d : devices) {
    svg << "<text x='" << px(d) << "' y='" << py(0) + 16 << "' text-anchor='middle'>" << d
        << "</text>\n";
  }
  for (int t = 0; t <= 4; ++t) {
    const double v = ymax * t / 4;
    svg << "<text x='" << px(1) - 4 << "' y='" << py(v) + 4 << "' text-anchor='end' font-size='10'>"
        << static_cast<long long>(v) << "</text>\n";
  }
  svg << "<text x='" << x0 + kPanelW / 2 + 10 << "' y='" << y0 + kPanelH - 8
      << "' text-anchor='middle' font-size='11'>devices</text>\n";
  std::set<std::string> labels;
  for (const auto& r : results) {
    if (r.config.model == model && r.config.mode != "single") labels.insert(mode_label(r.config));
  }
  size_t bi = 0;
  for (int64_t b : batches) {
    for (const std::string& mode : labels) {
      std::vector<std::pair<int, double>> pts;
      for (const auto& r : results) {
        if (r.config.model != model || r.config.global_batch != b) continue;
        if (mode_label(r.config) == mode || (r.config.mode == "single")) {
          pts.emplace_back(r.config.devices, r.samples_per_second);
        }
      }
      std::sort(pts.begin(), pts.end());
      if (pts.size() < 2) continue;
      svg << "<polyline fill='none' stroke-width='2' stroke='" << color_for(mode, bi) << "'"
          << (mode != "dp" ? " stroke-dasharray='6,3'" : "") << " points='";
      for (auto& [d, v] : pts) svg << px(d) << "," << fmt(py(v)) << " ";
      svg << "'/>\n";
      const auto& last = pts.back();
      svg << "<text x='" << px(last.first) - 4 << "' y='" << fmt(py(last.second) - 6)
          << "' text-anchor='end' font-size='10' fill='" << color_for(mode, bi) << "'>" << mode
          << " b" << b << "</text>\n";
    }
    ++bi;
  }
}

void memory_panel(std::ostringstream& svg, int x0, int y0,
                  const std::vector<BenchResult>& results) {
  // The DataParallel configuration whose device 0 holds the most extra memory (its peak minus
  // the mean of the others), beside DDP on the same model, batch and device count.
  const BenchResult* dp = nullptr;
  const BenchResult* ddp = nullptr;
  double worst = 0;
  for (const auto& r : results) {
    if (r.config.mode != "dp" || r.devices.size() < 2) continue;
    double others = 0;
    for (size_t i = 1; i < r.devices.size(); ++i) others += r.devices[i].peak_bytes;
    others /= static_cast<double>(r.devices.size() - 1);
    const double extra = r.devices[0].peak_bytes - others;
    if (!dp || extra > worst) {
      dp = &r;
      worst = extra;
    }
  }
  if (!dp) return;
  for (const auto& r : results) {
    if (r.config.mode == "ddp" && r.config.model == dp->config.model &&
        r.config.devices == dp->config.devices &&
        r.config.global_batch == dp->config.global_batch) {
      ddp = &r;
    }
  }
  double ymax = 0;
  for (const auto* r : {dp, ddp}) {
    if (!r) continue;
    for (const auto& d : r->devices) ymax = std::max(ymax, d.peak_bytes);
  }
  ymax = ymax * 1.15 / (1 << 20);
  const int n = static_cast<int>(dp->devices.size());
  const int w = kPanelW * 2 - kMargin - 20;
  const int group = w / std::max(1, n);
  auto py = [&](double mib) {
    return y0 + kPanelH - kMargin - (kPanelH - kMargin - 24) * mib / ymax;
  };
  svg << "<text x='" << x0 + kPanelW << "' y='" << y0 + 14
      << "' text-anchor='middle' font-weight='bold'>peak memory per device (MiB): "
      << dp->config.model << ", batch " << dp->config.global_batch << ", " << n
      << " devices — DP (blue) vs DDP (red)</text>\n";
  svg << "<line x1='" << x0 + kMargin << "' y1='" << py(0) << "' x2='" << x0 + kMargin + w
      << "' y2='" << py(0) << "' stroke='black'/>\n";
  for (int i = 0; i < n; ++i) {
    const int gx = x0 + kMargin + i * group + 8;
    const double a = dp->devices[i].peak_bytes / (1 << 20);
    svg << "<rect x='" << gx << "' y='" << fmt(py(a)) << "' width='" << group / 3 << "' height='"
        << fmt(py(0) - py(a)) << "' fill='#1f77b4'/>\n";
    svg << "<text x='" << gx + group / 6 << "' y='" << fmt(py(a) - 3)
        << "' text-anchor='middle' font-size='10'>" << fmt_mib(a) << "</text>\n";
    if (ddp && i < static_cast<int>(ddp->devices.size())) {
      const double b = ddp->devices[i].peak_bytes / (1 << 20);
      svg << "<rect x='" << gx + group / 3 + 4 << "' y='" << fmt(py(b)) << "' width='" << group / 3
          << "' height='" << fmt(py(0) - py(b)) << "' fill='#d62728'/>\n";
      svg << "<text x='" << gx + group / 2 + 4 << "' y='" << fmt(py(b) - 3)
          << "' text-anchor='middle' font-size='10'>" << fmt_mib(b) << "</text>\n";
    }
    svg << "<text x='" << gx + group / 3 << "' y='" << py(0) + 16
        << "' text-anchor='middle' font-size='11'>device " << i << "</text>\n";
  }
}

}  // namespace

void write_bench_svg(const std::string& path, const std::vector<BenchResult>& results) {
  std::vector<std::string> models;
  for (const auto& r : results) {
    if (std::find(models.begin(), models.end(), r.config.model) == models.end()) {
      models.push_back(r.config.model);
    }
  }
  const int width = std::max<int>(2, static_cast<int>(models.size())) * kPanelW + 20;
  const int height = 2 * kPanelH + 60;
  std::ostringstream svg;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='" << height
      << "' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' "
         "fill='white'/>\n";
  svg << "<text x='10' y='18' font-size='14'>samples/s against devices: DataParallel (solid) "
         "and DDP (dashed), one thread per device</text>\n";
  for (size_t i = 0; i < models.size(); ++i) {
    throughput_panel(svg, 10 + static_cast<int>(i) * kPanelW, 24, models[i], results);
  }
  memory_panel(svg, 10, 24 + kPanelH + 20, results);
  svg << "</svg>\n";
  write_file_atomically(path, svg.str());
}

}  // namespace dpe::tools
