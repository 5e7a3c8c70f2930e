#include "engine/parallel/replicate.h"

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/core/error.h"
#include "engine/parallel/comm.h"

namespace dpe {

namespace {

// Broadcast as an autograd function: outputs[k * P + i] is parameter i on devices[k]; backward
// reduce-adds the P gradients of every device onto the source device.
std::vector<std::vector<Tensor>> broadcast_parameters(const std::vector<Tensor>& params,
                                                      const std::vector<Device>& devices,
                                                      StepProfiler* profiler) {
  auto per_device = comm::broadcast_coalesced(params, devices);
  std::vector<Tensor*> outputs;
  for (auto& tensors : per_device) {
    for (Tensor& t : tensors) outputs.push_back(&t);
  }
  std::vector<Shape> shapes;
  for (const Tensor& p : params) shapes.push_back(p.shape());
  const Device src = devices[0];
  const size_t num_devices = devices.size();
  record("Broadcast", params, outputs,
         [shapes, src, num_devices, profiler](const std::vector<Tensor>& grads) {
           StepProfiler::Scope scope(profiler, src, Phase::kReduceAdd);
           std::vector<std::vector<Tensor>> per_device(num_devices);
           for (size_t k = 0; k < num_devices; ++k) {
             per_device[k].assign(grads.begin() + k * shapes.size(),
                                  grads.begin() + (k + 1) * shapes.size());
           }
           return comm::reduce_add_coalesced(per_device, shapes, src);
         });
  return per_device;
}

}  // namespace

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

  std::vector<std::vector<Tensor>> param_copies;
  if (grad_enabled()) {
    param_copies = broadcast_parameters(params, devices, profiler);
  } else {
    param_copies = comm::broadcast_coalesced(params, devices);
  }
  // Buffers: float ones travel packed; int64 ones (num_batches_tracked) one by one.
  std::vector<Tensor> float_buffers;
  for (const Tensor& b : buffers) {
    if (b.dtype() == DType::kFloat32) float_buffers.push_back(b);
  }
  const auto float_copies = comm::broadcast_coalesced(float_buffers, devices);

  std::vector<std::shared_ptr<Module>> replicas;
  for (size_t k = 0; k < devices.size(); ++k) {
    std::shared_ptr<Module> r = module.clone_structure();
    for (size_t i = 0; i < named_params.size(); ++i) {
      Tensor p = param_copies[k][i];
      p.autograd().name = named_params[i].first;
      r->set_parameter(named_params[i].first, p);
    }
    size_t f = 0;
    for (size_t i = 0; i < named_buffers.size(); ++i) {
      const Tensor& b = buffers[i];
      Tensor copy;
      if (k == 0) copy = b;  // the original: updates persist
      else if (b.dtype() == DType::kFloat32) copy = float_copies[k][f];
      else copy = b.to(devices[k]);
      if (b.dtype() == DType::kFloat32) ++f;
      r->set_buffer(named_buffers[i].first, copy);
    }
    replicas.push_back(std::move(r));
  }
  return replicas;
}

}  // namespace dpe
