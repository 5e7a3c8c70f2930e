// Activation checkpointing: PyTorch's torch.utils.checkpoint.checkpoint(fn, x,
// use_reentrant=False), its checkpoint_wrapper (nn::CheckpointWrapper) and
// apply_activation_checkpointing.
//
// Design note "one node, recompute in backward": checkpoint(m, x) runs m.forward(x) under no_grad,
// so none of m's activations is kept, and records one node, CheckpointBackward, whose next edges
// are x's gradient edge and the gradient edge of every parameter of m (gradient_edge: a leaf's
// accumulator, or a DataParallel replica's broadcast). The parameters therefore stay reachable
// from the outer graph: DDP's find_unused_parameters walks next_edges, DDP's reducer hooks fire
// from the outer backward's AccumulateGrad, and gradient destinations keep working (the node
// ignores their offers, as any op may). Its backward recomputes on a shallow copy of m
// (clone_structure) whose parameters are fresh detached aliases of the same storage requiring
// grad, from x.detach() requiring grad, under grad mode; runs dpe::backward on that one-device
// sub-graph (allowed from the device's worker: engine.h); and returns the aliases' .grad as the
// node's gradients, so the outer engine accumulates into the real leaves exactly as it would
// without checkpointing. The node saves x and the parameters with their versions: an in-place
// write between forward and backward (an optimizer step) fails the backward instead of
// recomputing from the new values.
//
// Design note "same randomness, same statistics": the first run records the seeds its dropouts
// draw, the recompute replays them (engine/tensor/random.h, "seed replay"; PyTorch's
// preserve_rng_state=True), and the generators advance once per step as without checkpointing.
// The recompute runs under a RecomputeScope (recompute.h): BatchNorm2d normalises with the batch's
// statistics but does not update its running statistics a second time (PyTorch does). Not
// supported inside a checkpointed module: SyncBatchNorm (its recompute would run collectives from
// inside backward) and modules whose forward has other side effects.
//
// Design note "transparent wrapper": CheckpointWrapper holds its module as the child
// "_checkpoint_wrapped_module" (PyTorch's attribute) and returns it from wrapped(), so every name
// (named_parameters, state_dict, set_parameter, ...) is the same with or without the wrapper
// (module.h, "transparent wrappers"), and replicate/copy_to clone it with the tree.
//
// Threading contract: checkpoint() runs on the thread of the forward (a DataParallel worker for a
// replica), its node's backward on the worker of the output's device, as every node's; seed logs
// and the recompute flag are per thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "engine/nn/module.h"

namespace dpe::nn {

// y = m(x) without keeping m's activations when grad mode is on and x or a parameter of m requires
// grad; otherwise (no_grad, inference) simply m.forward(x).
Tensor checkpoint(Module& m, const Tensor& x);

// PyTorch's checkpoint_wrapper(module): forward is checkpoint(module, x).
class CheckpointWrapper : public Cloneable<CheckpointWrapper> {
 public:
  explicit CheckpointWrapper(std::shared_ptr<Module> module);
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;
  Module* wrapped() const override;
};

// PyTorch's apply_activation_checkpointing(model, check_fn=...): replaces in place every
// submodule of `root` (not root itself) for which check_fn is true by a CheckpointWrapper around
// it; does not descend into a replaced module or an existing wrapper. Returns how many it wrapped.
int apply_activation_checkpointing(Module& root, const std::function<bool(const Module&)>& check_fn);

}  // namespace dpe::nn
