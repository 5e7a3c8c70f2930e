// ImbalanceReport: the parameter-server imbalance of a run of DataParallel steps, summarised from
// StepProfiler's per-step statistics (medians over the steps): per device, peak and held memory,
// busy time per phase, idle time and traffic; device 0's extra memory and busy time against the
// mean of the others; and the share of each step the other devices spend waiting.
//
// Threading contract: a plain value computed from finished steps (after StepProfiler::end_step);
// no locking, so one thread builds it, and reading it from several threads is safe.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "engine/parallel/step_profiler.h"

namespace dpe {

struct DeviceSummary {
  Device device;
  double peak_bytes = 0, held_bytes = 0, sent_bytes = 0, received_bytes = 0;
  double peak_model_state_bytes = 0;  // parameters + gradients + optimizer state held together
  double busy_ms[kNumPhases] = {};
  double busy_total_ms = 0, idle_ms = 0;
  // What the peak held, by MemoryCategory (from the step whose peak is the median, so the
  // categories add up to peak_bytes).
  std::array<double, kMemoryCategoryCount> peak_by_category{};
};

struct ImbalanceReport {
  int steps = 0;
  double step_ms = 0;  // median wall time of a step
  std::vector<DeviceSummary> devices;
  // Device 0 against the mean of the others (0 when there is only one device).
  double extra_peak_bytes = 0, extra_peak_ratio = 0, extra_busy_ms = 0;
  // extra_peak_bytes by MemoryCategory: what device 0 holds at its peak beyond the others' mean.
  std::array<double, kMemoryCategoryCount> extra_peak_by_category{};
  double others_wait_share = 0;  // mean idle time of the other devices / step time
  bool memory_warning = false;   // device 0's peak exceeds the others' mean by more than 25%

  static ImbalanceReport from_steps(const std::vector<StepStats>& steps);
  std::string table() const;      // aligned text, one row per device, then the summary lines
  // One row per memory category that any device held at its peak: each device's bytes, and device
  // 0's extra over the others' mean (empty with one device).
  std::string memory_breakdown() const;
  std::string to_json() const;    // the same figures as JSON
  std::string warning() const;    // empty unless memory_warning
};

}  // namespace dpe
