// StepObserver: the hook through which a tool records what a training step does besides the
// backend's prims (those it sees through an op-table decorator, engine/backend/op_table.h): the
// copies and fills of this layer, and what the layers above announce through it (autograd's
// backward nodes, the DDP reducer's collectives). The op trace (engine/trace) is its one user.
//
// Design note "observed, not woven": the engine calls the hooks only where an observer is
// installed, and knows nothing of what it does with them; with none installed a hook point costs
// one atomic load. An observer may ask for a copy or fill to be skipped (a trace that records the
// schedule without the arithmetic): the caller then skips the work but keeps its bookkeeping.
//
// Threading contract: the hooks are called from any thread during a step; set_step_observer is
// called while no step runs, and the observer outlives its installation.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/device/device.h"

namespace dpe {

class StepObserver {
 public:
  virtual ~StepObserver() = default;
  // A copy of `bytes` from src to dst; returns whether to perform it.
  virtual bool on_copy(Device src, Device dst, int64_t bytes) = 0;
  // A fill of `bytes` on `device`; returns whether to perform it.
  virtual bool on_fill(Device device, int64_t bytes) = 0;
  // A conversion of n elements on `device` from one dtype to another; returns whether to perform
  // it.
  virtual bool on_convert(Device device, DType from, DType to, int64_t n) = 0;
  // The calling thread starts running backward node `node` (named `name`, on `device`), which
  // hands its gradients to `next`; on_node_end() when it is done.
  virtual void on_node_begin(const void* node, const std::string& name, Device device,
                             const std::vector<const void*>& next) = 0;
  virtual void on_node_end() = 0;
  // A collective `name` over `bytes` on `device` is launched (bucket `index` of DDP's reducer).
  virtual void on_collective(const char* name, Device device, int64_t index, int64_t bytes) = 0;
};

namespace detail {
extern std::atomic<StepObserver*> g_step_observer;
}  // namespace detail

// The installed observer, or null.
inline StepObserver* step_observer() {
  return detail::g_step_observer.load(std::memory_order_acquire);
}
// Installs `observer` (null: none) and returns the one it replaces.
StepObserver* set_step_observer(StepObserver* observer);

}  // namespace dpe
