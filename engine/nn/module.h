// Module: PyTorch's nn.Module — named parameters, buffers and children under PyTorch's names
// ("features.0.weight", "bn1.running_mean"), train/eval, state_dict, and a deep copy onto another
// device (DataParallel's replicate builds on clone_structure + set_parameter/set_buffer).
//
// Design note "transparent wrappers": a module that only wraps another (nn::CheckpointWrapper,
// PyTorch's checkpoint_wrapper) returns it from wrapped(); every function that walks names
// (named_parameters, named_buffers, state_dict, load_state_dict, find, child, set_parameter,
// set_buffer, and copy_to/replicate through them) treats the wrapper as the module it wraps, so
// "h.0.attn.c_attn.weight" names the same tensor with or without the wrapper (PyTorch strips the
// wrapper's "_checkpoint_wrapped_module." prefix from its state_dict for the same reason).
// named_children() still lists the wrapper's own child: it is the tree as built.
//
// Threading contract: a module is used by one thread at a time; DataParallel gives each worker
// its own replica.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/nn/value.h"
#include "engine/tensor/tensor.h"

namespace dpe {

using StateDict = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  virtual ~Module() = default;

  // Forward for a single tensor; layers and sequential models override this.
  virtual Tensor forward(const Tensor& x);
  // Forward for structured inputs (lists, dicts, extra arguments). The default unpacks a single
  // tensor, or a one-element list, and calls forward(Tensor).
  virtual Value forward_value(const Value& input);
  Tensor operator()(const Tensor& x) { return forward(x); }

  // "Linear(in_features=5, out_features=2, bias=True)", as PyTorch prints it.
  virtual std::string repr() const = 0;
  // A new module of the same type and configuration sharing this one's tensors (a shallow copy);
  // implemented by Cloneable<Derived>.
  virtual std::shared_ptr<Module> clone_structure() const = 0;

  // --- the tree ---
  // The module this one merely wraps (design note "transparent wrappers"), or null.
  virtual Module* wrapped() const { return nullptr; }
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<Tensor> parameters() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const {
    return children_;
  }
  // A child by name (of the wrapped module, for a wrapper); composite modules reach their children through this rather than keeping
  // pointers of their own, so clone_structure() stays correct.
  Module& child(const std::string& name) const;
  // Replaces the child `name` in place (same name, same position); throws when absent.
  void replace_module(const std::string& name, std::shared_ptr<Module> module);
  // Replaces the tensor of a parameter or buffer by its dotted name ("features.0.weight").
  void set_parameter(const std::string& name, const Tensor& t);
  void set_buffer(const std::string& name, const Tensor& t);
  // The parameter or buffer tensor by dotted name; throws naming the missing key.
  Tensor find(const std::string& name) const;

  // --- modes and gradients ---
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad();  // sets every .grad to undefined (PyTorch's set_to_none=True)

  // --- state ---
  StateDict state_dict() const;  // parameters then buffers, depth first, PyTorch's order
  // Copies values in (any device to this module's); strict: missing and unexpected keys are errors,
  // except a missing BatchNorm "num_batches_tracked" (PyTorch loads checkpoints older than that
  // buffer; it keeps its value). Errors list every problem in PyTorch's words.
  void load_state_dict(const StateDict& state, bool strict = true);
  // A deep copy whose parameters (leaves, same requires_grad) and buffers live on `device`.
  std::shared_ptr<Module> copy_to(Device device) const;
  // The device of the first parameter or buffer (host:0 when the module holds none).
  Device device() const;
  // Moves every parameter and buffer to `device` in place (keeps them leaves).
  void to(Device device);
  // PyTorch's module.to(dtype): every floating parameter and buffer converted in place to `dtype`
  // (a floating dtype; round to nearest even), kept leaves; integer buffers stay (BatchNorm's
  // num_batches_tracked). Gradients are dropped, as a new tensor has none.
  void to(DType dtype);

 protected:
  Tensor& register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  Tensor& register_buffer(const std::string& name, Tensor t);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    children_.emplace_back(name, m);
    return m;
  }
  // Own (non-recursive) tensors by name; throws when absent.
  Tensor& param(const std::string& name);
  Tensor& buffer(const std::string& name);
  const Tensor& param(const std::string& name) const;

  // Used by clone_structure: deep-copies the child list structure.
  void clone_children_from(const Module& other);

 private:
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// CRTP helper: clone_structure() by copy construction, then children cloned recursively.
template <typename Derived>
class Cloneable : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override {
    auto copy = std::make_shared<Derived>(static_cast<const Derived&>(*this));
    copy->clone_children_from(*this);
    return copy;
  }
};

}  // namespace dpe
