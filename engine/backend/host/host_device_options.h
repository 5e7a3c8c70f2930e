// The host device type's options: how many `host:N` devices there are, their compute threads and
// memory cap, read from the environment until set_host_devices() (host_devices.h) replaces them.
//
// Host devices are the default backend. Their count comes from DPE_HOST_DEVICES (default 2);
// DPE_HOST_THREADS sets compute threads per device (default: cores / devices, at least 1);
// DPE_HOST_DEVICE_MEMORY (e.g. 512MiB, at least 1 byte; unset: no cap) caps each device. Their
// workers spin 2 ms before sleeping when the devices' threads fit the cores, else not at all;
// DPE_HOST_SPIN_US overrides (Worker, "hand-offs").
//
// Threading contract: every function may be called from any thread.
#pragma once

#include <cstdint>

namespace dpe {

struct HostDeviceOptions {
  int count = 2;
  int compute_threads = 0;     // 0: cores / count, at least 1
  int64_t capacity_bytes = 0;  // 0: unlimited
};

// The most host devices a process may have (set_host_devices, DPE_HOST_DEVICES).
constexpr int kMaxHostDevices = 1024;

// Reads DPE_HOST_DEVICES, DPE_HOST_THREADS and DPE_HOST_DEVICE_MEMORY. Throws on bad values.
HostDeviceOptions host_options_from_env();
// The options in force: the environment's until set_host_devices().
HostDeviceOptions host_device_options();
// Replaces the options; returns whether they changed. For set_host_devices, which also retires
// the contexts made with the old ones.
bool store_host_device_options(const HostDeviceOptions& options);

}  // namespace dpe
