// The backward engine: walks the graph from the roots and runs every node's backward.
//
// A graph on one device runs on the calling thread, in dependency order. A graph that spans
// devices runs each node on its device's worker as soon as all of its inputs are ready, so the
// replicas of a DataParallel step are differentiated concurrently. If a node throws, nodes already
// running finish, nothing new starts, and the caller gets one dpe::Error naming the node and its
// device with the original message.
//
// Threading contract: backward() may be called from any thread that is not a device worker
// (a worker waiting on its own queue would deadlock; this is checked).
#pragma once

#include <vector>

#include "engine/tensor/tensor.h"

namespace dpe {

// loss.backward(): `root` must be a scalar (PyTorch: "grad can be implicitly created only for
// scalar outputs"); its gradient is 1.
void backward(const Tensor& root);
// Backward from several roots with explicit gradients (same shapes and devices as the roots).
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads);

}  // namespace dpe
