// ProcessGroup, Work and WorkQueue: see the design note "one communication thread".
#include "engine/distributed/process_group.h"

#include <cstdlib>

#include "engine/core/error.h"
#include "engine/distributed/watchdog.h"

namespace dpe {
namespace distributed {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "?";
}

void Work::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool Work::is_completed() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void Work::finish(std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(mu_);
  error_ = std::move(error);
  done_ = true;
  cv_.notify_all();
}

WorkQueue::WorkQueue(std::string name) : name_(std::move(name)) {
  thread_ = std::thread([this] { loop(); });
}

WorkQueue::~WorkQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  thread_.join();
}

namespace {

// Runs fn; what it throws is returned for the Work, not propagated.
std::exception_ptr run_catching(const std::function<void()>& fn) {
  try {
    fn();
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

}  // namespace

std::shared_ptr<Work> WorkQueue::push_locked(std::function<void()> fn) {
  DPE_CHECK(!stop_, name_ << ": work submitted after shutdown");
  auto work = std::make_shared<Work>();
  queue_.emplace_back(std::move(fn), work);
  cv_.notify_all();
  return work;
}

std::shared_ptr<Work> WorkQueue::submit(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  return push_locked(std::move(fn));
}

std::shared_ptr<Work> WorkQueue::run_here_or_submit(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || running_ || !queue_.empty()) return push_locked(std::move(fn));
    running_ = true;
  }
  const std::exception_ptr error = run_catching(fn);
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_ = false;
    cv_.notify_all();
  }
  auto work = std::make_shared<Work>();
  work->finish(error);
  return work;
}

void WorkQueue::loop() {
  while (true) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !running_ && (stop_ || !queue_.empty()); });
    if (queue_.empty()) return;  // stop_ and drained
    auto item = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    lock.unlock();
    const std::exception_ptr error = run_catching(item.first);
    lock.lock();
    running_ = false;
    lock.unlock();
    item.second->finish(error);
  }
}

ProcessGroup::ProcessGroup(int rank, int size) : rank_(rank), size_(size) {
  DPE_CHECK(size >= 1, "ProcessGroup: world size " << size << " must be at least 1");
  DPE_CHECK(rank >= 0 && rank < size,
            "ProcessGroup: rank " << rank << " is outside 0.." << size - 1);
}

ProcessGroup::~ProcessGroup() { stop_communication(); }

void ProcessGroup::set_watchdog(std::shared_ptr<Watchdog> watchdog) {
  watchdog_ = std::move(watchdog);
}

int ProcessGroup::local_size() const {
  const char* v = std::getenv("LOCAL_WORLD_SIZE");
  if (v == nullptr || *v == '\0') return size_;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return *end == '\0' && n >= 1 && n <= size_ ? static_cast<int>(n) : size_;
}

void ProcessGroup::start_communication() {
  queue_ = std::make_unique<WorkQueue>(backend() + " process group (rank " + std::to_string(rank_) +
                                       ")");
}

void ProcessGroup::stop_communication() { queue_.reset(); }

std::shared_ptr<Work> ProcessGroup::enqueue(const std::string& op, std::function<void()> fn,
                                            bool here) {
  DPE_CHECK(queue_ != nullptr, backend() << " " << op << " (rank " << rank_
                                         << "): the process group has no communication thread");
  auto guarded = [this, op, fn = std::move(fn)] {
    {
      std::lock_guard<std::mutex> lock(broken_mu_);
      DPE_CHECK(broken_.empty(), backend() << " " << op << " (rank " << rank_
                                           << "): the process group failed earlier: " << broken_);
    }
    // Begun before and ended after describe_failure, so the watchdog sees the collective in
    // flight while the failure is described.
    struct Tracked {
      Watchdog* w;
      int64_t seq;
      ~Tracked() {
        if (w != nullptr) w->end(seq);
      }
    } tracked{watchdog_.get(), ++seq_};
    if (tracked.w != nullptr) tracked.w->begin(tracked.seq, op);
    try {
      fn();
    } catch (const std::exception& e) {
      const Failure failure = describe_failure(op, e);
      if (!failure.breaks) throw;
      {
        std::lock_guard<std::mutex> lock(broken_mu_);
        if (broken_.empty()) broken_ = failure.message.empty() ? e.what() : failure.message;
      }
      if (failure.message.empty()) throw;
      throw Error(failure.message);
    }
  };
  return here ? queue_->run_here_or_submit(std::move(guarded)) : queue_->submit(std::move(guarded));
}

ProcessGroup::Failure ProcessGroup::describe_failure(const std::string&, const std::exception&) {
  return Failure{};
}

namespace {

template <class T>
void scale_values(T* values, int64_t n, float factor) {
  for (int64_t i = 0; i < n; ++i) values[i] = from_float<T>(to_float(values[i]) * factor);
}

}  // namespace

void ProcessGroup::divide_by_size(Tensor& tensor) const {
  const float inv = 1.0f / static_cast<float>(size_);
  const int64_t n = tensor.numel();
  switch (tensor.dtype()) {
    case DType::kFloat32: return scale_values(tensor.data<float>(), n, inv);
    case DType::kBFloat16: return scale_values(tensor.data<BFloat16>(), n, inv);
    case DType::kFloat16: return scale_values(tensor.data<Float16>(), n, inv);
    case DType::kInt64: break;  // refused by start_all_reduce
  }
  DPE_THROW("divide_by_size: op avg needs a floating dtype, got " << dtype_name(tensor.dtype()));
}

void ProcessGroup::check_tensor(const char* op, const Tensor& t) const {
  check_collective_tensor(op, t, rank_);
}

void ProcessGroup::all_reduce(Tensor& tensor, ReduceOp op) { all_reduce_async(tensor, op)->wait(); }

std::shared_ptr<Work> ProcessGroup::all_reduce_async(Tensor tensor, ReduceOp op) {
  return start_all_reduce(std::move(tensor), op, false);
}

std::shared_ptr<Work> ProcessGroup::all_reduce_here(Tensor tensor, ReduceOp op) {
  return start_all_reduce(std::move(tensor), op, true);
}

std::shared_ptr<Work> ProcessGroup::start_all_reduce(Tensor tensor, ReduceOp op, bool here) {
  check_tensor("all_reduce", tensor);
  DPE_CHECK(!here || tensor.device().is_host(), "all_reduce (rank "
                                                    << rank_
                                                    << "): all_reduce_here takes host tensors, "
                                                       "got one on "
                                                    << tensor.device());
  DPE_CHECK(is_floating_point(tensor.dtype()) || op != ReduceOp::kAvg,
            "all_reduce (rank " << rank_ << "): op avg needs a floating dtype, got "
                                << dtype_name(tensor.dtype()));
  count(tensor);
  return enqueue(
      std::string("all_reduce(") + reduce_op_name(op) + ")",
      [this, tensor, op]() mutable { run_all_reduce(tensor, op); }, here);
}

void ProcessGroup::broadcast(Tensor& tensor, int root) { broadcast_async(tensor, root)->wait(); }

std::shared_ptr<Work> ProcessGroup::broadcast_async(Tensor tensor, int root) {
  check_tensor("broadcast", tensor);
  DPE_CHECK(root >= 0 && root < size_,
            "broadcast (rank " << rank_ << "): root " << root << " is outside 0.." << size_ - 1);
  count(tensor);
  return enqueue("broadcast(root=" + std::to_string(root) + ")",
                 [this, tensor, root]() mutable { run_broadcast(tensor, root); });
}

void ProcessGroup::all_gather(const Tensor& input, std::vector<Tensor>& outputs) {
  check_tensor("all_gather", input);
  prepare_gather_outputs(input, outputs);
  const int64_t n = input.numel();
  Tensor gathered = Tensor::empty(Shape{n * size_}, input.dtype(), input.device());
  count(input);
  enqueue("all_gather", [this, input, gathered]() mutable {
    run_all_gather(input, gathered);
  })->wait();
  for (int r = 0; r < size_; ++r) {
    outputs[r].copy_(gathered.narrow(0, r * n, n).view(input.shape()));
  }
}

void ProcessGroup::all_gather_into_tensor(Tensor& output, const Tensor& input) {
  check_tensor("all_gather_into_tensor", input);
  check_tensor("all_gather_into_tensor", output);
  DPE_CHECK(output.numel() == input.numel() * size_ && output.dtype() == input.dtype() &&
                output.device() == input.device(),
            "all_gather_into_tensor (rank " << rank_ << "): the output must hold " << size_
                                            << " x the input " << input.str() << ", got "
                                            << output.str());
  count(input);
  enqueue("all_gather_into_tensor", [this, input, output]() mutable {
    run_all_gather(input, output);
  })->wait();
}

void ProcessGroup::reduce_scatter_tensor(Tensor& output, const Tensor& input, ReduceOp op) {
  check_tensor("reduce_scatter_tensor", input);
  check_tensor("reduce_scatter_tensor", output);
  DPE_CHECK(input.dtype() == DType::kFloat32 && output.dtype() == DType::kFloat32,
            "reduce_scatter_tensor (rank " << rank_ << "): expected float32 tensors, got "
                                           << input.str() << " and " << output.str());
  DPE_CHECK(input.numel() == output.numel() * size_ && output.device() == input.device(),
            "reduce_scatter_tensor (rank " << rank_ << "): the input must hold " << size_
                                           << " x the output " << output.str() << ", got "
                                           << input.str());
  count(input);
  enqueue(std::string("reduce_scatter(") + reduce_op_name(op) + ")",
          [this, input, output, op]() mutable { run_reduce_scatter(output, input, op); })
      ->wait();
}

void ProcessGroup::run_reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op) {
  Tensor all = input.clone();
  run_all_reduce(all, op);
  const int64_t n = output.numel();
  output.copy_(all.narrow(0, rank_ * n, n).view(output.shape()));
}

void ProcessGroup::barrier() {
  enqueue("barrier", [this] { run_barrier(); })->wait();
}

void check_collective_tensor(const char* op, const Tensor& t, int rank) {
  DPE_CHECK(t.defined(), op << " (rank " << rank << "): undefined tensor");
  DPE_CHECK(t.device().is_host(), op << " (rank " << rank << "): expected a tensor on a host device"
                                     << " (the gloo backend), got " << t.device());
  DPE_CHECK(t.is_contiguous(),
            op << " (rank " << rank << "): expected a contiguous tensor, got " << t.str());
}

void ProcessGroup::prepare_gather_outputs(const Tensor& input, std::vector<Tensor>& outputs) const {
  if (outputs.empty()) {
    for (int r = 0; r < size_; ++r)
      outputs.push_back(Tensor::empty(input.shape(), input.dtype(), input.device()));
  }
  DPE_CHECK(static_cast<int>(outputs.size()) == size_,
            "all_gather (rank " << rank_ << "): expected " << size_ << " output tensors, got "
                                << outputs.size());
  for (const auto& out : outputs) {
    DPE_CHECK(out.defined() && out.shape() == input.shape() && out.dtype() == input.dtype(),
              "all_gather (rank " << rank_ << "): every output must be shaped like the input "
                                  << input.str() << ", got " << out.str());
  }
}

}  // namespace distributed
}  // namespace dpe
