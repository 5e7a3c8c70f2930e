#include "engine/parallel/parallel_apply.h"

#include <exception>
#include <future>

#include "engine/autograd/grad_mode.h"
#include "engine/core/error.h"
#include "engine/device/runtime.h"

namespace dpe {

std::vector<Value> parallel_apply(const std::vector<std::shared_ptr<Module>>& replicas,
                                  const std::vector<Value>& inputs,
                                  const std::vector<Device>& devices, StepProfiler* profiler) {
  DPE_CHECK(replicas.size() == inputs.size() && inputs.size() == devices.size(),
            "parallel_apply: " << replicas.size() << " replicas, " << inputs.size()
                               << " inputs and " << devices.size() << " devices");
  const bool grad_mode = grad_enabled();
  std::vector<Value> results(replicas.size());
  std::vector<std::future<void>> futures;
  for (size_t i = 0; i < replicas.size(); ++i) {
    futures.push_back(Runtime::get().context(devices[i]).worker().submit(
        [&, i, grad_mode] {
          GradModeGuard mode(grad_mode);
          StepProfiler::Scope scope(profiler, devices[i], Phase::kForward);
          results[i] = replicas[i]->forward_value(inputs[i]);
        }));
  }
  // Wait for every worker before reporting, so no task outlives the call.
  std::string error;
  for (size_t i = 0; i < futures.size(); ++i) {
    try {
      futures[i].get();
    } catch (const std::exception& e) {
      if (error.empty()) {
        error = "Caught an error in replica " + std::to_string(i) + " on device " +
                devices[i].str() + ".\nOriginal message: " + e.what();
      }
    }
  }
  DPE_CHECK(error.empty(), error);
  return results;
}

}  // namespace dpe
