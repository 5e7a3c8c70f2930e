#include "engine/autograd/autocast.h"

#include <map>
#include <utility>

#include "engine/core/error.h"

namespace dpe {

namespace {

struct ThreadState {
  AutocastSnapshot snapshot;
  int running = 0;  // autocast ops running on this thread
  // A parameter's casts: the parameter itself is kept too, so its TensorImpl is not reused.
  std::map<std::pair<const TensorImpl*, DType>, std::pair<Tensor, Tensor>> cache;
};

ThreadState initial_state() {
  ThreadState s;
  for (int t = 0; t < kDeviceTypeCount; ++t) {
    s.snapshot.states[t].dtype = default_autocast_dtype(static_cast<DeviceType>(t));
  }
  return s;
}

ThreadState& state() {
  thread_local ThreadState s = initial_state();
  return s;
}

}  // namespace

DType default_autocast_dtype(DeviceType type) {
  return type == DeviceType::kCuda ? DType::kFloat16 : DType::kBFloat16;
}

autocast::autocast(DeviceType type, bool enabled)
    : autocast(type, default_autocast_dtype(type), enabled) {}

autocast::autocast(DeviceType type, DType dtype, bool enabled) : type_(type) {
  DPE_CHECK(dtype == DType::kBFloat16 || dtype == DType::kFloat16,
            "autocast: " << device_type_name(type) << " autocast runs in bfloat16 or float16, not "
                         << dtype_name(dtype));
  ThreadState& s = state();
  AutocastState& current = s.snapshot.states[static_cast<int>(type)];
  previous_ = current;
  current = AutocastState{enabled, dtype};
  ++s.snapshot.depth;
}

autocast::~autocast() {
  ThreadState& s = state();
  s.snapshot.states[static_cast<int>(type_)] = previous_;
  if (--s.snapshot.depth == 0) s.cache.clear();  // as PyTorch's clear_autocast_cache on exit
}

AutocastState autocast_state(DeviceType type) {
  return state().snapshot.states[static_cast<int>(type)];
}

AutocastSnapshot autocast_snapshot() { return state().snapshot; }

AutocastScope::AutocastScope(const AutocastSnapshot& snapshot) : previous_(state().snapshot) {
  state().snapshot = snapshot;
}

AutocastScope::~AutocastScope() {
  ThreadState& s = state();
  s.snapshot = previous_;
  if (s.snapshot.depth == 0) s.cache.clear();
}

namespace autocast_detail {

bool active(DeviceType type) {
  const ThreadState& s = state();
  return s.running == 0 && s.snapshot.states[static_cast<int>(type)].enabled;
}

Running::Running() { ++state().running; }
Running::~Running() { --state().running; }

Tensor cached_cast(const Tensor& t, DType dtype) {
  ThreadState& s = state();
  const auto it = s.cache.find({t.impl(), dtype});
  return it == s.cache.end() ? Tensor() : it->second.second;
}

void cache_cast(const Tensor& t, DType dtype, const Tensor& cast) {
  ThreadState& s = state();
  if (s.snapshot.depth > 0) s.cache[{t.impl(), dtype}] = {t, cast};
}

}  // namespace autocast_detail

}  // namespace dpe
