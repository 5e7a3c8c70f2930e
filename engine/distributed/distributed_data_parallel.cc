// DistributedDataParallel: the checks, the parameter check and broadcast at construction, the
// forward; the gradient side is the Reducer (reducer.h).
#include "engine/distributed/distributed_data_parallel.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <thread>

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/ops.h"
#include "engine/core/error.h"
#include "engine/device/runtime.h"
#include "engine/distributed/broadcast_packed.h"
#include "engine/distributed/distributed.h"
#include "engine/distributed/verify_params.h"

namespace dpe {

namespace {

// Moves every tensor in `v` that is not on `device` there (ops::to records autograd, so gradients
// flow back to the input's device).
Value move_to(const Value& v, Device device) {
  return v.map_tensors([device](const Tensor& t) -> Value {
    return t.defined() && t.device() != device ? Value(ops::to(t, device)) : Value(t);
  });
}

distributed::ReducerOptions reducer_options(const DistributedDataParallelOptions& o, bool overlap) {
  distributed::ReducerOptions r;
  r.bucket_cap_mb = o.bucket_cap_mb;
  r.first_bucket_mb = o.first_bucket_mb;
  r.find_unused_parameters = o.find_unused_parameters;
  r.gradient_as_bucket_view = o.gradient_as_bucket_view;
  r.overlap = overlap;
  return r;
}

}  // namespace

bool overlap_during_backward(DistributedDataParallelOptions::Overlap overlap, bool host_module,
                             bool waits_spin, int local_ranks, int threads_per_rank, int cores) {
  using Overlap = DistributedDataParallelOptions::Overlap;
  if (overlap != Overlap::kAuto) return overlap == Overlap::kDuringBackward;
  return !(host_module && waits_spin && local_ranks * threads_per_rank >= cores);
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
  // A module whose parameters span devices (model parallelism inside each rank, PyTorch's
  // is_multi_device_module): no device_ids or output_device; inputs go to the device of its first
  // parameter, the output stays where the module leaves it, buckets never mix devices.
  std::set<Device> devices;
  for (const auto& [name, t] : module->named_parameters()) devices.insert(t.device());
  multi_device_ = devices.size() > 1;
  if (multi_device_) {
    std::ostringstream list;
    for (Device d : devices) list << (d == *devices.begin() ? "" : ", ") << d;
    DPE_CHECK(options_.device_ids.empty() && !options_.output_device,
              "DistributedDataParallel: device_ids and output_device only work with single-device "
              "modules, but got device_ids of "
                  << options_.device_ids.size() << " device(s) and module parameters on {"
                  << list.str() << "}");
  } else {
    if (!options_.device_ids.empty()) device_ = options_.device_ids[0];
    auto check = [&](const std::vector<std::pair<std::string, Tensor>>& tensors) {
      for (const auto& [name, t] : tensors) {
        DPE_CHECK(t.device() == device_,
                  "DistributedDataParallel: module must have its parameters and buffers on "
                  "device "
                      << device_ << " but found " << name << " on device: " << t.device());
      }
    };
    check(module->named_parameters());
    check(module->named_buffers());
    if (!options_.output_device) options_.output_device = device_;
  }
  DPE_CHECK(
      options_.bucket_cap_mb > 0,
      "DistributedDataParallel: bucket_cap_mb must be positive, got " << options_.bucket_cap_mb);
  DPE_CHECK(options_.first_bucket_mb > 0,
            "DistributedDataParallel: first_bucket_mb must be positive, got "
                << options_.first_bucket_mb);
  const auto params = module->named_parameters();
  distributed::verify_params_across_processes(*group_, params, device_);
  std::vector<Tensor> state;
  for (const auto& [n, t] : params) state.push_back(t);
  for (const auto& [n, t] : module->named_buffers()) state.push_back(t);
  distributed::broadcast_packed(*group_, state, 0);
  // Every rank must start its all-reduces at the same points (a SyncBatchNorm's collective in
  // backward would otherwise meet another rank's bucket): the ranks agree, after if any says so.
  std::set<Device> host_devices;
  for (const auto& [name, t] : params) {
    if (t.device().is_host()) host_devices.insert(t.device());
  }
  int threads = 0;
  for (Device d : host_devices) threads += Runtime::get().context(d).compute_threads();
  const bool mine = overlap_during_backward(
      options_.overlap, !host_devices.empty(), group_->waits_spin(), group_->local_size(),
      std::max(threads, 1), static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  Tensor agreed = Tensor::from_vector(std::vector<int64_t>{mine ? 1 : 0}, Shape{1}).to(device_);
  group_->all_reduce(agreed, distributed::ReduceOp::kMin);
  overlap_ = agreed.to_vector<int64_t>()[0] == 1;
  reducer_ =
      std::make_shared<distributed::Reducer>(params, group_, reducer_options(options_, overlap_));
}

DistributedDataParallel::~DistributedDataParallel() = default;

void DistributedDataParallel::sync_buffers() {
  std::vector<Tensor> buffers;
  for (const auto& [n, t] : module().named_buffers()) buffers.push_back(t);
  distributed::broadcast_packed(*group_, buffers, 0);
}

Value DistributedDataParallel::forward_value(const Value& input) {
  const bool sync = grad_enabled() && require_backward_grad_sync_;
  if (sync) reducer_->check_prior_reduction_finished();
  if (options_.broadcast_buffers && module().is_training() && group_->size() > 1) sync_buffers();
  Value out = module().forward_value(move_to(input, device_));
  if (options_.output_device && *options_.output_device != device_) {
    out = move_to(out, *options_.output_device);
  }
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
