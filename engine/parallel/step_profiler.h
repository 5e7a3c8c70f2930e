// StepProfiler: what each device did during one training step — busy time per phase, peak and
// held memory, bytes sent and received — to measure DataParallel's parameter-server imbalance.
//
// DataParallel records replicate, scatter, forward, gather and reduce-add itself; the training
// loop wraps loss, backward and optimizer step in Scopes. Busy time of a device in a phase is the
// time its thread spent on that phase's work; idle time is the rest of the step.
//
// Threading contract: add() and Scope may be used from any thread during a step; begin_step() and
// end_step() are called by the thread that drives the step.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/device/device.h"
#include "engine/device/memory_stats.h"
#include "engine/tensor/tensor.h"

namespace dpe {

enum class Phase { kReplicate, kScatter, kForward, kGather, kLoss, kBackward, kReduceAdd, kStep };
constexpr int kNumPhases = 8;
const char* phase_name(Phase p);
// What the memory allocated in a phase holds: replicate -> replicas, scatter -> inputs, forward
// and backward -> activations, gather -> gathered outputs, loss -> loss and output gradients,
// reduce-add -> gradients, step -> optimizer state.
MemoryCategory phase_memory_category(Phase p);

struct DeviceStepStats {
  Device device;
  std::array<int64_t, kNumPhases> busy_ns{};  // per phase
  int64_t busy_total_ns = 0;
  int64_t idle_ns = 0;     // step wall time minus busy time
  int64_t peak_bytes = 0;  // allocator high-water mark during the step
  MemoryStats::ByCategory peak_by_category{};  // what peak_bytes held, by MemoryCategory
  int64_t held_bytes = 0;  // allocated at the end of the step
  // The most parameters, gradients and optimizer state held together (MemoryStats).
  int64_t peak_model_state_bytes = 0;
  int64_t sent_bytes = 0;
  int64_t received_bytes = 0;
  int64_t handoffs = 0;         // tasks its worker started during the step (Worker::handoffs)
  int64_t handoff_wait_ns = 0;  // their total wait from submission to start
};

struct StepStats {
  int64_t wall_ns = 0;
  std::vector<DeviceStepStats> devices;  // in the order given to begin_step
};

class StepProfiler {
 public:
  // Starts a step on `devices`: resets their peak memory and snapshots the copy counters.
  void begin_step(const std::vector<Device>& devices);
  void add(Device device, Phase phase, int64_t ns);
  StepStats end_step();
  bool active() const { return active_; }
  // Runs loss.backward() and charges each device's share of it to Phase::kBackward: the time its
  // worker spent on backward nodes (minus the reduce-add recorded inside), or, for a graph that
  // ran inline on one device, the wall time.
  void backward(const Tensor& loss);

  // Times a scope of work of `device` in `phase` (a null profiler: no timing), and counts the memory
  // the calling thread allocates within it under phase_memory_category(phase), profiler or not.
  class Scope {
   public:
    Scope(StepProfiler* profiler, Device device, Phase phase);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    StepProfiler* profiler_;
    Device device_;
    Phase phase_;
    std::chrono::steady_clock::time_point start_;
    MemoryCategoryScope category_;
  };

 private:
  std::mutex mu_;
  bool active_ = false;
  std::vector<Device> devices_;
  std::map<Device, std::array<int64_t, kNumPhases>> busy_;
  std::map<std::pair<Device, Device>, int64_t> copies_at_start_;
  std::map<Device, std::pair<int64_t, int64_t>> handoffs_at_start_;  // (count, wait ns)
  std::chrono::steady_clock::time_point start_;
};

}  // namespace dpe
