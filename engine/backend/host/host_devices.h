// Choosing the host devices: how many `host:N` a program has, with how many compute threads and
// what memory cap each (HostDeviceOptions, host_device_options.h, where the environment variables
// that set them by default are listed).
//
// Threading contract: call while no work runs on host devices.
#pragma once

#include "engine/backend/host/host_device_options.h"

namespace dpe {

// Makes host:0..count-1 the visible host devices. Devices created before keep their state; when
// the options change, every host context is re-created on next use (tests and tools only).
// Throws dpe::Error for a count outside [1, kMaxHostDevices] or negative threads.
void set_host_devices(const HostDeviceOptions& options);
void set_host_device_count(int count);

}  // namespace dpe
