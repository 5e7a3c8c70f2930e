#include "engine/parallel/parallel_apply.h"

#include <exception>
#include <future>

#include "engine/autograd/autocast.h"
#include "engine/autograd/grad_mode.h"
#include "engine/core/error.h"
#include "engine/device/runtime.h"
#include "engine/device/worker.h"

namespace dpe {

std::vector<std::string> run_on_workers(const char* what, const std::vector<Device>& devices,
                                        const std::function<void(size_t)>& fn) {
  // A worker that waited for a task queued behind itself would never return.
  for (Device d : devices) {
    DPE_CHECK(!Runtime::get().context(d).worker().on_worker_thread(),
              what << ": called from the worker of " << d
                   << ", which must run a replica; call DataParallel from a thread that is not a "
                      "device worker");
  }
  const bool grad_mode = grad_enabled();
  // The caller's autocast state, dtype included (PyTorch's parallel_apply carries only the
  // enabled flag, so a replica under autocast(dtype=float16) on CPU ran in bfloat16).
  const AutocastSnapshot amp = autocast_snapshot();
  // Errors travel as text: the exception object itself never crosses threads.
  std::vector<std::string> errors(devices.size());
  auto task = [&, grad_mode](size_t k) {
    try {
      GradModeGuard mode(grad_mode);
      const AutocastScope amp_scope(amp);
      fn(k);
    } catch (const std::exception& e) {
      errors[k] = e.what();
    } catch (...) {
      errors[k] = "an exception that is not a std::exception";
    }
  };
  // The other devices' shares go to their workers first; this thread, which would only wait, runs
  // the first device's share itself while its worker is idle (Worker, "hand-offs").
  std::vector<std::future<void>> futures(devices.size());
  for (size_t k = 1; k < devices.size(); ++k) {
    futures[k] = Runtime::get().context(devices[k]).worker().submit([&task, k] { task(k); });
  }
  if (!devices.empty()) {
    Worker& first = Runtime::get().context(devices[0]).worker();
    bool ran = true;
    try {  // task(0) catches its own errors; this catches the device's (its guard) ones
      ran = first.try_run_here([&task] { task(0); });
    } catch (const std::exception& e) {
      errors[0] = e.what();
    }
    if (!ran) futures[0] = first.submit([&task] { task(0); });
  }
  // Wait for every worker before reporting, so no task outlives the call.
  for (size_t k = 0; k < devices.size(); ++k) {
    if (futures[k].valid()) Runtime::get().context(devices[k]).worker().wait(futures[k]);
  }
  return errors;
}

std::vector<Value> parallel_apply(const std::vector<std::shared_ptr<Module>>& replicas,
                                  const std::vector<Value>& inputs,
                                  const std::vector<Device>& devices, StepProfiler* profiler) {
  DPE_CHECK(replicas.size() == inputs.size() && inputs.size() == devices.size(),
            "parallel_apply: " << replicas.size() << " replicas, " << inputs.size()
                               << " inputs and " << devices.size() << " devices");
  std::vector<Value> results(replicas.size());
  const auto errors = run_on_workers("parallel_apply", devices, [&](size_t i) {
    StepProfiler::Scope scope(profiler, devices[i], Phase::kForward);
    results[i] = replicas[i]->forward_value(inputs[i]);
  });
  for (size_t i = 0; i < errors.size(); ++i) {
    DPE_CHECK(errors[i].empty(), "Caught an error in replica " << i << " on device " << devices[i]
                                                               << ".\nOriginal message: "
                                                               << errors[i]);
  }
  return results;
}

}  // namespace dpe
