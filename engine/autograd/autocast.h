// Autocast: torch.autocast in C++. Within an `autocast` guard the ops of PyTorch's lists run in
// another dtype on that device type's tensors:
//   lower (to the guard's dtype): linear, matmul, bmm, conv2d;
//   float32: softmax, log_softmax, layer_norm, sum, mse_loss, nll_loss, cross_entropy;
//   promote (to the widest input dtype): cat; add, sub and mul promote as PyTorch's type
//   promotion does, autocast or not.
// Other ops run in their inputs' dtype. In-place ops are never cast. The casts of a leaf that
// requires grad (a parameter) are cached until the outermost guard closes, so that a weight used
// by several ops is converted once per forward; the cache is not used under no_grad, as PyTorch's.
// The lists are docs/mixed_precision.md's, one for every device type; the default dtype is
// bfloat16 on host devices and float16 on CUDA, as PyTorch's.
//
// Design note "carried, not inherited": the state is per thread, as PyTorch's. dpe carries it
// wherever it runs a forward on another thread for the caller: DataParallel's device workers
// (enabled flag and dtype both; PyTorch carries only the flag) and activation checkpointing's
// recompute in backward (the forward's state, whatever the backward's thread has).
//
// Threading contract: the state is thread-local; a guard restores it on the thread that made it.
#pragma once

#include <array>

#include "engine/core/dtype.h"
#include "engine/device/device.h"
#include "engine/tensor/tensor.h"

namespace dpe {

struct AutocastState {
  bool enabled = false;
  DType dtype = DType::kBFloat16;
};

// Every device type's state on this thread, and how many guards are open (the cast cache lives
// while any is).
struct AutocastSnapshot {
  std::array<AutocastState, kDeviceTypeCount> states{};
  int depth = 0;
};

// torch.get_autocast_dtype's default: bfloat16 on host devices, float16 on CUDA.
DType default_autocast_dtype(DeviceType type);

// with torch.autocast(device_type, dtype, enabled): bfloat16 or float16 only.
class autocast {
 public:
  explicit autocast(DeviceType type, bool enabled = true);
  autocast(DeviceType type, DType dtype, bool enabled = true);
  ~autocast();
  autocast(const autocast&) = delete;
  autocast& operator=(const autocast&) = delete;

 private:
  DeviceType type_;
  AutocastState previous_;
};

AutocastState autocast_state(DeviceType type);
AutocastSnapshot autocast_snapshot();

// Installs `snapshot` on this thread for a scope (a worker running the caller's forward) and
// restores the thread's own state after.
class AutocastScope {
 public:
  explicit AutocastScope(const AutocastSnapshot& snapshot);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  AutocastSnapshot previous_;
};

namespace autocast_detail {

// Whether an op on a tensor of `type` is cast now: a guard enables it, and no autocast op is
// already running on this thread (its own inner ops run as they are).
bool active(DeviceType type);

// Marks an autocast op as running on this thread for a scope.
class Running {
 public:
  Running();
  ~Running();
  Running(const Running&) = delete;
  Running& operator=(const Running&) = delete;
};

// The cast cache of this thread: a parameter's copy in `dtype`, while a guard is open.
Tensor cached_cast(const Tensor& t, DType dtype);  // undefined when not cached
void cache_cast(const Tensor& t, DType dtype, const Tensor& cast);

}  // namespace autocast_detail

}  // namespace dpe
