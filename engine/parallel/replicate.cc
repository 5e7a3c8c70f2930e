#include "engine/parallel/replicate.h"

#include "engine/core/error.h"
#include "engine/parallel/comm.h"
#include "engine/parallel/functions.h"

namespace dpe {

std::vector<std::shared_ptr<Module>> replicate(const Module& module,
                                               const std::vector<Device>& devices,
                                               StepProfiler* profiler) {
  DPE_CHECK(!devices.empty(), "replicate: no devices given");
  StepProfiler::Scope scope(profiler, devices[0], Phase::kReplicate);
  const auto named_params = module.named_parameters();
  const auto named_buffers = module.named_buffers();
  std::vector<Tensor> params, buffers;
  for (const auto& [n, t] : named_params) params.push_back(t);
  for (const auto& [n, t] : named_buffers) buffers.push_back(t);

  // Parameters through Broadcast, whose backward reduce-adds the replicas' gradients onto
  // devices[0] (nothing is recorded under no_grad); buffers without autograd, all dtypes packed
  // in one call.
  const auto param_copies = Broadcast::apply(params, devices, profiler);
  const auto buffer_copies = comm::broadcast_coalesced(buffers, devices);

  std::vector<std::shared_ptr<Module>> replicas;
  for (size_t k = 0; k < devices.size(); ++k) {
    std::shared_ptr<Module> r = module.clone_structure();
    for (size_t i = 0; i < named_params.size(); ++i) {
      Tensor p = param_copies[k][i];
      p.autograd().name = named_params[i].first;
      r->set_parameter(named_params[i].first, p);
    }
    for (size_t i = 0; i < named_buffers.size(); ++i) {
      // Replica 0 holds the original buffers: its in-place updates persist.
      r->set_buffer(named_buffers[i].first, k == 0 ? buffers[i] : buffer_copies[k][i]);
    }
    replicas.push_back(std::move(r));
  }
  return replicas;
}

}  // namespace dpe
