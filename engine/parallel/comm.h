// comm: the multi-device copies DataParallel is made of (PyTorch's torch.cuda.comm):
// broadcast_coalesced packs many tensors into one buffer per destination; reduce_add_coalesced
// sums per-device tensors onto one device. Neither records autograd; replicate.cc and the ops
// wrap them.
//
// Threading contract: callable from any thread; touches only the tensors given.
#pragma once

#include <vector>

#include "engine/device/device.h"
#include "engine/tensor/tensor.h"

namespace dpe::comm {

// out[k][i] is tensors[i] on devices[k]. On the tensors' own device the result aliases the input
// (a new handle on the same storage); elsewhere each device receives one packed copy.
std::vector<std::vector<Tensor>> broadcast_coalesced(const std::vector<Tensor>& tensors,
                                                     const std::vector<Device>& devices);

// per_device[k][i] lives on device k (undefined: contributes zero). Returns, for each i, the sum
// over k on `destination` (undefined when no device contributed). One packed copy per device.
std::vector<Tensor> reduce_add_coalesced(const std::vector<std::vector<Tensor>>& per_device,
                                         const std::vector<Shape>& shapes, Device destination);

}  // namespace dpe::comm
