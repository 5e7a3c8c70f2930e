#include "engine/nn/checkpoint.h"

#include <utility>
#include <vector>

#include "engine/autograd/engine.h"
#include "engine/autograd/autocast.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/core/error.h"
#include "engine/nn/recompute.h"
#include "engine/tensor/random.h"

namespace dpe::nn {

namespace {

// A fresh leaf viewing t's data, requiring grad as t does: what the recompute differentiates.
Tensor alias_leaf(const Tensor& t) {
  Tensor a = t.detach();
  a.requires_grad_(t.requires_grad());
  a.autograd().name = t.autograd().name;
  return a;
}

}  // namespace

Tensor checkpoint(Module& m, const Tensor& x) {
  const auto named = m.named_parameters();
  std::vector<Tensor> inputs{x};  // next edge 0: x; edge 1 + i: parameter i
  for (const auto& [n, p] : named) inputs.push_back(p);
  if (!needs_grad(inputs)) return m.forward(x);

  auto seeds = std::make_shared<std::vector<uint64_t>>();
  Tensor out;
  {
    NoGradGuard no_grad;
    SeedRecording recording(*seeds);
    out = m.forward(x);
  }
  DPE_CHECK(out.defined(), "checkpoint: " << m.repr() << ".forward returned an undefined tensor");
  // A new handle: the forward may return x itself (an identity), whose grad_fn must not change.
  out = out.detach();

  // The module as it is now (a DataParallel replica is dropped before its backward runs).
  std::shared_ptr<const Module> frozen = m.clone_structure();
  std::vector<std::string> names;
  for (const auto& [n, p] : named) names.push_back(n);
  // The recompute runs under the forward's autocast state, whatever the backward's thread has
  // (PyTorch's #71124: a recompute that ran in another dtype).
  const AutocastSnapshot amp = autocast_snapshot();
  auto backward = [frozen, names, inputs, seeds, amp](const std::vector<Tensor>& grads) {
    std::shared_ptr<Module> copy = frozen->clone_structure();
    std::vector<Tensor> leaves{alias_leaf(inputs[0])};
    for (size_t i = 0; i < names.size(); ++i) {
      leaves.push_back(alias_leaf(inputs[1 + i]));
      copy->set_parameter(names[i], leaves.back());
    }
    Tensor y;
    {
      GradModeGuard grad_on(true);  // the engine runs nodes under no_grad
      const AutocastScope amp_scope(amp);
      RecomputeScope recomputing;
      SeedReplay replay(*seeds);
      y = copy->forward(leaves[0]);
      DPE_CHECK(replay.remaining() == 0,
                "checkpoint: the recomputed forward of "
                    << copy->repr() << " drew " << seeds->size() - replay.remaining() << " of the "
                    << seeds->size() << " random seeds the first run drew; a checkpointed module "
                    << "must draw the same randomness on each run");
    }
    DPE_CHECK(y.shape() == grads[0].shape(),
              "checkpoint: the recomputed output " << y.shape() << " of " << copy->repr()
                                                   << " differs from the first run's "
                                                   << grads[0].shape());
    std::vector<Tensor> out_grads(leaves.size());
    if (!y.requires_grad()) return out_grads;  // nothing in the recompute needs a gradient
    dpe::backward({y}, {grads[0]});
    for (size_t i = 0; i < leaves.size(); ++i) out_grads[i] = leaves[i].grad();
    return out_grads;
  };
  record("CheckpointBackward", inputs, {&out}, std::move(backward), inputs);
  return out;
}

CheckpointWrapper::CheckpointWrapper(std::shared_ptr<Module> module) {
  DPE_CHECK(module != nullptr, "CheckpointWrapper: the module is null");
  register_module("_checkpoint_wrapped_module", std::move(module));
}

Module* CheckpointWrapper::wrapped() const { return named_children().at(0).second.get(); }

Tensor CheckpointWrapper::forward(const Tensor& x) { return checkpoint(*wrapped(), x); }

std::string CheckpointWrapper::repr() const {
  return "CheckpointWrapper(" + wrapped()->repr() + ")";
}

int apply_activation_checkpointing(Module& root,
                                   const std::function<bool(const Module&)>& check_fn) {
  int wrapped_count = 0;
  // Copied: replace_module rewrites the list being walked.
  const auto children = root.named_children();
  for (const auto& [name, child] : children) {
    if (child->wrapped() != nullptr) continue;  // already a wrapper
    if (check_fn(*child)) {
      root.replace_module(name, std::make_shared<CheckpointWrapper>(child));
      ++wrapped_count;
    } else {
      wrapped_count += apply_activation_checkpointing(*child, check_fn);
    }
  }
  return wrapped_count;
}

}  // namespace dpe::nn
