#include "engine/parallel/data_parallel.h"

#include <set>

#include "engine/autograd/ops.h"
#include "engine/core/error.h"
#include "engine/device/runtime.h"
#include "engine/parallel/gather.h"
#include "engine/parallel/parallel_apply.h"
#include "engine/parallel/replicate.h"
#include "engine/parallel/scatter.h"

namespace dpe {

namespace {

std::vector<Device> non_empty(std::vector<Device> device_ids) {
  DPE_CHECK(!device_ids.empty(), "DataParallel: device_ids must not be empty");
  return device_ids;
}

std::vector<Device> default_devices() {
  Runtime& rt = Runtime::get();
  const auto cuda = rt.devices(DeviceType::kCuda);
  return cuda.empty() ? rt.devices(DeviceType::kHost) : cuda;
}

}  // namespace

DataParallel::DataParallel(std::shared_ptr<Module> module, std::vector<Device> device_ids,
                           std::optional<Device> output_device, int64_t dim)
    : DataParallel(std::move(module),
                   DataParallelOptions{non_empty(std::move(device_ids)), output_device, dim, {}}) {}

DataParallel::DataParallel(std::shared_ptr<Module> module, DataParallelOptions options)
    : module_(std::move(module)), options_(std::move(options)) {
  DPE_CHECK(module_ != nullptr, "DataParallel: the module is null");
  register_module("module", module_);
  if (options_.device_ids.empty()) options_.device_ids = default_devices();
  std::set<Device> seen;
  for (Device d : options_.device_ids) {
    DPE_CHECK(seen.insert(d).second, "DataParallel: device_ids contains " << d << " twice");
    DPE_CHECK(d.type() == options_.device_ids[0].type(),
              "DataParallel: device_ids mixes " << options_.device_ids[0] << " and " << d);
    Runtime::get().context(d);  // throws naming an unknown device
  }
  // As PyTorch: with one device id the module is moved there. With several it may still be
  // anywhere (DataParallel(model, ids) then .to(device) is PyTorch's idiom): forward checks it is
  // on device_ids[0].
  if (options_.device_ids.size() == 1) module_->to(options_.device_ids[0]);
  if (!options_.output_device) options_.output_device = options_.device_ids[0];
  Runtime::get().context(*options_.output_device);
  DPE_CHECK(
      options_.chunk_weights.empty() || options_.chunk_weights.size() == options_.device_ids.size(),
      "DataParallel: " << options_.chunk_weights.size() << " chunk weights for "
                       << options_.device_ids.size() << " devices");
}

// PyTorch's check at the start of DataParallel.forward, with its message.
void DataParallel::check_module_device() const {
  const Device src = options_.device_ids[0];
  auto check = [&](const std::vector<std::pair<std::string, Tensor>>& tensors) {
    for (const auto& [name, t] : tensors) {
      DPE_CHECK(t.device() == src,
                "module must have its parameters and buffers on device "
                    << src << " (device_ids[0]) but found one of them on device: " << t.device());
    }
  };
  check(module_->named_parameters());
  check(module_->named_buffers());
}

ReplicaOutputs DataParallel::forward_replicas(const Value& input) {
  check_module_device();
  std::vector<int64_t> weighted;
  const std::vector<int64_t>* sizes = nullptr;
  if (!options_.chunk_weights.empty()) {
    const int64_t n = batch_size_of(input, options_.dim);
    if (n > 0) {
      weighted = weighted_chunk_sizes(n, options_.chunk_weights);
      sizes = &weighted;
    }
  }
  Scattered sc = scatter(input, options_.device_ids, options_.dim, sizes, profiler_);
  ReplicaOutputs out;
  out.devices = sc.devices;
  out.sizes = sc.sizes;
  if (options_.device_ids.size() == 1) {
    // One device: no replicate, no gather; the module runs directly (on the caller's thread).
    StepProfiler::Scope scope(profiler_, sc.devices[0], Phase::kForward);
    out.outputs.push_back(module_->forward_value(sc.chunks[0]));
    return out;
  }
  auto replicas = replicate(*module_, sc.devices, profiler_);
  out.outputs = parallel_apply(replicas, sc.chunks, sc.devices, profiler_);
  return out;
}

Value DataParallel::forward_value(const Value& input) {
  ReplicaOutputs r = forward_replicas(input);
  if (options_.device_ids.size() == 1) return r.outputs[0];
  return gather(r.outputs, *options_.output_device, options_.dim, profiler_);
}

Tensor DataParallel::forward(const Tensor& x) { return forward_value(Value(x)).tensor(); }

std::string DataParallel::repr() const {
  return "DataParallel(\n  (module): " + module_->repr() + "\n)";
}

Tensor parallel_criterion(const ReplicaOutputs& outputs, const Tensor& target, int64_t dim,
                          const Criterion& criterion, Device output_device,
                          StepProfiler* profiler) {
  DPE_CHECK(!outputs.outputs.empty(), "parallel_criterion: no replica outputs");
  std::vector<Tensor> targets;
  if (outputs.sizes.empty()) {
    targets.assign(outputs.outputs.size(), target);
  } else {
    Scattered st = scatter(Value(target), outputs.devices, dim, &outputs.sizes);
    for (const Value& v : st.chunks) targets.push_back(v.tensor());
  }
  // The losses run concurrently, one per device, like the forward.
  std::vector<Tensor> losses(outputs.outputs.size());
  const auto errors = run_on_workers("parallel_criterion", outputs.devices, [&](size_t k) {
    StepProfiler::Scope scope(profiler, outputs.devices[k], Phase::kLoss);
    losses[k] = criterion(outputs.outputs[k].tensor(), targets[k]);
  });
  for (size_t k = 0; k < errors.size(); ++k) {
    DPE_CHECK(errors[k].empty(), "parallel_criterion: replica " << k << " on " << outputs.devices[k]
                                                                << " failed: " << errors[k]);
  }
  StepProfiler::Scope scope(profiler, output_device, Phase::kGather);
  int64_t total = 0;
  for (int64_t s : outputs.sizes) total += s;
  Tensor sum;
  for (size_t k = 0; k < losses.size(); ++k) {
    const float w = outputs.sizes.empty()
                        ? 1.0f / static_cast<float>(losses.size())
                        : static_cast<float>(outputs.sizes[k]) / static_cast<float>(total);
    Tensor part = ops::mul_scalar(ops::to(losses[k], output_device), w);
    sum = sum.defined() ? ops::add(sum, part) : part;
  }
  return sum;
}

StateDict strip_prefix(const StateDict& state, const std::string& prefix) {
  StateDict out;
  for (const auto& [k, v] : state) {
    out.emplace_back(k.rfind(prefix, 0) == 0 ? k.substr(prefix.size()) : k, v);
  }
  return out;
}

StateDict add_prefix(const StateDict& state, const std::string& prefix) {
  StateDict out;
  for (const auto& [k, v] : state) out.emplace_back(prefix + k, v);
  return out;
}

}  // namespace dpe
