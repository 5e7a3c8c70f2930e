#include "engine/parallel/imbalance_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/device/memory_stats.h"

namespace dpe {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

template <typename F>
double median_of(const std::vector<StepStats>& steps, size_t device, F field) {
  std::vector<double> v;
  for (const StepStats& s : steps) v.push_back(static_cast<double>(field(s.devices.at(device))));
  return median(v);
}

}  // namespace

ImbalanceReport ImbalanceReport::from_steps(const std::vector<StepStats>& steps) {
  DPE_CHECK(!steps.empty(), "ImbalanceReport: no steps were profiled");
  ImbalanceReport r;
  r.steps = static_cast<int>(steps.size());
  std::vector<double> walls;
  for (const StepStats& s : steps) walls.push_back(static_cast<double>(s.wall_ns) / 1e6);
  r.step_ms = median(walls);
  const size_t n = steps[0].devices.size();
  for (size_t d = 0; d < n; ++d) {
    DeviceSummary s;
    s.device = steps[0].devices[d].device;
    s.peak_bytes = median_of(steps, d, [](auto& x) { return x.peak_bytes; });
    s.held_bytes = median_of(steps, d, [](auto& x) { return x.held_bytes; });
    s.peak_model_state_bytes =
        median_of(steps, d, [](auto& x) { return x.peak_model_state_bytes; });
    s.sent_bytes = median_of(steps, d, [](auto& x) { return x.sent_bytes; });
    s.received_bytes = median_of(steps, d, [](auto& x) { return x.received_bytes; });
    for (int p = 0; p < kNumPhases; ++p) {
      s.busy_ms[p] = median_of(steps, d, [p](auto& x) { return x.busy_ns[p]; }) / 1e6;
    }
    s.busy_total_ms = median_of(steps, d, [](auto& x) { return x.busy_total_ns; }) / 1e6;
    s.idle_ms = median_of(steps, d, [](auto& x) { return x.idle_ns; }) / 1e6;
    std::vector<size_t> order(steps.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return steps[a].devices.at(d).peak_bytes < steps[b].devices.at(d).peak_bytes;
    });
    const auto& at_median = steps[order[order.size() / 2]].devices.at(d).peak_by_category;
    for (size_t c = 0; c < kMemoryCategoryCount; ++c) {
      s.peak_by_category[c] = static_cast<double>(at_median[c]);
    }
    r.devices.push_back(s);
  }
  if (n > 1) {
    double peak = 0, busy = 0, idle = 0;
    for (size_t d = 1; d < n; ++d) {
      peak += r.devices[d].peak_bytes;
      busy += r.devices[d].busy_total_ms;
      idle += r.devices[d].idle_ms;
    }
    peak /= static_cast<double>(n - 1);
    busy /= static_cast<double>(n - 1);
    idle /= static_cast<double>(n - 1);
    r.extra_peak_bytes = r.devices[0].peak_bytes - peak;
    for (size_t c = 0; c < kMemoryCategoryCount; ++c) {
      double others = 0;
      for (size_t d = 1; d < n; ++d) others += r.devices[d].peak_by_category[c];
      r.extra_peak_by_category[c] =
          r.devices[0].peak_by_category[c] - others / static_cast<double>(n - 1);
    }
    r.extra_peak_ratio = peak > 0 ? r.devices[0].peak_bytes / peak : 0;
    r.extra_busy_ms = r.devices[0].busy_total_ms - busy;
    r.others_wait_share = r.step_ms > 0 ? idle / r.step_ms : 0;
    r.memory_warning = r.extra_peak_ratio > 1.25;
  }
  return r;
}

std::string ImbalanceReport::table() const {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-8s %11s %11s %10s %10s", "device", "peak", "held", "sent",
                "received");
  out += line;
  for (int p = 0; p < kNumPhases; ++p) {
    std::snprintf(line, sizeof line, " %10s", phase_name(static_cast<Phase>(p)));
    out += line;
  }
  out += "     busy     idle  (ms, medians over " + std::to_string(steps) + " steps)\n";
  for (const DeviceSummary& d : devices) {
    std::snprintf(line, sizeof line, "%-8s %11s %11s %10s %10s", d.device.str().c_str(),
                  format_bytes(static_cast<int64_t>(d.peak_bytes)).c_str(),
                  format_bytes(static_cast<int64_t>(d.held_bytes)).c_str(),
                  format_bytes(static_cast<int64_t>(d.sent_bytes)).c_str(),
                  format_bytes(static_cast<int64_t>(d.received_bytes)).c_str());
    out += line;
    for (int p = 0; p < kNumPhases; ++p) {
      std::snprintf(line, sizeof line, " %10.2f", d.busy_ms[p]);
      out += line;
    }
    std::snprintf(line, sizeof line, " %8.2f %8.2f\n", d.busy_total_ms, d.idle_ms);
    out += line;
  }
  std::snprintf(line, sizeof line, "step: %.2f ms (median)\n", step_ms);
  out += line;
  if (devices.size() > 1) {
    std::snprintf(line, sizeof line,
                  "device 0 vs mean of the others: peak memory %+.2f MiB (x%.2f), busy time "
                  "%+.2f ms per step\nthe other devices wait (idle) %.0f%% of each step\n",
                  extra_peak_bytes / (1 << 20), extra_peak_ratio, extra_busy_ms,
                  100.0 * others_wait_share);
    out += line;
  }
  const std::string w = warning();
  if (!w.empty()) out += w + "\n";
  return out;
}

std::string ImbalanceReport::memory_breakdown() const {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-26s", "memory at the peak");
  out += line;
  for (const DeviceSummary& d : devices) {
    std::snprintf(line, sizeof line, " %11s", d.device.str().c_str());
    out += line;
  }
  if (devices.size() > 1) out += "  device 0 extra";
  out += "\n";
  for (size_t c = 0; c < kMemoryCategoryCount; ++c) {
    bool any = false;
    for (const DeviceSummary& d : devices) any = any || d.peak_by_category[c] != 0;
    if (!any) continue;
    std::snprintf(line, sizeof line, "%-26s", memory_category_name(static_cast<MemoryCategory>(c)));
    out += line;
    for (const DeviceSummary& d : devices) {
      std::snprintf(line, sizeof line, " %11s",
                    format_bytes(static_cast<int64_t>(d.peak_by_category[c])).c_str());
      out += line;
    }
    if (devices.size() > 1) {
      const double extra = extra_peak_by_category[c];
      std::snprintf(line, sizeof line, "  %s%s", extra < 0 ? "-" : "+",
                    format_bytes(static_cast<int64_t>(std::abs(extra))).c_str());
      out += line;
    }
    out += "\n";
  }
  return out;
}

std::string ImbalanceReport::warning() const {
  if (!memory_warning) return "";
  char line[256];
  std::snprintf(line, sizeof line,
                "WARNING: device 0's peak memory is %.0f%% above the others' mean (threshold "
                "25%%): it holds the gathered outputs, the loss and every reduced gradient",
                100.0 * (extra_peak_ratio - 1.0));
  return line;
}

std::string ImbalanceReport::to_json() const {
  nlohmann::json j;
  j["steps"] = steps;
  j["step_ms"] = step_ms;
  for (const DeviceSummary& d : devices) {
    nlohmann::json dj;
    dj["device"] = d.device.str();
    dj["peak_bytes"] = d.peak_bytes;
    dj["held_bytes"] = d.held_bytes;
    dj["peak_model_state_bytes"] = d.peak_model_state_bytes;
    dj["sent_bytes"] = d.sent_bytes;
    dj["received_bytes"] = d.received_bytes;
    for (int p = 0; p < kNumPhases; ++p) dj["busy_ms"][phase_name(static_cast<Phase>(p))] = d.busy_ms[p];
    dj["busy_total_ms"] = d.busy_total_ms;
    dj["idle_ms"] = d.idle_ms;
    for (size_t c = 0; c < kMemoryCategoryCount; ++c) {
      dj["peak_by_category"][memory_category_name(static_cast<MemoryCategory>(c))] =
          d.peak_by_category[c];
    }
    j["devices"].push_back(dj);
  }
  j["device0_extra_peak_bytes"] = extra_peak_bytes;
  j["device0_peak_ratio"] = extra_peak_ratio;
  j["device0_extra_busy_ms"] = extra_busy_ms;
  for (size_t c = 0; c < kMemoryCategoryCount; ++c) {
    j["device0_extra_peak_by_category"][memory_category_name(static_cast<MemoryCategory>(c))] =
        extra_peak_by_category[c];
  }
  j["others_wait_share"] = others_wait_share;
  j["memory_warning"] = memory_warning;
  return j.dump(2);
}

}  // namespace dpe
