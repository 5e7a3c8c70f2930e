// Node: one recorded operation of the autograd graph. Its backward maps the gradients of its
// outputs to the gradients of its inputs; edges point at the nodes that produced those inputs.
//
// Design note "device-owned backward": every node records the device it runs on; the engine
// (engine.h) runs each node's backward on that device's worker, so a graph that spans devices
// (DataParallel) is differentiated by all devices at once, and cross-device ops (to, scatter,
// gather) are ordinary nodes whose backward moves gradients back where their inputs live.
//
// Design note "saved tensors": an op passes record() the tensors its backward will read; the node
// keeps each with its version (tensor.h: shared by all views of the storage, bumped by every
// in-place write) and refuses to run its backward if one has moved since, with PyTorch's "one of
// the variables needed for gradient computation has been modified by an inplace operation".
//
// Design note "gradient destinations": a leaf may name where its next gradient should go
// (AutogradMeta::grad_destination): DDP under gradient_as_bucket_view names the leaf's slot in its
// bucket, with the 1/world factor the reducer would otherwise apply in a copy into the bucket.
// When a node runs that is the only producer of that leaf's gradient in this backward, and the
// leaf has no .grad, the engine offers the destination to the node (offered_destination). An op
// that can write there (linear) computes scale x its gradient straight into the view and returns
// the view; AccumulateGrad recognises it, adopts it as .grad and marks the destination written.
// An op that ignores the offer returns a fresh tensor and nothing changes. A gradient that went
// to a destination arrives already scaled: the owner arms one only where its own post-accumulate
// hook is the first to see the gradient (DDP's reducer checks), and for leaves the backward's
// outputs reach.
//
// Design note "accumulation offers": when a gradient has already arrived for one of a node's next
// edges, alone, and nothing else holds it (solely_owned, contiguous, on the node's device), the
// engine offers it to the node (offered_accumulator) instead of summing it with the node's own
// later. An op whose gradient covers only part of its input (a slice's, an embedding's rows) adds
// its part into the offer in place and returns the offer: no tensor of zeros with that part, and
// no full-size sum. An op that ignores the offer returns its own gradient and the engine sums the
// two as it would have. The values are the sum's, except that an element the op does not touch
// keeps a -0 that adding a zero would have made +0.
//
// Threading contract: a node is built by the thread that runs the forward op; the engine then
// runs its apply() once, on the worker of its device (or inline for a one-device graph). Hooks
// that AccumulateGrad fires (AutogradMeta::post_accumulate_hooks) therefore run on device workers,
// concurrently across devices: DDP's Reducer relies on it and synchronises itself.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/device/device.h"
#include "engine/tensor/tensor.h"

namespace dpe {

class Node;

struct Edge {
  std::shared_ptr<Node> fn;  // null: the input needs no gradient
  uint32_t input_nr = 0;     // which output of fn (which input slot of its backward)
  // The input's dtype: the engine casts a floating gradient of another dtype to it before it is
  // handed on (PyTorch's validate_outputs), so a float32 weight used by a bfloat16 product gets
  // a float32 gradient whatever the product's backward produced.
  DType dtype = DType::kFloat32;
};

class Node {
 public:
  // The node remembers the memory category of the thread that recorded it (memory_category.h), and
  // the engine runs its backward under it: a backward's temporaries count as what its forward made
  // (activations, the loss's gradients, ...).
  Node(std::string name, Device device, uint32_t num_outputs)
      : name_(std::move(name)),
        device_(device),
        num_outputs_(num_outputs),
        memory_category_(current_memory_category()) {}
  virtual ~Node() = default;

  // grads[i] is the gradient of output i (undefined when none reached it). Returns one gradient
  // per next edge, on the device of the corresponding input (undefined: no gradient).
  virtual std::vector<Tensor> apply(const std::vector<Tensor>& grads) = 0;

  const std::string& name() const { return name_; }
  Device device() const { return device_; }
  uint32_t num_outputs() const { return num_outputs_; }
  MemoryCategory memory_category() const { return memory_category_; }
  std::vector<Edge>& next_edges() { return next_edges_; }

 private:
  std::string name_;
  Device device_;
  uint32_t num_outputs_;
  MemoryCategory memory_category_;
  std::vector<Edge> next_edges_;
};

// Design note "gradient destinations". Armed by the leaf's owner (DDP's reducer) before a backward
// and disarmed once the leaf's gradient has arrived; `written` is set by AccumulateGrad and read by
// the owner's hook.
struct GradDestination {
  Tensor view;           // shaped like the leaf, on its device
  float scale = 1.0f;    // what the gradient is multiplied by on its way there
  bool written = false;  // this backward's gradient arrived in `view`, already scaled
};

// Inside a node's apply(): the destination the engine offers for the gradient of the node's input
// `input` (its next edge of that index), or null.
const GradDestination* offered_destination(size_t input);

// Set by the engine around a node's apply(): offers[i] for next edge i (null: none).
class DestinationOffers {
 public:
  explicit DestinationOffers(const std::vector<const GradDestination*>* offers);
  ~DestinationOffers();
  DestinationOffers(const DestinationOffers&) = delete;
  DestinationOffers& operator=(const DestinationOffers&) = delete;

 private:
  const std::vector<const GradDestination*>* previous_;
};

// Inside a node's apply(): the gradient the engine offers for the node's input `input` to add into
// (design note "accumulation offers"), or an undefined tensor. A node that adds into it returns it
// as that input's gradient.
Tensor offered_accumulator(size_t input);

// Set by the engine around a node's apply(): offers[i] for next edge i (undefined: none).
class AccumulatorOffers {
 public:
  explicit AccumulatorOffers(const std::vector<Tensor>* offers);
  ~AccumulatorOffers();
  AccumulatorOffers(const AccumulatorOffers&) = delete;
  AccumulatorOffers& operator=(const AccumulatorOffers&) = delete;

 private:
  const std::vector<Tensor>* previous_;
};

// The node that adds an incoming gradient into a leaf's .grad and then fires its
// post-accumulate hooks (DDP's bucketing listens there).
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(const Tensor& leaf);
  std::vector<Tensor> apply(const std::vector<Tensor>& grads) override;
  // The leaf's destination when it has one and no .grad: what the engine may offer.
  const GradDestination* destination() const;

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

using BackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grads)>;

// A tensor a backward reads, with the version it had when the op was recorded.
struct SavedTensor {
  explicit SavedTensor(const Tensor& t) : tensor(t), version(t.defined() ? t.version() : 0) {}
  Tensor tensor;
  uint64_t version;
};

// Throws dpe::Error naming the tensor (shape, dtype, device, parameter name), the op and both
// versions when one of `saved` was modified in place after `op` recorded it.
void check_saved_versions(const std::string& op, const std::vector<SavedTensor>& saved);

// Whether nothing but this handle reaches t's memory: the only handle to its impl, the only view of
// its whole storage, not part of a graph. Such a gradient may be kept, or summed into, as it is.
bool solely_owned(const Tensor& t);

// A node whose backward is a function, used by most ops. apply() checks the saved tensors' versions
// before calling the function.
class FunctionNode final : public Node {
 public:
  FunctionNode(std::string name, Device device, uint32_t num_outputs, BackwardFn backward,
               const std::vector<Tensor>& saved = {});
  std::vector<Tensor> apply(const std::vector<Tensor>& grads) override;

 private:
  BackwardFn backward_;
  std::vector<SavedTensor> saved_;
};

// The edge through which a gradient for `t` flows: its grad_fn, its leaf accumulator, or none.
Edge gradient_edge(const Tensor& t);

// Records an op: when grad mode is on and any input requires grad, creates a FunctionNode on the
// device of outputs[0] with edges to `inputs` and makes it the grad_fn of every output. `saved`
// lists the tensors `backward` reads that a caller could still write in place (inputs, outputs,
// labels; not temporaries the op made): their versions are checked when the backward runs.
// Returns true when the op was recorded.
bool record(const std::string& name, const std::vector<Tensor>& inputs,
            std::vector<Tensor*> outputs, BackwardFn backward,
            const std::vector<Tensor>& saved = {});

// True when an op on `inputs` must be recorded.
bool needs_grad(const std::vector<Tensor>& inputs);

}  // namespace dpe
