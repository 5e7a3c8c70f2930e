// comm: the raw multi-device data movement DataParallel is made of (PyTorch's torch.cuda.comm):
// scatter and gather split and join one tensor across devices; broadcast_coalesced and
// reduce_add_coalesced move many tensors at once, packed into one buffer per device and dtype.
// Nothing here records autograd: functions.h wraps each of these in an autograd node.
//
// Threading contract: callable from any thread; touches only the tensors given (copies run on the
// calling thread under each destination device's guard, as Tensor::to does).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/device/device.h"
#include "engine/tensor/tensor.h"

namespace dpe::comm {

// The shape and dtype of one slot of a coalesced call: known even where a device has no tensor
// for that slot (an undefined gradient).
struct TensorSpec {
  Shape shape;
  DType dtype = DType::kFloat32;
};
std::vector<TensorSpec> specs_of(const std::vector<Tensor>& tensors);

// Splits x along dim into sizes[k] slices, slice k contiguous on devices[k] (the slice itself,
// no copy, when it is already contiguous and on devices[k]).
std::vector<Tensor> scatter(const Tensor& x, const std::vector<Device>& devices,
                            const std::vector<int64_t>& sizes, int64_t dim);

// Concatenates xs (same dtype and rank, any devices) along dim into a new tensor on destination.
Tensor gather(const std::vector<Tensor>& xs, Device destination, int64_t dim);

// out[k][i] is tensors[i] on devices[k]. The tensors share one device and may mix dtypes. On
// that device the result aliases the input (a new handle on the same storage); elsewhere each
// device receives one packed copy per dtype.
std::vector<std::vector<Tensor>> broadcast_coalesced(const std::vector<Tensor>& tensors,
                                                     const std::vector<Device>& devices);

// per_device[k][i] lives on device k; slot i has specs[i] (undefined: contributes zero). Returns,
// for each i, the sum over k on `destination`; every slot is undefined when no device contributed
// a tensor. Slots are packed per device and dtype in chunks of about `buffer_bytes` (PyTorch's
// 10 MiB buffer_size; a larger slot is a chunk of its own), so the destination holds one chunk
// from one device at a time; every sum has a storage of its own. Sums are float32 only.
constexpr int64_t kReduceBufferBytes = 10 << 20;
std::vector<Tensor> reduce_add_coalesced(const std::vector<std::vector<Tensor>>& per_device,
                                         const std::vector<TensorSpec>& specs, Device destination,
                                         int64_t buffer_bytes = kReduceBufferBytes);

}  // namespace dpe::comm
