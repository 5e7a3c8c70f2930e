#include "engine/parallel/step_profiler.h"

#include "engine/autograd/engine.h"
#include "engine/core/error.h"
#include "engine/device/runtime.h"
#include "engine/device/worker.h"

namespace dpe {

const char* phase_name(Phase p) {
  static const char* names[kNumPhases] = {"replicate", "scatter",  "forward",    "gather",
                                          "loss",      "backward", "reduce_add", "step"};
  return names[static_cast<int>(p)];
}

void StepProfiler::begin_step(const std::vector<Device>& devices) {
  std::lock_guard<std::mutex> lock(mu_);
  Runtime& rt = Runtime::get();
  devices_ = devices;
  busy_.clear();
  for (Device d : devices) {
    busy_[d] = {};
    rt.context(d).allocator().reset_peak();
    const Worker& w = rt.context(d).worker();
    handoffs_at_start_[d] = {w.handoffs(), w.handoff_wait_ns()};
  }
  copies_at_start_ = rt.copy_matrix();
  start_ = std::chrono::steady_clock::now();
  active_ = true;
}

void StepProfiler::add(Device device, Phase phase, int64_t ns) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!active_) return;
  busy_[device][static_cast<int>(phase)] += ns;
}

StepStats StepProfiler::end_step() {
  std::lock_guard<std::mutex> lock(mu_);
  DPE_CHECK(active_, "StepProfiler::end_step without begin_step");
  active_ = false;
  StepStats out;
  out.wall_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::steady_clock::now() - start_)
                    .count();
  Runtime& rt = Runtime::get();
  const CopyMatrix copies = rt.copy_matrix();
  for (Device d : devices_) {
    DeviceStepStats s;
    s.device = d;
    s.busy_ns = busy_[d];
    for (int64_t ns : s.busy_ns) s.busy_total_ns += ns;
    s.idle_ns = std::max<int64_t>(0, out.wall_ns - s.busy_total_ns);
    const MemoryStats m = rt.context(d).allocator().stats();
    s.peak_bytes = m.peak_bytes;
    s.peak_by_category = m.at_peak_by_category;
    s.held_bytes = m.current_bytes;
    s.peak_model_state_bytes = m.peak_model_state_bytes;
    const Worker& w = rt.context(d).worker();
    s.handoffs = w.handoffs() - handoffs_at_start_[d].first;
    s.handoff_wait_ns = w.handoff_wait_ns() - handoffs_at_start_[d].second;
    for (const auto& [pair, bytes] : copies) {
      auto it = copies_at_start_.find(pair);
      const int64_t delta = bytes - (it == copies_at_start_.end() ? 0 : it->second);
      if (pair.first == d) s.sent_bytes += delta;
      if (pair.second == d) s.received_bytes += delta;
    }
    out.devices.push_back(s);
  }
  return out;
}

void StepProfiler::backward(const Tensor& loss) {
  Runtime& rt = Runtime::get();
  std::vector<Device> devices;
  std::vector<int64_t> busy_before, reduce_before;
  {
    std::lock_guard<std::mutex> lock(mu_);
    devices = devices_;
    for (Device d : devices) reduce_before.push_back(busy_[d][static_cast<int>(Phase::kReduceAdd)]);
  }
  for (Device d : devices) busy_before.push_back(rt.context(d).worker().busy_ns());
  const auto start = std::chrono::steady_clock::now();
  dpe::backward(loss);
  const int64_t wall = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::steady_clock::now() - start)
                           .count();
  std::lock_guard<std::mutex> lock(mu_);
  if (!active_) return;
  int64_t total = 0;
  std::vector<int64_t> deltas;
  for (size_t i = 0; i < devices.size(); ++i) {
    const int64_t reduce = busy_[devices[i]][static_cast<int>(Phase::kReduceAdd)] - reduce_before[i];
    deltas.push_back(std::max<int64_t>(
        0, rt.context(devices[i]).worker().busy_ns() - busy_before[i] - reduce));
    total += deltas.back();
  }
  if (total == 0 && !devices.empty()) {
    busy_[loss.device()][static_cast<int>(Phase::kBackward)] += wall;
    return;
  }
  for (size_t i = 0; i < devices.size(); ++i) {
    busy_[devices[i]][static_cast<int>(Phase::kBackward)] += deltas[i];
  }
}

MemoryCategory phase_memory_category(Phase p) {
  switch (p) {
    case Phase::kReplicate: return MemoryCategory::kReplicas;
    case Phase::kScatter: return MemoryCategory::kInputs;
    case Phase::kForward: return MemoryCategory::kActivations;
    case Phase::kGather: return MemoryCategory::kOutputs;
    case Phase::kLoss: return MemoryCategory::kOutputGradients;
    case Phase::kBackward: return MemoryCategory::kActivations;
    case Phase::kReduceAdd: return MemoryCategory::kGradients;
    case Phase::kStep: return MemoryCategory::kOptimizerState;
  }
  return MemoryCategory::kOther;
}

StepProfiler::Scope::Scope(StepProfiler* profiler, Device device, Phase phase)
    : profiler_(profiler), device_(device), phase_(phase), category_(phase_memory_category(phase)) {
  if (profiler_ != nullptr) start_ = std::chrono::steady_clock::now();
}

StepProfiler::Scope::~Scope() {
  if (profiler_ == nullptr) return;
  profiler_->add(device_, phase_,
                 std::chrono::duration_cast<std::chrono::nanoseconds>(
                     std::chrono::steady_clock::now() - start_)
                     .count());
}

}  // namespace dpe
