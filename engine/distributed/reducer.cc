// Reducer: see the design notes "gradient buckets" and "end of backward" in
// distributed_data_parallel.h.
#include "engine/distributed/reducer.h"

#include <algorithm>
#include <exception>
#include <functional>
#include <sstream>
#include <unordered_set>

#include "engine/autograd/node.h"
#include "engine/backend/dispatch.h"
#include "engine/core/error.h"
#include "engine/device/memory_category.h"
#include "engine/device/step_observer.h"

namespace dpe {
namespace distributed {

namespace {

// The hook object itself, so the reducer can find (and remove) its own hooks among others.
struct GradReadyHook {
  Reducer* reducer;
  size_t index;
  void operator()(Tensor&) const { reducer->on_gradient_ready(index); }
};

}  // namespace

Reducer::Reducer(std::vector<std::pair<std::string, Tensor>> params,
                 std::shared_ptr<ProcessGroup> group, const ReducerOptions& options)
    : group_(std::move(group)), options_(options) {
  DPE_CHECK(group_ != nullptr, "DistributedDataParallel: no process group");
  inverse_size_ = 1.0f / static_cast<float>(group_->size());
  std::unordered_set<const TensorImpl*> seen;
  for (auto& [name, t] : params) {
    // A parameter shared by two submodules is reduced once (PyTorch deduplicates too).
    if (!t.requires_grad() || !seen.insert(t.impl()).second) continue;
    DPE_CHECK(t.dtype() == DType::kFloat32, "DistributedDataParallel: parameter "
                                                << name << " is " << dtype_name(t.dtype())
                                                << "; only float32 parameters are reduced");
    names_.push_back(name);
    params_.push_back(t);
  }
  const size_t n = params_.size();
  bucket_of_.assign(n, 0);
  offset_of_.assign(n, 0);
  ready_.assign(n, 0);
  local_used_.assign(n, 0);
  // PyTorch's compute_bucket_assignment_by_size: reverse registration order, a bucket closes
  // once it reaches its cap (so it may exceed it by its last parameter); the first cap is
  // first_bucket_mb (PyTorch's dist._DEFAULT_FIRST_BUCKET_BYTES, 1 MiB).
  const int64_t first_cap = static_cast<int64_t>(options_.first_bucket_mb * 1024.0 * 1024.0);
  const int64_t cap = static_cast<int64_t>(options_.bucket_cap_mb * 1024.0 * 1024.0);
  int64_t limit = first_cap, bytes = 0, numel = 0;
  Bucket current;
  auto close = [&] {
    if (current.params.empty()) return;
    MemoryCategoryScope category(MemoryCategory::kGradients);  // the buckets hold gradients
    current.buffer =
        Tensor::zeros(Shape{numel}, DType::kFloat32, params_[current.params[0]].device());
    buckets_.push_back(std::move(current));
    current = Bucket();
    bytes = numel = 0;
    limit = cap;
  };
  for (size_t k = n; k-- > 0;) {
    // A bucket is one flat buffer on one device: a parameter on another device starts a new one.
    if (!current.params.empty() && params_[k].device() != params_[current.params[0]].device()) {
      close();
    }
    bucket_of_[k] = buckets_.size();
    offset_of_[k] = numel;
    current.params.push_back(k);
    numel += params_[k].numel();
    bytes += static_cast<int64_t>(params_[k].nbytes());
    if (bytes >= limit) close();
  }
  close();
  for (size_t i = 0; i < n; ++i) {
    params_[i].autograd().post_accumulate_hooks.emplace_back(GradReadyHook{this, i});
    if (options_.gradient_as_bucket_view) {
      auto d = std::make_shared<GradDestination>();
      d->view = slot(i);
      d->scale = inverse_size_;
      destinations_.push_back(std::move(d));
    }
  }
}

Reducer::~Reducer() {
  disarm_destinations();
  for (Tensor& p : params_) {
    auto& hooks = p.autograd().post_accumulate_hooks;
    hooks.erase(std::remove_if(hooks.begin(), hooks.end(),
                               [this](const std::function<void(Tensor&)>& h) {
                                 const auto* mine = h.target<GradReadyHook>();
                                 return mine != nullptr && mine->reducer == this;
                               }),
                hooks.end());
  }
}

Tensor Reducer::slot(size_t i) const {
  return buckets_[bucket_of_[i]]
      .buffer.narrow(0, offset_of_[i], params_[i].numel())
      .view(params_[i].shape());
}

void Reducer::arm_destinations() {
  if (destinations_.empty()) return;
  std::vector<char> unused(params_.size(), 0);
  for (size_t u : unused_) unused[u] = 1;
  for (size_t i = 0; i < params_.size(); ++i) {
    // A parameter the outputs do not reach is marked ready with zeros at the first hook: a
    // gradient that still reached it must not land in its (reduced) slot. And the gradient in a
    // slot is already divided: only where the reducer's hook is the first to see it.
    const auto& hooks = params_[i].autograd().post_accumulate_hooks;
    const auto* first = hooks.empty() ? nullptr : hooks.front().target<GradReadyHook>();
    if (unused[i] || first == nullptr || first->reducer != this) continue;
    destinations_[i]->written = false;
    params_[i].autograd().grad_destination = destinations_[i];
    armed_.push_back(i);
  }
}

void Reducer::disarm_destinations() {
  // Only those armed: their gradients have arrived (or the backward never ran), so no node
  // reads these fields now.
  for (size_t i : armed_) params_[i].autograd().grad_destination = nullptr;
  armed_.clear();
}

bool Reducer::is_slot_view(const Tensor& grad, size_t i) const {
  return grad.defined() && grad.shares_storage(buckets_[bucket_of_[i]].buffer) &&
         grad.impl()->offset == buckets_[bucket_of_[i]].buffer.impl()->offset + offset_of_[i];
}

void Reducer::check_prior_reduction_finished() {
  std::lock_guard<std::mutex> lock(mu_);
  DPE_CHECK(!require_finalize_, unfinished_message_locked());
}

std::string Reducer::unfinished_message_locked() const {
  std::ostringstream names, indices;
  bool first = true;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (ready_[i]) continue;
    names << (first ? "" : ", ") << names_[i];
    indices << (first ? "" : " ") << i;
    first = false;
  }
  std::ostringstream os;
  os << "Expected to have finished reduction in the prior iteration before starting a new one. "
        "This error indicates that your module has parameters that were not used in producing "
        "loss. You can enable unused parameter detection by setting "
        "`find_unused_parameters = true` in the DistributedDataParallelOptions of "
        "`dpe::DistributedDataParallel`, and by making sure all `forward` function outputs "
        "participate in calculating loss.\n"
     << "Parameters which did not receive grad for rank " << group_->rank() << ": " << names.str()
     << "\nParameter indices which did not receive grad for rank " << group_->rank() << ": "
     << indices.str();
  return os.str();
}

void Reducer::prepare_for_backward(const Value& outputs) {
  std::lock_guard<std::mutex> lock(mu_);
  std::fill(ready_.begin(), ready_.end(), 0);
  std::fill(local_used_.begin(), local_used_.end(), 0);
  for (Bucket& b : buckets_) {
    b.pending = b.params.size();
    b.work.reset();
  }
  num_ready_ = 0;
  next_bucket_ = 0;
  unused_.clear();
  unused_marked_ = false;
  used_map_ = Tensor();
  used_work_.reset();
  trace_ = BackwardTrace();
  expect_hooks_ = true;
  disarm_destinations();  // a forward whose backward never ran
  if (!options_.find_unused_parameters) {
    arm_destinations();
    return;
  }
  // Every node the outputs' gradients can reach; a parameter whose AccumulateGrad is not among
  // them gets no gradient from this backward.
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack;
  outputs.for_each_tensor([&](const Tensor& t) {
    Edge e = gradient_edge(t);
    if (e.fn && seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
  });
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges()) {
      if (e.fn && seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    std::shared_ptr<Node> acc = params_[i].autograd().grad_accumulator.lock();
    if (!acc || !seen.count(acc.get())) unused_.push_back(i);
  }
  arm_destinations();
}

const char* comm_hook_name(CommHook hook) {
  switch (hook) {
    case CommHook::kAllReduce:
      return "allreduce";
    case CommHook::kBf16Compress:
      return "bf16_compress";
    case CommHook::kFp16Compress:
      return "fp16_compress";
  }
  return "?";
}

void Reducer::register_comm_hook(CommHook hook) {
  std::lock_guard<std::mutex> lock(mu_);
  DPE_CHECK(!hook_registered_, "register_comm_hook can only be called once (a "
                                   << comm_hook_name(options_.comm_hook)
                                   << " hook is registered)");
  DPE_CHECK(!any_backward_, "register_comm_hook must be called before the first backward");
  hook_registered_ = true;
  options_.comm_hook = hook;
}

void Reducer::on_gradient_ready(size_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!expect_hooks_) return;  // no_sync, a forward without grad, or after the reduction
  any_backward_ = true;
  ++trace_.hooks_fired;
  require_finalize_ = true;
  if (!unused_marked_) {
    // At the first hook, as PyTorch: buckets made only of unused parameters launch in order.
    unused_marked_ = true;
    for (size_t u : unused_) mark_ready_locked(u, false);
    trace_.unused_marked = unused_.size();
  }
  DPE_CHECK(!ready_[index],
            "Expected to mark a variable ready only once. This error is caused by one of the "
            "following reasons: 1) Use of a module parameter outside the `forward` function; "
            "2) Reused parameters in multiple backward passes of one forward. Parameter at index "
                << index << " with name " << names_[index] << " has been marked as ready twice.");
  mark_ready_locked(index, true);
  launch_ready_locked();
  if (num_ready_ == params_.size()) finalize_locked();
}

void Reducer::mark_ready_locked(size_t i, bool used) {
  Tensor& p = params_[i];
  Tensor grad = p.grad();
  Tensor s = slot(i);
  if (grad.defined()) {
    // Gradients accumulated under no_sync count as used, as PyTorch's local_used_map does.
    used = true;
    // Divided by the world size on the way into the bucket, and the bucket then summed, as
    // PyTorch's reducer does: the division costs no pass of its own over the whole bucket after
    // the all-reduce (on the host, a cold pass of the communication thread at the end of every
    // step), and the division rides on the copy the bucket needs anyway.
    const bool prescaled = !destinations_.empty() &&
                           p.autograd().grad_destination == destinations_[i] &&
                           destinations_[i]->written;
    if (prescaled && is_slot_view(grad, i)) {
      // The op that computed it wrote it here, already divided (design note "gradient
      // destinations", engine/autograd/node.h): no pass over it at all.
      ++trace_.written_in_place;
    } else if (is_slot_view(grad, i)) {
      dispatch(prim::Scale{s, inverse_size_, s});
    } else {
      dispatch(prim::Scale{grad.contiguous(), inverse_size_, s});
    }
    s.bump_version();
    if (options_.gradient_as_bucket_view) p.set_grad(s);
  } else {
    s.zero_();
  }
  local_used_[i] = used ? 1 : 0;
  ready_[i] = 1;
  ++num_ready_;
  --buckets_[bucket_of_[i]].pending;
}

void Reducer::launch_ready_locked() {
  // Without overlap nothing goes before every parameter is ready (the end of backward).
  if (!options_.overlap && num_ready_ < params_.size()) return;
  // Bucket k goes only after buckets 0..k-1: every rank queues the same collectives in order.
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    Bucket& b = buckets_[next_bucket_];
    if (options_.comm_hook != CommHook::kAllReduce) {  // compressed: 16 bits on the wire
      MemoryCategoryScope category(MemoryCategory::kCommunication);
      b.wire = b.buffer.to(options_.comm_hook == CommHook::kBf16Compress ? DType::kBFloat16
                                                                          : DType::kFloat16);
    }
    const Tensor& payload = b.wire.defined() ? b.wire : b.buffer;
    if (StepObserver* observer = step_observer()) {  // the cost model's launch point
      observer->on_collective("all_reduce", payload.device(), static_cast<int64_t>(next_bucket_),
                              static_cast<int64_t>(payload.nbytes()));
    }
    // Pre-divided (mark_ready_locked). At the end of backward on the host, the caller, which
    // would only wait, runs it itself (design note "one communication thread").
    b.work = !options_.overlap && payload.device().is_host()
                 ? group_->all_reduce_here(payload, ReduceOp::kSum)
                 : group_->all_reduce_async(payload, ReduceOp::kSum);
    trace_.launches.push_back({next_bucket_, trace_.hooks_fired});
    trace_.bytes_all_reduced += static_cast<int64_t>(payload.nbytes());
    ++next_bucket_;
  }
  if (next_bucket_ == buckets_.size() && options_.find_unused_parameters && !used_work_) {
    used_map_ = Tensor::from_vector(local_used_, Shape{static_cast<int64_t>(local_used_.size())},
                                    params_[0].device());
    used_work_ = group_->all_reduce_async(used_map_, ReduceOp::kMax);
  }
}

void Reducer::finalize_locked() {
  expect_hooks_ = false;
  require_finalize_ = false;
  disarm_destinations();
  std::exception_ptr error;
  for (Bucket& b : buckets_) {
    try {
      if (b.work) b.work->wait();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  std::vector<int64_t> global_used(params_.size(), 1);
  if (used_work_) {
    try {
      used_work_->wait();
      global_used = used_map_.to_vector<int64_t>();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  for (Bucket& b : buckets_) {  // a compressing hook's sums back into the float32 buckets
    if (b.wire.defined() && !error) b.buffer.copy_(b.wire);
    b.wire = Tensor();
  }
  if (error) std::rethrow_exception(error);
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    Tensor grad = p.grad();
    if (grad.defined()) {
      if (!is_slot_view(grad, i)) {
        grad.copy_(slot(i));
      } else {
        grad.bump_version();
      }
    } else if (global_used[i]) {
      // Unused here but used on another rank: the average is this rank's gradient too.
      MemoryCategoryScope category(MemoryCategory::kGradients);
      p.set_grad(options_.gradient_as_bucket_view ? slot(i) : slot(i).clone());
    }
  }
  trace_.finished = true;
}

std::vector<std::vector<std::string>> Reducer::bucket_names() const {
  std::vector<std::vector<std::string>> out;
  for (const Bucket& b : buckets_) {
    out.emplace_back();
    for (size_t i : b.params) out.back().push_back(names_[i]);
  }
  return out;
}

BackwardTrace Reducer::trace() const {
  std::lock_guard<std::mutex> lock(mu_);
  return trace_;
}

}  // namespace distributed
}  // namespace dpe
