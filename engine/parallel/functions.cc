#include "engine/parallel/functions.h"

#include "engine/autograd/node.h"
#include "engine/core/error.h"

namespace dpe {

namespace {

std::vector<Tensor*> pointers_to(std::vector<Tensor>& tensors) {
  std::vector<Tensor*> out;
  for (Tensor& t : tensors) out.push_back(&t);
  return out;
}

}  // namespace

std::vector<Tensor> Scatter::apply(const Tensor& input, const std::vector<Device>& devices,
                                   const std::vector<int64_t>& sizes, int64_t dim) {
  std::vector<Tensor> pieces = comm::scatter(input, devices, sizes, dim);
  const Device home = input.device();
  const int64_t d = input.shape().normalize_dim(dim);
  const Shape shape = input.shape();
  const DType dtype = input.dtype();
  record("Scatter", {input}, pointers_to(pieces),
         [home, d, sizes, shape, dtype](const std::vector<Tensor>& grads) {
           // A slice no gradient reached (a replica whose output was unused) contributes zeros.
           std::vector<Tensor> parts(grads);
           for (size_t k = 0; k < parts.size(); ++k) {
             if (parts[k].defined()) continue;
             std::vector<int64_t> dims = shape.dims();
             dims[d] = sizes[k];
             parts[k] = Tensor::zeros(Shape(dims), dtype, home);
           }
           return std::vector<Tensor>{Gather::apply(parts, home, d)};
         });
  return pieces;
}

Tensor Gather::apply(const std::vector<Tensor>& inputs, Device destination, int64_t dim) {
  Tensor out = comm::gather(inputs, destination, dim);
  const int64_t d = inputs[0].shape().normalize_dim(dim);
  std::vector<Device> devices;
  std::vector<int64_t> sizes;
  for (const Tensor& x : inputs) {
    devices.push_back(x.device());
    sizes.push_back(x.shape()[d]);
  }
  record("Gather", inputs, {&out}, [devices, sizes, d](const std::vector<Tensor>& grads) {
    // Each slice is the gradient of a replica's outputs, on that replica's device.
    MemoryCategoryScope category(MemoryCategory::kOutputGradients);
    return Scatter::apply(grads[0], devices, sizes, d);
  });
  return out;
}

std::vector<std::vector<Tensor>> Broadcast::apply(const std::vector<Tensor>& inputs,
                                                  const std::vector<Device>& devices,
                                                  StepProfiler* profiler) {
  std::vector<std::vector<Tensor>> per_device = comm::broadcast_coalesced(inputs, devices);
  if (inputs.empty()) return per_device;
  // The node's outputs are flat: output k * P + i is input i on devices[k].
  std::vector<Tensor*> outputs;
  for (auto& tensors : per_device) {
    for (Tensor& t : tensors) outputs.push_back(&t);
  }
  const auto specs = comm::specs_of(inputs);
  const Device src = inputs[0].device();
  const size_t num_devices = devices.size();
  // Its backward sums the replicas' gradients: that memory counts as gradients, not replicas.
  MemoryCategoryScope category(MemoryCategory::kGradients);
  record("Broadcast", inputs, outputs,
         [specs, src, num_devices, profiler](const std::vector<Tensor>& grads) {
           StepProfiler::Scope scope(profiler, src, Phase::kReduceAdd);
           std::vector<std::vector<Tensor>> per_device(num_devices);
           for (size_t k = 0; k < num_devices; ++k) {
             per_device[k].assign(grads.begin() + k * specs.size(),
                                  grads.begin() + (k + 1) * specs.size());
           }
           return ReduceAddCoalesced::apply(per_device, specs, src);
         });
  return per_device;
}

std::vector<Tensor> ReduceAddCoalesced::apply(const std::vector<std::vector<Tensor>>& per_device,
                                              const std::vector<comm::TensorSpec>& specs,
                                              Device destination) {
  std::vector<Tensor> out = comm::reduce_add_coalesced(per_device, specs, destination);
  if (out.empty() || !out[0].defined()) return out;
  // Where each k's gradients go back to: the device of its tensors (any one of them, as PyTorch
  // takes inputs[k * P]); a k without tensors has no gradient edge, so any device will do.
  std::vector<Device> sources;
  std::vector<Tensor> inputs;
  for (const auto& tensors : per_device) {
    Device where = destination;
    for (const Tensor& t : tensors) {
      if (t.defined()) where = t.device();
      inputs.push_back(t);
    }
    sources.push_back(where);
  }
  record("ReduceAddCoalesced", inputs, pointers_to(out),
         [specs, sources, destination](const std::vector<Tensor>& grads) {
           // Broadcast needs a tensor per slot: a missing output gradient is zero.
           std::vector<Tensor> full(grads);
           for (size_t i = 0; i < full.size(); ++i) {
             if (!full[i].defined()) {
               full[i] = Tensor::zeros(specs[i].shape, specs[i].dtype, destination);
             }
           }
           std::vector<Tensor> flat;
           for (auto& tensors : Broadcast::apply(full, sources)) {
             for (Tensor& t : tensors) flat.push_back(std::move(t));
           }
           return flat;
         });
  return out;
}

}  // namespace dpe
