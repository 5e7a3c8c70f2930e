#include "tools/cost_model/step_trace.h"

#include <functional>
#include <memory>

#include "engine/autograd/engine.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/ops.h"
#include "engine/backend/host/host_devices.h"
#include "engine/core/error.h"
#include "engine/device/memory_category.h"
#include "engine/device/runtime.h"
#include "engine/distributed/distributed_data_parallel.h"
#include "engine/distributed/process_group.h"
#include "engine/nn/fusion.h"
#include "engine/optim/adam.h"
#include "engine/optim/sgd.h"
#include "engine/parallel/data_parallel.h"
#include "models/by_name.h"
#include "models/gpt.h"

namespace dpe::sim {

namespace {

// Unfused traces: the steps are traced with module fusion off (engine/nn/fusion.h). The cluster
// model prices GPUs running PyTorch's eager ops, which do not fuse batch norm with ReLU, and dpe's
// CUDA backend does not fuse them either.

// The group of a single rank: its collectives leave the data as it is, which is what a reduction
// over one rank does. The trace records where the DDP reducer launches them.
class OneRankGroup final : public distributed::ProcessGroup {
 public:
  OneRankGroup() : ProcessGroup(0, 1) { start_communication(); }
  ~OneRankGroup() override { stop_communication(); }
  std::string backend() const override { return "one-rank"; }

 protected:
  void run_all_reduce(Tensor&, distributed::ReduceOp) override {}
  void run_broadcast(Tensor&, int) override {}
  void run_all_gather(const Tensor& input, Tensor& gathered) override {
    gathered.copy_(input.reshape(gathered.shape()));
  }
  void run_barrier() override {}
};

struct Batch {
  Tensor input, target;
};

Batch make_batch(const StepSpec& spec, int64_t n, Device device) {
  Batch b;
  if (models::is_language_model(spec.model)) {
    const Shape s{n, spec.seq};
    b.input = Tensor::zeros(s, DType::kInt64, device);
    b.target = Tensor::zeros(s, DType::kInt64, device);
  } else {
    b.input = Tensor::zeros(Shape{n, 3, spec.image, spec.image}, DType::kFloat32, device);
    if (spec.model == "mlp" || spec.model == "convnet") {
      b.input = Tensor::zeros(Shape{n, 1, 28, 28}, DType::kFloat32, device);
    }
    if (spec.model == "toy") b.input = Tensor::zeros(Shape{n, 10}, DType::kFloat32, device);
    b.target = Tensor::zeros(Shape{n}, DType::kInt64, device);
  }
  return b;
}

// The loss, tagged as DataParallel's loss phase (its nodes too, for backward).
Tensor criterion(const StepSpec& spec, const Tensor& out, const Tensor& target) {
  MemoryCategoryScope loss(MemoryCategory::kOutputGradients);
  if (models::is_language_model(spec.model)) return models::lm_loss(out, target);
  if (spec.model == "toy")
    return ops::mse_loss(out, Tensor::zeros(out.shape(), DType::kFloat32, out.device()));
  return ops::cross_entropy(out, target);
}

std::unique_ptr<optim::Optimizer> make_optimizer(const StepSpec& spec, std::vector<Tensor> params) {
  std::string name = spec.optimizer;
  if (name.empty()) name = models::is_language_model(spec.model) ? "adamw" : "sgd";
  if (name == "adamw") {
    optim::AdamWOptions o;
    return std::make_unique<optim::AdamW>(std::move(params), o);
  }
  DPE_CHECK(name == "sgd", "sim: unknown optimizer '" << name << "' (adamw, sgd)");
  optim::SgdOptions o;
  o.lr = 0.01f;
  o.momentum = 0.9f;
  return std::make_unique<optim::SGD>(std::move(params), o);
}

// Runs `fn` under a trace that skips the work and returns the trace's events (the trace ends
// whether `fn` returns or throws).
std::vector<TraceEvent> without_the_work(const std::function<void()>& fn) {
  OpTrace trace({/*execute=*/false});
  fn();
  return trace.stop();
}

// Runs `step` once untraced (state, caches), then once traced; records the devices' peaks.
TracedStep traced(const std::vector<Device>& devices, const std::function<void()>& step) {
  Runtime& rt = Runtime::get();
  without_the_work(step);  // warm-up: the optimizer's state exists before the measured step
  for (Device d : devices) rt.context(d).allocator().reset_peak();
  TracedStep out;
  out.events = without_the_work(step);
  out.devices = devices;
  for (Device d : devices) {
    const MemoryStats m = rt.context(d).allocator().stats();
    out.peak_bytes.push_back(m.peak_bytes);
    out.peak_by_category.push_back(m.at_peak_by_category);
  }
  return out;
}

// The model on `device`; initialisation's kernels are not worth running here.
std::shared_ptr<Module> build_model(const StepSpec& spec, Device device) {
  Generator gen(0);
  std::shared_ptr<Module> model;
  without_the_work([&] {
    model = spec.gpt ? std::make_shared<models::Gpt>(*spec.gpt, gen)
                     : models::make_model(spec.model, gen);
    model = model->copy_to(device);
  });
  return model;
}

void count_params(const Module& m, TracedStep& out) {
  for (const Tensor& p : m.parameters()) {
    out.param_bytes += static_cast<int64_t>(p.nbytes());
    ++out.param_tensors;
  }
}

}  // namespace

void set_host_devices(int n) {
  HostDeviceOptions o;
  o.count = n;
  o.compute_threads = 1;
  dpe::set_host_devices(o);
}

int64_t dp_global_batch(const StepSpec& spec, int devices) {
  if (devices < 2 || spec.gpu0_batch < 0) return spec.batch_per_device * devices;
  return spec.gpu0_batch + spec.batch_per_device * (devices - 1);
}

TracedStep trace_dp_step(const StepSpec& spec, int n) {
  DPE_CHECK(n >= 1, "sim: need at least one device, got " << n);
  DPE_CHECK(spec.batch_per_device >= 1, "sim: batch per device must be positive");
  DPE_CHECK(spec.gpu0_batch >= -1, "sim: device 0's batch must be >= 0, got " << spec.gpu0_batch);
  const nn::FusionScope unfused(false);  // "unfused traces", above
  set_host_devices(n);
  const auto devices = Runtime::get().devices(DeviceType::kHost);
  const std::shared_ptr<Module> model = build_model(spec, devices[0]);
  auto optimizer = make_optimizer(spec, model->parameters());
  const Batch batch = make_batch(spec, dp_global_batch(spec, n), devices[0]);
  DataParallelOptions dp_options;
  dp_options.device_ids = devices;
  if (n > 1 && spec.gpu0_batch >= 0) {
    // Integral weights in samples: weighted_chunk_sizes gives exactly these chunks.
    dp_options.chunk_weights.assign(static_cast<size_t>(n),
                                    static_cast<double>(spec.batch_per_device));
    dp_options.chunk_weights[0] = static_cast<double>(spec.gpu0_batch);
  }
  DataParallel dp(model, dp_options);
  auto step = [&] {
    Tensor loss;
    if (n == 1) {
      loss = criterion(spec, (*model)(batch.input), batch.target);
    } else if (spec.loss_on_replicas) {
      const ReplicaOutputs outs = dp.forward_replicas(batch.input);
      loss = parallel_criterion(
          outs, batch.target, 0,
          [&](const Tensor& o, const Tensor& t) { return criterion(spec, o, t); }, devices[0]);
      if (spec.gather_outputs) {
        NoGradGuard no_grad;
        MemoryCategoryScope gathered(MemoryCategory::kOutputs);  // DataParallel's gather phase
        std::vector<Tensor> parts;
        for (const Value& v : outs.outputs) parts.push_back(v.tensor());
        ops::cat(parts, 0, &devices[0]);
      }
    } else {
      loss = criterion(spec, dp(batch.input), batch.target);
    }
    backward(loss);
    optimizer->step();
    optimizer->zero_grad();
  };
  TracedStep out = traced(devices, step);
  count_params(*model, out);
  return out;
}

TracedStep trace_ddp_step(const StepSpec& spec) {
  const nn::FusionScope unfused(false);  // "unfused traces", above
  set_host_devices(1);
  const Device device = Runtime::get().devices(DeviceType::kHost).at(0);
  const std::shared_ptr<Module> model = build_model(spec, device);
  auto optimizer = make_optimizer(spec, model->parameters());
  const Batch batch = make_batch(spec, spec.batch_per_device, device);
  // The launch points the replay needs are the GPUs': each bucket as soon as it is ready.
  DistributedDataParallelOptions ddp_options;
  ddp_options.overlap = DistributedDataParallelOptions::Overlap::kDuringBackward;
  ddp_options.gradient_as_bucket_view = spec.gradient_as_bucket_view;
  ddp_options.bucket_cap_mb = spec.bucket_cap_mb;
  ddp_options.first_bucket_mb = spec.first_bucket_mb;
  DistributedDataParallel ddp(model, std::make_shared<OneRankGroup>(), ddp_options);
  auto step = [&] {
    backward(criterion(spec, ddp(batch.input), batch.target));
    optimizer->step();
    optimizer->zero_grad();
  };
  TracedStep out = traced({device}, step);
  count_params(*model, out);
  return out;
}

}  // namespace dpe::sim
