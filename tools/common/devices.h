// The device type a tool runs on, from its --device flag (host | cuda, PyTorch's device strings):
// host devices (the default) or CUDA devices, checked before anything runs.
//
// Threading contract: call from the tool's main thread before any work starts.
#pragma once

#include <string>
#include <vector>

#include "engine/device/device.h"

namespace dpe::tools {

// "host" or "cuda" as a DeviceType; throws UsageError for anything else.
DeviceType parse_device_type(const std::string& text);

// The first `count` devices of `type`: host:0..count-1 (the caller sets how many host devices
// there are), or cuda:0..count-1. For cuda, throws UsageError (exit 2) naming the count and why,
// when this build or machine has fewer CUDA devices than `count` (none without a GPU, or in a
// build without CUDA).
std::vector<Device> tool_devices(DeviceType type, int count);

// cuda:`index` after the same check (a DDP rank's device: its LOCAL_RANK).
Device tool_cuda_device(int index);

}  // namespace dpe::tools
