#include "engine/autograd/node.h"

#include "engine/autograd/grad_mode.h"
#include "engine/backend/dispatch.h"
#include "engine/core/error.h"

namespace dpe {

namespace {
thread_local const std::vector<const GradDestination*>* t_offers = nullptr;
thread_local const std::vector<Tensor>* t_accumulators = nullptr;

bool same_view(const Tensor& a, const Tensor& b) {
  return a.shares_storage(b) && a.impl()->offset == b.impl()->offset && a.shape() == b.shape() &&
         a.impl()->strides == b.impl()->strides;
}
}  // namespace

const GradDestination* offered_destination(size_t input) {
  return t_offers != nullptr && input < t_offers->size() ? (*t_offers)[input] : nullptr;
}

DestinationOffers::DestinationOffers(const std::vector<const GradDestination*>* offers)
    : previous_(t_offers) {
  t_offers = offers;
}

DestinationOffers::~DestinationOffers() { t_offers = previous_; }

Tensor offered_accumulator(size_t input) {
  return t_accumulators != nullptr && input < t_accumulators->size() ? (*t_accumulators)[input]
                                                                     : Tensor();
}

AccumulatorOffers::AccumulatorOffers(const std::vector<Tensor>* offers)
    : previous_(t_accumulators) {
  t_accumulators = offers;
}

AccumulatorOffers::~AccumulatorOffers() { t_accumulators = previous_; }

AccumulateGrad::AccumulateGrad(const Tensor& leaf)
    : Node("AccumulateGrad", leaf.device(), 1), leaf_(leaf.impl_ptr()) {}

const GradDestination* AccumulateGrad::destination() const {
  auto impl = leaf_.lock();
  if (!impl || impl->autograd.grad) return nullptr;
  return impl->autograd.grad_destination.get();
}

std::vector<Tensor> AccumulateGrad::apply(const std::vector<Tensor>& grads) {
  auto impl = leaf_.lock();
  if (!impl || !grads[0].defined()) return {};
  Tensor leaf(impl);
  const Tensor& g = grads[0];
  DPE_CHECK(g.shape() == leaf.shape(), "AccumulateGrad: gradient "
                                           << g.shape() << " does not match the parameter "
                                           << leaf.autograd().name << " " << leaf.shape());
  DPE_CHECK(g.device() == leaf.device(), "AccumulateGrad: gradient on " << g.device()
                                                                        << " for a parameter on "
                                                                        << leaf.device());
  Tensor current = leaf.grad();
  const MemoryCategory grad_category = impl->autograd.grad_category;
  GradDestination* destination = impl->autograd.grad_destination.get();
  if (!current.defined() && destination != nullptr && same_view(g, destination->view)) {
    // The op wrote its (scaled) gradient where the leaf's owner asked: it is .grad as it is.
    leaf.set_grad(g);
    destination->written = true;
  } else if (!current.defined()) {
    // As PyTorch's AccumulateGrad: a gradient nothing else holds (the engine's buffer is its only
    // handle, and no view shares its storage) becomes .grad as it is; otherwise a fresh copy,
    // since other nodes may still read it. Stealing saves a parameter-sized copy on every first
    // accumulation: DataParallel's reduced gradients on device 0 above all.
    if (solely_owned(g) && g.is_contiguous()) {
      g.set_memory_category(grad_category);
      leaf.set_grad(g);
    } else {
      MemoryCategoryScope category(grad_category);
      leaf.set_grad(g.clone());
    }
  } else {
    dispatch(prim::Add{current, g, 1.0f, current});
    current.bump_version();
  }
  for (auto& hook : impl->autograd.post_accumulate_hooks) hook(leaf);
  return {};
}

bool solely_owned(const Tensor& t) {
  const auto& impl = t.impl_ptr();
  const bool whole_storage =
      impl->storage->nbytes() == static_cast<size_t>(t.numel()) * dtype_size(t.dtype());
  return impl.use_count() == 1 && impl->storage.use_count() == 1 && whole_storage &&
         !t.requires_grad();
}

void check_saved_versions(const std::string& op, const std::vector<SavedTensor>& saved) {
  for (const SavedTensor& s : saved) {
    if (!s.tensor.defined() || s.tensor.version() == s.version) continue;
    const Tensor& t = s.tensor;
    const std::string& name = t.autograd().name;
    DPE_THROW(
        "one of the variables needed for gradient computation has been modified by an "
        "inplace operation: ["
        << dtype_name(t.dtype()) << " " << t.shape() << " on " << t.device() << "]"
        << (name.empty() ? "" : " (" + name + ")") << ", which " << op
        << " saved for its backward, is at version " << t.version() << "; expected version "
        << s.version
        << " instead. Hint: something wrote to it in place between the forward and "
           "backward() (an optimizer step, copy_, fill_, a running-statistics update)");
  }
}

FunctionNode::FunctionNode(std::string name, Device device, uint32_t num_outputs,
                           BackwardFn backward, const std::vector<Tensor>& saved)
    : Node(std::move(name), device, num_outputs), backward_(std::move(backward)) {
  saved_.reserve(saved.size());
  for (const Tensor& t : saved) saved_.emplace_back(t);
}

std::vector<Tensor> FunctionNode::apply(const std::vector<Tensor>& grads) {
  check_saved_versions(name(), saved_);
  return backward_(grads);
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  AutogradMeta& meta = t.autograd();
  if (meta.grad_fn) return {meta.grad_fn, meta.output_nr, t.dtype()};
  std::shared_ptr<Node> acc = meta.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t);
    meta.grad_accumulator = acc;
  }
  return {acc, 0, t.dtype()};
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor& t : inputs) {
    if (t.requires_grad()) return true;
  }
  return false;
}

bool record(const std::string& name, const std::vector<Tensor>& inputs,
            std::vector<Tensor*> outputs, BackwardFn backward, const std::vector<Tensor>& saved) {
  if (!needs_grad(inputs)) return false;
  auto node = std::make_shared<FunctionNode>(name, outputs.at(0)->device(),
                                             static_cast<uint32_t>(outputs.size()),
                                             std::move(backward), saved);
  for (const Tensor& t : inputs) node->next_edges().push_back(gradient_edge(t));
  for (uint32_t i = 0; i < outputs.size(); ++i) {
    AutogradMeta& meta = outputs[i]->autograd();
    meta.requires_grad = true;
    meta.grad_fn = node;
    meta.output_nr = i;
  }
  return true;
}

}  // namespace dpe
