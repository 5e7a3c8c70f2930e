#include "engine/autograd/engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/backend/dispatch.h"
#include "engine/backend/prims/views.h"
#include "engine/core/error.h"
#include "engine/device/device_guard.h"
#include "engine/device/runtime.h"
#include "engine/device/step_observer.h"
#include "engine/device/worker.h"

namespace dpe {

namespace {

// A mutex that tries for a microsecond before it sleeps, as glibc's adaptive mutexes do.
// GraphTask's lock is taken by the caller and every device's worker around each node, for well
// under a microsecond; std::mutex sleeps in the kernel at the first collision, and the wake-up
// costs more than a small node's whole run. Built on std::mutex so that ThreadSanitizer still sees
// a lock.
class SpinThenSleepMutex {
 public:
  void lock() {
    if (!spin_until([this] { return mu_.try_lock(); }, std::chrono::microseconds(1))) mu_.lock();
  }
  bool try_lock() { return mu_.try_lock(); }
  void unlock() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// Tells the step observer (engine/device/step_observer.h), when one is installed, which backward
// node the calling thread runs and which nodes it feeds, for as long as it runs.
class ObservedNode {
 public:
  explicit ObservedNode(Node* n) : observer_(step_observer()) {
    if (observer_ == nullptr) return;
    std::vector<const void*> next;
    for (const Edge& e : n->next_edges()) {
      if (e.fn) next.push_back(e.fn.get());
    }
    observer_->on_node_begin(n, n->name(), n->device(), next);
  }
  ~ObservedNode() {
    if (observer_ != nullptr) observer_->on_node_end();
  }
  ObservedNode(const ObservedNode&) = delete;
  ObservedNode& operator=(const ObservedNode&) = delete;

 private:
  StepObserver* observer_;
};

struct NodeState {
  int dependencies = 0;
  std::vector<std::vector<Tensor>> pending;  // per input slot: gradients still to be summed
};

// One backward pass: the discovered graph and what has arrived where.
class GraphTask {
 public:
  // One lookup per edge: a node's state is created when it is first seen (a backward runs on
  // every step, and for a small model its bookkeeping costs as much as its arithmetic).
  void discover(const std::vector<Edge>& roots) {
    std::vector<Node*> stack;
    auto visit = [&](Node* n) {
      auto [it, fresh] = state_.try_emplace(n);
      if (fresh) stack.push_back(n);
      return &it->second;
    };
    for (const Edge& e : roots) {
      if (e.fn) visit(e.fn.get());
    }
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      if (std::find(devices_.begin(), devices_.end(), n->device()) == devices_.end()) {
        devices_.push_back(n->device());
      }
      state_[n].pending.resize(n->num_outputs());
      for (const Edge& e : n->next_edges()) {
        if (e.fn) ++visit(e.fn.get())->dependencies;
      }
    }
  }

  bool single_device() const { return devices_.size() <= 1; }
  bool only_device(Device d) const {
    return devices_.empty() || (devices_.size() == 1 && devices_[0] == d);
  }

  // grad into n's slot, after what arrived there before, or `first`, before it (an accumulation
  // offer not taken goes back where it was).
  void add_input(Node* n, uint32_t slot, Tensor grad, bool first = false) {
    NodeState& s = state_[n];
    if (s.pending.size() < n->num_outputs()) s.pending.resize(n->num_outputs());
    auto& pending = s.pending.at(slot);
    pending.insert(first ? pending.begin() : pending.end(), std::move(grad));
  }

  // a + b, laid out as a where a is a channels-last activation (the gradients of a residual
  // block's input are), else contiguous: the elementwise kernel reads both operands and writes
  // the sum in one layout, and gradients may arrive in either (max pooling's channels last, a
  // sum's contiguous). The sum goes into a itself where nothing else holds it (a sum of earlier
  // ones, or a node's own output): the tied embedding of a language model gets two [vocab, d]
  // gradients, and a fresh sum of that size cost an allocation and its page faults every step.
  static Tensor sum_of(Tensor a_in, const Tensor& b_in) {
    const MemoryFormat format = prim::activation_format(a_in);
    const bool in_place = solely_owned(a_in) && a_in.is_contiguous(format);
    const Tensor a = a_in.contiguous(format), b = b_in.contiguous(format);
    Tensor sum = in_place ? a : Tensor::empty(a.shape(), a.dtype(), a.device(), format);
    Tensor fa = prim::dense_view(a), fb = prim::dense_view(b), fs = prim::dense_view(sum);
    dispatch(prim::Add{fa, fb, 1.0f, fs});
    return sum;
  }

  // Sums what arrived for each slot; runs on the node's device.
  std::vector<Tensor> take_inputs(Node* n) {
    std::vector<std::vector<Tensor>> pending;
    {
      std::lock_guard<SpinThenSleepMutex> lock(mu_);
      pending.swap(state_[n].pending);
    }
    std::vector<Tensor> grads(n->num_outputs());
    for (size_t slot = 0; slot < pending.size() && slot < grads.size(); ++slot) {
      for (Tensor& g : pending[slot]) {
        if (!g.defined()) continue;
        if (!grads[slot].defined()) {
          grads[slot] = std::move(g);  // no handle left behind: sum_of may add into it
        } else {
          grads[slot] = sum_of(std::move(grads[slot]), g);
        }
      }
    }
    return grads;
  }

  // Design note "gradient destinations" (node.h): for each next edge into a leaf's accumulator
  // that has a destination, the destination when `n` is the only producer of the leaf's gradient
  // in this backward (its edge is the last one pending and nothing has arrived before it). Empty
  // when there is none.
  std::vector<const GradDestination*> destination_offers(Node* n) {
    std::vector<const GradDestination*> offers;
    const auto& edges = n->next_edges();
    for (size_t i = 0; i < edges.size(); ++i) {
      const auto* acc = dynamic_cast<const AccumulateGrad*>(edges[i].fn.get());
      const GradDestination* d = acc != nullptr ? acc->destination() : nullptr;
      if (d == nullptr) continue;
      std::lock_guard<SpinThenSleepMutex> lock(mu_);
      const NodeState& s = state_[edges[i].fn.get()];
      const bool sole = s.dependencies == 1 && (s.pending.empty() || s.pending[0].empty());
      if (!sole) continue;
      offers.resize(edges.size(), nullptr);
      offers[i] = d;
    }
    return offers;
  }

  // Design note "accumulation offers" (node.h): for each next edge whose slot holds one gradient
  // that nothing else holds, on n's device, that gradient, taken out of the slot until n has run.
  // Empty when there is none.
  std::vector<Tensor> accumulation_offers(Node* n) {
    std::vector<Tensor> offers;
    const auto& edges = n->next_edges();
    std::lock_guard<SpinThenSleepMutex> lock(mu_);
    for (size_t i = 0; i < edges.size(); ++i) {
      if (!edges[i].fn) continue;
      NodeState& s = state_[edges[i].fn.get()];
      const uint32_t slot = edges[i].input_nr;
      if (s.pending.size() <= slot || s.pending[slot].size() != 1) continue;
      Tensor& g = s.pending[slot][0];
      if (!g.defined() || g.device() != n->device() || !is_floating_point(g.dtype()) ||
          !g.is_contiguous() || !solely_owned(g)) {
        continue;
      }
      offers.resize(edges.size());
      offers[i] = std::move(g);
      s.pending[slot].clear();
    }
    return offers;
  }

  // PyTorch's validate_outputs: each floating gradient in its input's dtype (Edge::dtype).
  static void cast_to_input_dtypes(Node* n, std::vector<Tensor>& outs) {
    const auto& edges = n->next_edges();
    for (size_t i = 0; i < outs.size() && i < edges.size(); ++i) {
      Tensor& g = outs[i];
      const DType want = edges[i].dtype;
      if (!edges[i].fn || !g.defined() || g.dtype() == want) continue;
      if (is_floating_point(g.dtype()) && is_floating_point(want)) g = g.to(want);
    }
  }

  // Runs one node and hands its outputs on; returns the nodes that became ready.
  std::vector<Node*> run(Node* n) {
    // The node's inputs summed here and its backward's temporaries count as what its forward made.
    MemoryCategoryScope category(n->memory_category());
    const ObservedNode observed(n);
    std::vector<Tensor> grads = take_inputs(n);
    bool any = false;
    for (const Tensor& g : grads) any = any || g.defined();
    std::vector<Tensor> outs;
    std::vector<Tensor> accumulators;
    if (any) {
      NoGradGuard no_grad;
      const std::vector<const GradDestination*> offers = destination_offers(n);
      DestinationOffers offered(offers.empty() ? nullptr : &offers);
      accumulators = accumulation_offers(n);
      AccumulatorOffers offered_accumulators(accumulators.empty() ? nullptr : &accumulators);
      outs = n->apply(grads);
      cast_to_input_dtypes(n, outs);
    }
    std::vector<Node*> ready;
    std::lock_guard<SpinThenSleepMutex> lock(mu_);
    const auto& edges = n->next_edges();
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& e = edges[i];
      if (!e.fn) continue;
      const bool has_out = i < outs.size() && outs[i].defined();
      if (i < accumulators.size() && accumulators[i].defined() &&
          !(has_out && outs[i].impl() == accumulators[i].impl())) {
        // The offer not taken: back in its slot, first, as it arrived.
        add_input(e.fn.get(), e.input_nr, std::move(accumulators[i]), /*first=*/true);
      }
      if (has_out) add_input(e.fn.get(), e.input_nr, outs[i]);
      if (--state_[e.fn.get()].dependencies == 0) ready.push_back(e.fn.get());
    }
    return ready;
  }

  void run_inline(std::deque<Node*> ready) {
    while (!ready.empty()) {
      Node* n = ready.front();
      ready.pop_front();
      try {
        DeviceGuard guard(&Runtime::get().context(n->device()));
        for (Node* next : run(n)) ready.push_back(next);
      } catch (const std::exception& e) {
        DPE_THROW("backward: " << n->name() << " on " << n->device() << " failed: " << e.what());
      }
    }
  }

  // Runs the graph over the devices' workers; the calling thread runs `home`'s nodes itself while
  // home's worker is idle, since it would otherwise only wait (Worker, "hand-offs").
  void run_on_workers(const std::vector<Node*>& ready, Device home) {
    home_ = home;
    Worker& home_worker = Runtime::get().context(home).worker();
    std::unique_lock<SpinThenSleepMutex> lock(mu_);
    for (Node* n : ready) dispatch_locked(n);
    for (;;) {
      if (!idle_locked()) {
        lock.unlock();
        spin_until([this] { return signals_.load() != 0; }, home_worker.spin());
        lock.lock();
        done_.wait(lock, [this] { return idle_locked(); });
      }
      if (home_ready_.empty()) break;  // nothing outstanding
      std::deque<Node*> local;
      local.swap(home_ready_);
      const int taken = static_cast<int>(local.size());
      signals_.fetch_sub(taken);
      lock.unlock();
      bool ran = true;
      std::string failure;  // the device's own failure (its guard), not a node's: drain has those
      try {
        ran = home_worker.try_run_here([&] { drain(local, home); });
      } catch (const std::exception& e) {
        failure = "backward: on " + home.str() + ": " + e.what();
      }
      lock.lock();
      if (!failure.empty() && error_.empty()) error_ = failure;
      if (!ran) {
        for (Node* n : local) submit_locked(n);
      }
      outstanding_ -= taken;
      if (outstanding_ == 0) signals_.fetch_add(1);
    }
    DPE_CHECK(error_.empty(), error_);
  }

 private:
  // The caller has something to do: nodes of its device are ready, or nothing is outstanding.
  bool idle_locked() const { return !home_ready_.empty() || outstanding_ == 0; }

  // A ready node goes to the caller when it is of the caller's device, else to its device's worker.
  void dispatch_locked(Node* n) {
    if (home_ && n->device() == *home_) {
      ++outstanding_;
      home_ready_.push_back(n);
      signals_.fetch_add(1);
      done_.notify_all();
    } else {
      submit_locked(n);
    }
  }

  // Runs `local`'s nodes on `device` and, in the same run, every node that becomes ready on the
  // same device; nodes of other devices are dispatched. Stops at the first failure (this one's or
  // another device's), leaving it in error_.
  void drain(std::deque<Node*>& local, Device device) {
    while (!local.empty()) {
      Node* current = local.front();
      local.pop_front();
      std::vector<Node*> ready;
      std::string error;  // text only crosses threads, never the exception object
      try {
        ready = run(current);
      } catch (const std::exception& e) {
        error = "backward: " + current->name() + " on " + device.str() + " failed: " + e.what();
      } catch (...) {
        error = "backward: " + current->name() + " on " + device.str() + " failed";
      }
      std::lock_guard<SpinThenSleepMutex> lock(mu_);
      if (!error.empty() && error_.empty()) error_ = error;
      if (!error_.empty()) break;  // this node or another failed: nothing more starts
      for (Node* next : ready) {
        if (next->device() == device) {
          local.push_back(next);
        } else {
          dispatch_locked(next);
        }
      }
    }
  }

  // One hand-off per run of work on a device, not one per node: the task drains `n` and what
  // becomes ready on its device after it. A replica's backward is then one task on its worker.
  void submit_locked(Node* n) {
    ++outstanding_;
    const Device device = n->device();
    Runtime::get().context(device).worker().submit([this, n, device] {
      std::deque<Node*> local{n};
      drain(local, device);
      std::lock_guard<SpinThenSleepMutex> lock(mu_);
      if (--outstanding_ == 0) {
        signals_.fetch_add(1);
        done_.notify_all();
      }
    });
  }

  SpinThenSleepMutex mu_;
  std::condition_variable_any done_;  // the caller's wake-up: idle_locked() may have become true
  int outstanding_ = 0;               // worker tasks and home nodes not finished
  std::optional<Device> home_;        // the caller's device
  std::deque<Node*> home_ready_;      // ready nodes of home_, for the caller
  // Counts the caller's reasons to look (home nodes queued, or nothing outstanding), for it to spin
  // on without the lock before it sleeps.
  std::atomic<int> signals_{0};
  std::string error_;                           // the first node's failure
  std::vector<Device> devices_;                 // those of the graph's nodes, each once
  std::unordered_map<Node*, NodeState> state_;  // every node discovered
};

}  // namespace

void backward(const Tensor& root) {
  DPE_CHECK(root.defined(), "backward: the tensor is undefined");
  DPE_CHECK(root.numel() == 1,
            "grad can be implicitly created only for scalar outputs (got " << root.shape() << ")");
  backward({root}, {Tensor::ones(root.shape(), root.device())});
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads) {
  DPE_CHECK(roots.size() == grads.size(),
            "backward: " << roots.size() << " roots but " << grads.size() << " gradients");
  std::vector<Edge> edges;
  for (size_t i = 0; i < roots.size(); ++i) {
    DPE_CHECK(roots[i].requires_grad(),
              "element " << i << " of tensors does not require grad and does not have a grad_fn");
    DPE_CHECK(grads[i].shape() == roots[i].shape() && grads[i].device() == roots[i].device(),
              "backward: gradient " << grads[i].str() << " does not match root " << roots[i].str());
    edges.push_back(gradient_edge(roots[i]));
  }
  GraphTask task;
  task.discover(edges);
  std::vector<Node*> ready;
  for (size_t i = 0; i < edges.size(); ++i) {
    task.add_input(edges[i].fn.get(), edges[i].input_nr, grads[i]);
  }
  for (const Edge& e : edges) {
    if (std::find(ready.begin(), ready.end(), e.fn.get()) == ready.end())
      ready.push_back(e.fn.get());
  }
  // A worker waiting for tasks queued on itself would deadlock: from a worker, only a graph on
  // that worker's own device can run (inline).
  DeviceContext* here = current_device_context();
  const bool on_worker = here != nullptr && here->worker().on_worker_thread();
  DPE_CHECK(!on_worker || (task.single_device() && task.only_device(here->device())),
            "backward: a graph spanning several devices was differentiated from the worker of "
                << here->device() << "; call backward() from a thread that is not a device worker");
  if (task.single_device()) {
    task.run_inline(std::deque<Node*>(ready.begin(), ready.end()));
  } else {
    task.run_on_workers(ready, edges[0].fn->device());
  }
}

}  // namespace dpe
