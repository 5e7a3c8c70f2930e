// One training step of a dpe model traced on host devices (engine/trace/op_trace.h), as the cost
// model's input: DataParallel's step on N devices (replicate, scatter, forward, gather, loss,
// backward, reduce-add, optimizer on device 0) and one DDP rank's step (its forward, backward with
// the bucket launches, optimizer). The work is skipped (execute = false): shapes, the schedule and
// the allocators' peaks are real, values are not. See docs/cluster_model.md.
//
// Threading contract: called by one thread that is not a device worker; sets the host devices.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/device/device.h"
#include "engine/device/memory_stats.h"
#include "engine/trace/op_trace.h"
#include "models/gpt.h"

namespace dpe::sim {

struct StepSpec {
  std::string model = "gpt2";    // a models::make_model name
  // Language models: a GPT of this configuration instead of `model`'s (which must name a GPT);
  // block_size 0: the configuration's. //tools:sim's --layers, --d-model, --heads, --vocab.
  std::optional<models::GptConfig> gpt;
  int64_t batch_per_device = 4;  // sequences or images per GPU
  int64_t seq = 1024;            // language models: tokens per sequence
  int64_t image = 224;           // image models: H = W
  // DataParallel: the loss on every replica and only scalars gathered (dpe's parallel_criterion;
  // what Hugging Face models do, computing their loss in forward) instead of on device 0.
  bool loss_on_replicas = false;
  // With loss_on_replicas: the replicas' outputs (logits) are gathered on device 0 too, without a
  // gradient (Hugging Face's Trainer under DataParallel gathers the whole output dict).
  bool gather_outputs = false;
  std::string optimizer;  // "adamw", "sgd" (momentum 0.9); "": adamw for language models, else sgd
  // DataParallel on 2+ devices: device 0's chunk (Balanced-DataParallel's gpu0_bsz), the others
  // keeping batch_per_device each; -1: every device gets batch_per_device (torch.chunk's split).
  int64_t gpu0_batch = -1;
  // DDP: gradient_as_bucket_view (false: PyTorch's default, the gradients copied into and out of
  // the buckets; true: the bench's default, where linear layers write straight into them).
  bool gradient_as_bucket_view = false;
  // DDP: bucket_cap_mb and the first bucket's cap (PyTorch's defaults).
  double bucket_cap_mb = 25.0;
  double first_bucket_mb = 1.0;
};

// The samples DataParallel's step on `devices` devices takes: batch_per_device on each, or
// gpu0_batch on device 0 and batch_per_device on the others.
int64_t dp_global_batch(const StepSpec& spec, int devices);

struct TracedStep {
  std::vector<TraceEvent> events;
  std::vector<Device> devices;
  std::vector<int64_t> peak_bytes;                        // per device, during the step
  std::vector<MemoryStats::ByCategory> peak_by_category;  // what each peak held
  int64_t param_bytes = 0;
  int64_t param_tensors = 0;
};

// Makes host:0..n-1 the host devices, one compute thread each, as //tools:bench runs them.
void set_host_devices(int n);

// DataParallel on `devices` host devices (1: the plain single-device step), after one untraced
// warm-up step that creates the optimizer's state.
TracedStep trace_dp_step(const StepSpec& spec, int devices);
// One rank of DistributedDataParallel (a one-rank group: the bucket launches are recorded, the
// all-reduces are the replay's to cost), after a warm-up step.
TracedStep trace_ddp_step(const StepSpec& spec);

}  // namespace dpe::sim
