// DistributedDataParallel and its Reducer: see the design notes "gradient buckets" and "end of
// backward" in distributed_data_parallel.h.
#include "engine/distributed/distributed_data_parallel.h"

#include <algorithm>
#include <exception>
#include <mutex>
#include <sstream>
#include <unordered_set>

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops.h"
#include "engine/core/error.h"
#include "engine/device/runtime.h"
#include "engine/distributed/distributed.h"

namespace dpe {

using distributed::ProcessGroup;
using distributed::ReduceOp;
using distributed::Work;

namespace distributed_detail {

// The gradient side of DDP: buckets, the hooks' bookkeeping, and the end of backward.
class Reducer {
 public:
  Reducer(std::vector<std::pair<std::string, Tensor>> params, std::shared_ptr<ProcessGroup> group,
          const DistributedDataParallelOptions& options);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // PyTorch's ensure_prior_reduction_finished(): throws when the previous synchronised backward
  // started (a hook fired) but some parameter never became ready.
  void check_prior_reduction_finished();
  // Arms the hooks for the next backward; with find_unused_parameters, finds the parameters that
  // `outputs` do not depend on.
  void prepare_for_backward(const Value& outputs);
  // The post-accumulate hook of parameter `index`.
  void on_gradient_ready(size_t index);

  std::vector<std::vector<std::string>> bucket_names() const;
  BackwardTrace trace() const;

 private:
  struct Bucket {
    std::vector<size_t> params;  // indices into params_
    Tensor buffer;               // flat float32 [sum of numels] on the module's device
    size_t pending = 0;          // slots not ready yet in this backward
    std::shared_ptr<Work> work;
  };

  Tensor slot(size_t i) const;
  bool is_slot_view(const Tensor& grad, size_t i) const;
  void mark_ready_locked(size_t i, bool used);
  void launch_ready_locked();
  void finalize_locked();
  std::string unfinished_message_locked() const;

  std::vector<Tensor> params_;  // requiring grad, in registration order
  std::vector<std::string> names_;
  std::shared_ptr<ProcessGroup> group_;
  DistributedDataParallelOptions options_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;
  std::vector<int64_t> offset_of_;  // within its bucket's buffer, in elements

  mutable std::mutex mu_;
  bool expect_hooks_ = false;      // armed by prepare_for_backward, disarmed by finalize
  bool require_finalize_ = false;  // a hook fired in this backward and finalize has not run
  bool unused_marked_ = false;
  std::vector<size_t> unused_;       // found by the graph walk (find_unused_parameters)
  std::vector<char> ready_;          // per parameter, in this backward
  std::vector<int64_t> local_used_;  // per parameter: 1 when it has a gradient on this rank
  size_t num_ready_ = 0;
  size_t next_bucket_ = 0;
  Tensor used_map_;  // the all-reduced usage map (find_unused_parameters)
  std::shared_ptr<Work> used_work_;
  BackwardTrace trace_;
};

// The hook object itself, so the reducer can find (and remove) its own hooks among others.
struct GradReadyHook {
  Reducer* reducer;
  size_t index;
  void operator()(Tensor&) const { reducer->on_gradient_ready(index); }
};

Reducer::Reducer(std::vector<std::pair<std::string, Tensor>> params,
                 std::shared_ptr<ProcessGroup> group, const DistributedDataParallelOptions& options)
    : group_(std::move(group)), options_(options) {
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
  // once it reaches its cap (so it may exceed it by its last parameter); the first cap is 1 MiB.
  const int64_t first_cap = int64_t{1} << 20;
  const int64_t cap = static_cast<int64_t>(options_.bucket_cap_mb * 1024.0 * 1024.0);
  int64_t limit = first_cap, bytes = 0, numel = 0;
  Bucket current;
  auto close = [&] {
    if (current.params.empty()) return;
    current.buffer =
        Tensor::zeros(Shape{numel}, DType::kFloat32, params_[current.params[0]].device());
    buckets_.push_back(std::move(current));
    current = Bucket();
    bytes = numel = 0;
    limit = cap;
  };
  for (size_t k = n; k-- > 0;) {
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
  }
}

Reducer::~Reducer() {
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

namespace {

void collect_tensors(const Value& v, std::vector<Tensor>& out) {
  if (v.is_tensor()) {
    out.push_back(v.tensor());
  } else if (v.is_list()) {
    for (const Value& e : v.list()) collect_tensors(e, out);
  } else if (v.is_dict()) {
    for (const auto& [k, e] : v.dict()) collect_tensors(e, out);
  }
}

}  // namespace

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
  if (!options_.find_unused_parameters) return;
  // Every node the outputs' gradients can reach; a parameter whose AccumulateGrad is not among
  // them gets no gradient from this backward.
  std::vector<Tensor> roots;
  collect_tensors(outputs, roots);
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack;
  for (const Tensor& t : roots) {
    Edge e = gradient_edge(t);
    if (e.fn && seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
  }
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
}

void Reducer::on_gradient_ready(size_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!expect_hooks_) return;  // no_sync, a forward without grad, or after the reduction
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
    if (!is_slot_view(grad, i)) s.copy_(grad);
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
  // Bucket k goes only after buckets 0..k-1: every rank queues the same collectives in order.
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    Bucket& b = buckets_[next_bucket_];
    b.work = group_->all_reduce_async(b.buffer, ReduceOp::kAvg);
    trace_.launches.push_back({next_bucket_, trace_.hooks_fired});
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

}  // namespace distributed_detail

namespace {

// FNV-1a: the same on every rank (std::hash need not be).
uint64_t fnv1a(const std::vector<int64_t>& v) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t x : v) {
    for (int b = 0; b < 8; ++b) {
      h ^= static_cast<uint64_t>(x >> (8 * b)) & 0xffu;
      h *= 1099511628211ull;
    }
  }
  return h;
}

struct ParamSignature {
  std::string name;
  Shape shape;
  bool requires_grad = true;
};

// [ndim, dims..., requires_grad, name length, name bytes...] per parameter: a parameter frozen on
// one rank only would give the ranks different buckets.
std::vector<int64_t> encode(const std::vector<std::pair<std::string, Tensor>>& params) {
  std::vector<int64_t> out;
  for (const auto& [name, t] : params) {
    out.push_back(t.dim());
    for (int64_t d : t.shape()) out.push_back(d);
    out.push_back(t.requires_grad() ? 1 : 0);
    out.push_back(static_cast<int64_t>(name.size()));
    for (char c : name) out.push_back(static_cast<unsigned char>(c));
  }
  return out;
}

std::vector<ParamSignature> decode(const std::vector<int64_t>& v, size_t len) {
  std::vector<ParamSignature> out;
  size_t k = 0;
  auto next = [&]() -> int64_t {
    DPE_CHECK(k < len, "DistributedDataParallel: malformed parameter signature from a peer");
    return v[k++];
  };
  while (k < len) {
    ParamSignature s;
    std::vector<int64_t> dims(static_cast<size_t>(next()));
    for (int64_t& d : dims) d = next();
    s.shape = Shape(dims);
    s.requires_grad = next() != 0;
    const int64_t n = next();
    for (int64_t c = 0; c < n; ++c) s.name.push_back(static_cast<char>(next()));
    out.push_back(std::move(s));
  }
  return out;
}

// Every rank gets every rank's signature only when the hashes differ; then each throws the same
// message naming the first parameter (lowest index) that differs and the two ranks.
// The small tensors live on `device` (the module's): the one a process group of any backend
// accepts.
void verify_same_parameters(ProcessGroup& group,
                            const std::vector<std::pair<std::string, Tensor>>& params,
                            Device device) {
  if (group.size() == 1) return;
  const std::vector<int64_t> sig = encode(params);
  Tensor header = Tensor::from_vector(
      std::vector<int64_t>{static_cast<int64_t>(params.size()), static_cast<int64_t>(fnv1a(sig)),
                           static_cast<int64_t>(sig.size())},
      Shape{3}, device);
  std::vector<Tensor> headers;
  group.all_gather(header, headers);
  std::vector<std::vector<int64_t>> h;
  for (const Tensor& t : headers) h.push_back(t.to_vector<int64_t>());
  bool same = true;
  int64_t max_len = 0;
  for (const auto& x : h) {
    same = same && x[0] == h[0][0] && x[1] == h[0][1] && x[2] == h[0][2];
    max_len = std::max(max_len, x[2]);
  }
  if (same) return;
  std::vector<int64_t> padded = sig;
  padded.resize(static_cast<size_t>(max_len), 0);
  std::vector<Tensor> all;
  group.all_gather(Tensor::from_vector(padded, Shape{max_len}, device), all);
  std::vector<std::vector<ParamSignature>> ranks;
  for (size_t r = 0; r < all.size(); ++r) {
    ranks.push_back(decode(all[r].to_vector<int64_t>(), static_cast<size_t>(h[r][2])));
  }
  size_t most = 0;
  for (const auto& s : ranks) most = std::max(most, s.size());
  for (size_t i = 0; i < most; ++i) {
    for (size_t r = 1; r < ranks.size(); ++r) {
      const auto& a = ranks[0];
      const auto& b = ranks[r];
      if (i < a.size() && i < b.size()) {
        if (a[i].shape == b[i].shape && a[i].name == b[i].name &&
            a[i].requires_grad == b[i].requires_grad) {
          continue;
        }
        DPE_CHECK(
            a[i].shape != b[i].shape || a[i].name != b[i].name,
            "DistributedDataParallel: DDP expects the same model on every rank, but parameter "
                << i << " (" << a[i].name << ") has requires_grad="
                << (a[i].requires_grad ? "true" : "false") << " on rank 0 and "
                << (b[i].requires_grad ? "true" : "false") << " on rank " << r);
        DPE_THROW(
            "DistributedDataParallel: DDP expects the same model on every rank, but parameter "
            << i << " is " << a[i].name << " with shape " << a[i].shape << " on rank 0 and "
            << b[i].name << " with shape " << b[i].shape << " on rank " << r);
      }
      if (i >= a.size() && i >= b.size()) continue;
      const bool on_zero = i < a.size();
      const ParamSignature& extra = on_zero ? a[i] : b[i];
      DPE_THROW("DistributedDataParallel: DDP expects the same model on every rank, but rank 0 has "
                << a.size() << " parameters and rank " << r << " has " << b.size() << ": parameter "
                << i << " (" << extra.name << " with shape " << extra.shape << ") on rank "
                << (on_zero ? 0 : r) << " has no counterpart on rank " << (on_zero ? r : 0));
    }
  }
  DPE_THROW(
      "DistributedDataParallel: the ranks' parameter signatures differ (hash) but no "
      "difference was found");
}

Value move_to(const Value& v, Device device) {
  if (v.is_tensor()) {
    const Tensor& t = v.tensor();
    return t.defined() && t.device() != device ? Value(ops::to(t, device)) : v;
  }
  if (v.is_list()) {
    ValueList out;
    for (const Value& e : v.list()) out.push_back(move_to(e, device));
    return Value(std::move(out));
  }
  if (v.is_dict()) {
    ValueDict out;
    for (const auto& [k, e] : v.dict()) out.emplace_back(k, move_to(e, device));
    return Value(std::move(out));
  }
  return v;
}

}  // namespace

void broadcast_coalesced(ProcessGroup& group, const std::vector<Tensor>& tensors, int root) {
  if (group.size() == 1 || tensors.empty()) return;
  // One collective for every dtype: the tensors' bytes, each at an 8-byte aligned offset, in a
  // float32 buffer. A broadcast moves bits and does no arithmetic, so int64 values survive.
  std::vector<int64_t> offsets;  // in bytes
  int64_t bytes = 0;
  for (const Tensor& t : tensors) {
    DPE_CHECK(t.defined() && t.is_contiguous(),
              "broadcast_coalesced (rank "
                  << group.rank() << "): expected defined contiguous tensors, got " << t.str());
    DPE_CHECK(t.device() == tensors[0].device(),
              "broadcast_coalesced (rank " << group.rank() << "): tensors on "
                                           << tensors[0].device() << " and " << t.device());
    offsets.push_back(bytes);
    bytes += (static_cast<int64_t>(t.nbytes()) + 7) / 8 * 8;
  }
  if (bytes == 0) return;
  Tensor flat = Tensor::empty(Shape{bytes / 4}, DType::kFloat32, tensors[0].device());
  Runtime& rt = Runtime::get();
  DeviceContext& ctx = flat.context();
  char* base = static_cast<char*>(flat.raw_data());
  if (group.rank() == root) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      rt.copy(ctx, base + offsets[i], ctx, tensors[i].raw_data(), tensors[i].nbytes());
    }
  }
  group.broadcast(flat, root);
  if (group.rank() == root) return;
  for (size_t i = 0; i < tensors.size(); ++i) {
    Tensor t = tensors[i];
    rt.copy(ctx, t.raw_data(), ctx, base + offsets[i], t.nbytes());
    t.bump_version();
  }
}

DistributedDataParallel::DistributedDataParallel(
    std::shared_ptr<Module> module, std::shared_ptr<distributed::ProcessGroup> process_group,
    DistributedDataParallelOptions options)
    : group_(process_group ? std::move(process_group) : distributed::default_group()),
      options_(std::move(options)) {
  DPE_CHECK(module != nullptr, "DistributedDataParallel: the module is null");
  register_module("module", module);
  device_ = module->device();
  DPE_CHECK(options_.device_ids.size() <= 1,
            "DistributedDataParallel: device_ids can only be empty or contain a single element "
            "(one process per device), got "
                << options_.device_ids.size());
  if (!options_.device_ids.empty()) device_ = options_.device_ids[0];
  auto check = [&](const std::vector<std::pair<std::string, Tensor>>& tensors) {
    for (const auto& [name, t] : tensors) {
      DPE_CHECK(t.device() == device_,
                "DistributedDataParallel: module must have its parameters and buffers on device "
                    << device_ << " but found " << name << " on device: " << t.device());
    }
  };
  check(module->named_parameters());
  check(module->named_buffers());
  if (!options_.output_device) options_.output_device = device_;
  DPE_CHECK(
      options_.bucket_cap_mb > 0,
      "DistributedDataParallel: bucket_cap_mb must be positive, got " << options_.bucket_cap_mb);
  const auto params = module->named_parameters();
  verify_same_parameters(*group_, params, device_);
  std::vector<Tensor> state;
  for (const auto& [n, t] : params) state.push_back(t);
  for (const auto& [n, t] : module->named_buffers()) state.push_back(t);
  broadcast_coalesced(*group_, state, 0);
  reducer_ = std::make_shared<distributed_detail::Reducer>(params, group_, options_);
}

DistributedDataParallel::~DistributedDataParallel() = default;

void DistributedDataParallel::sync_buffers() {
  std::vector<Tensor> buffers;
  for (const auto& [n, t] : module().named_buffers()) buffers.push_back(t);
  broadcast_coalesced(*group_, buffers, 0);
}

Value DistributedDataParallel::forward_value(const Value& input) {
  const bool sync = grad_enabled() && require_backward_grad_sync_;
  if (sync) reducer_->check_prior_reduction_finished();
  if (options_.broadcast_buffers && module().is_training() && group_->size() > 1) sync_buffers();
  Value out = module().forward_value(move_to(input, device_));
  if (*options_.output_device != device_) out = move_to(out, *options_.output_device);
  if (sync) reducer_->prepare_for_backward(out);
  return out;
}

Tensor DistributedDataParallel::forward(const Tensor& x) {
  return forward_value(Value(x)).tensor();
}

std::string DistributedDataParallel::repr() const {
  return "DistributedDataParallel(\n  (module): " + module().repr() + "\n)";
}

DistributedDataParallel::NoSyncGuard::NoSyncGuard(DistributedDataParallel& ddp)
    : ddp_(ddp), previous_(ddp.require_backward_grad_sync_) {
  ddp_.require_backward_grad_sync_ = false;
}

DistributedDataParallel::NoSyncGuard::~NoSyncGuard() {
  ddp_.require_backward_grad_sync_ = previous_;
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_parameter_names() const {
  return reducer_->bucket_names();
}

BackwardTrace DistributedDataParallel::backward_trace() const { return reducer_->trace(); }

}  // namespace dpe
