// parallel_apply: runs each replica on its own device's worker, all at once (PyTorch's
// torch/nn/parallel/parallel_apply.py). Each worker runs under its device's guard with the
// caller's grad mode. If replicas throw, every worker still finishes; the caller then gets one
// dpe::Error naming the first replica and device that failed, with the original message.
//
// Threading contract: called by any thread that is not the worker of one of the devices given
// (that worker would wait for itself: an error, not a deadlock). Replica k runs on devices[k]'s
// worker; the call returns or throws only after every worker has finished its task.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/nn/module.h"
#include "engine/parallel/step_profiler.h"

namespace dpe {

// Runs fn(k) for every k on devices[k]'s worker, all at once, under the caller's grad mode, and
// waits for all of them. Returns each k's error text (empty when fn(k) returned). Throws, naming
// `what`, when called from one of those workers (it would wait for itself).
std::vector<std::string> run_on_workers(const char* what, const std::vector<Device>& devices,
                                        const std::function<void(size_t)>& fn);

std::vector<Value> parallel_apply(const std::vector<std::shared_ptr<Module>>& replicas,
                                  const std::vector<Value>& inputs,
                                  const std::vector<Device>& devices,
                                  StepProfiler* profiler = nullptr);

}  // namespace dpe
