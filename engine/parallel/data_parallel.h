// DataParallel: PyTorch's nn.DataParallel(module, device_ids, output_device, dim) on dpe devices.
//
// Design note "parameter server": every forward replicates the module from device_ids[0] to the
// devices that get a chunk, scatters the batch along `dim`, runs one worker per device, and
// gathers the outputs on output_device. Backward sends each chunk's gradient to its device, runs
// the replicas' backward concurrently, and sums (not averages) their parameter gradients into the
// original parameters on device_ids[0]. Device 0 therefore holds the gathered outputs, the loss
// and every gradient, and does the reduce-add and the optimizer step alone: the imbalance that
// StepProfiler measures. Two ways out beyond PyTorch: `chunk_weights` gives device 0 a smaller
// share of the batch, and forward_replicas + parallel_criterion compute the loss on every device
// so only scalars are gathered.
//
// As PyTorch, the module may be anywhere when it is wrapped (with one device id it is moved
// there): to(device) on the wrapper moves the module (Module::to moves every child), and forward
// throws, naming device_ids[0] and the device found, when a parameter or buffer is not on
// device_ids[0] (PyTorch's message, from torch/nn/parallel/data_parallel.py).
//
// Threading contract: forward is called by one thread (not a device worker); it blocks until all
// replicas have finished.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/nn/module.h"
#include "engine/parallel/step_profiler.h"

namespace dpe {

struct DataParallelOptions {
  std::vector<Device> device_ids;       // empty: every device of the default backend
  std::optional<Device> output_device;  // default: device_ids[0]
  int64_t dim = 0;
  // Relative share of the batch per device (e.g. {0.5, 1, 1}); empty: torch.chunk's even split.
  std::vector<double> chunk_weights;
};

// The replicas' outputs before gathering, with where each chunk ran and its size.
struct ReplicaOutputs {
  std::vector<Value> outputs;
  std::vector<Device> devices;
  std::vector<int64_t> sizes;
};

class DataParallel : public Cloneable<DataParallel> {
 public:
  explicit DataParallel(std::shared_ptr<Module> module, DataParallelOptions options = {});
  DataParallel(std::shared_ptr<Module> module, std::vector<Device> device_ids,
               std::optional<Device> output_device = std::nullopt, int64_t dim = 0);

  Tensor forward(const Tensor& x) override;
  Value forward_value(const Value& input) override;
  // Scatter, replicate and apply, without the gather (for parallel_criterion).
  ReplicaOutputs forward_replicas(const Value& input);
  std::string repr() const override;

  const std::vector<Device>& device_ids() const { return options_.device_ids; }
  Device output_device() const { return *options_.output_device; }
  int64_t dim() const { return options_.dim; }
  // Records replicate/scatter/forward/gather/reduce-add into `profiler` (null: off).
  void set_profiler(StepProfiler* profiler) { profiler_ = profiler; }

 private:
  void check_module_device() const;

  std::shared_ptr<Module> module_;
  DataParallelOptions options_;
  StepProfiler* profiler_ = nullptr;
};

// Computes `criterion(output_k, target_k)` on each replica's device concurrently and returns
// sum_k (n_k / N) * loss_k on `output_device`: equal to the criterion of the gathered output for
// mean-reduced losses, while only scalars travel to device 0.
using Criterion = std::function<Tensor(const Tensor& output, const Tensor& target)>;
Tensor parallel_criterion(const ReplicaOutputs& outputs, const Tensor& target, int64_t dim,
                          const Criterion& criterion, Device output_device,
                          StepProfiler* profiler = nullptr);

// Moves a checkpoint between a wrapped and an unwrapped model (seed 002, point 4):
// strip_prefix drops a leading "module." from every key that has it, add_prefix adds it.
StateDict strip_prefix(const StateDict& state, const std::string& prefix = "module.");
StateDict add_prefix(const StateDict& state, const std::string& prefix = "module.");

}  // namespace dpe
