// The measurements behind //tools:bench: training throughput of one configuration — a model, a
// global batch, a device count and a mode (single device, DataParallel, DDP) — as the median of
// timed steps after warm-up, with each device's peak memory and busy share. The Fashion-MNIST
// models (mlp, convnet, resnet-tiny with one input channel) train with SGD on real images;
// resnet50 with SGD on random 3-channel images of `image` x `image` pixels and random labels of
// its 1000 classes; the gpt models with AdamW, clipping at 1.0 and the LM loss (as //tools:train)
// on random tokens of the corpus's 32 000-token vocabulary: a step's work depends on the shapes,
// not on the pixels or the text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/device/device.h"
#include "engine/trace/op_trace.h"

namespace dpe::tools {

struct BenchConfig {
  std::string model = "convnet";  // toy | mlp | convnet | resnet-tiny | resnet50 | gpt-small | gpt2
  std::string mode = "dp";        // single | dp | ddp
  std::string device = "host";    // host | cuda: the devices each run computes on
  std::string ddp_backend = "mpi";  // ddp: gloo (dpe-launch's way) | mpi (mpirun's) | nccl (cuda)
  bool bucket_view = true;          // ddp: gradient_as_bucket_view
  std::string overlap = "auto";     // ddp: when all-reduces start: auto | during | after
  bool zero = false;                // ddp: ZeroRedundancyOptimizer (ZeRO-1) over the optimizer
  // ddp: "" (DDP), or FullyShardedDataParallel's "full" (FULL_SHARD) or "grad-op"
  // (SHARD_GRAD_OP) in its place, each gpt block a unit (other models: one unit)
  std::string sharding;
  // dp: where the loss is computed: "device0" (PyTorch's DataParallel: the outputs gathered on
  // device 0, the loss there) or "replicas" (forward_replicas + parallel_criterion: each device's
  // loss on its own outputs, only scalars gathered; engine/parallel/data_parallel.h)
  std::string dp_loss = "device0";
  bool fuse = true;                 // BatchNorm2d + ReLU (+ MaxPool2d) as one op (nn/fusion.h)
  // Image batches laid out channels last (torch.channels_last): every activation of the
  // convolutional layers stays NHWC on host devices (docs/channels_last.md)
  bool channels_last = false;
  bool activation_checkpointing = false;  // gpt: each block recomputed in backward
  // fp32, or bf16: the forward and loss under autocast(bfloat16) (engine/autograd/autocast.h),
  // float32 parameters, gradients and optimizer state, as PyTorch's CPU autocast
  std::string precision = "fp32";
  // ddp: the comm hook, none (all-reduce) or bf16 / fp16 (PyTorch's compress hooks)
  std::string comm_hook = "none";
  int devices = 1;
  int threads = 1;             // compute threads per device (per DDP rank)
  int64_t global_batch = 256;  // samples (gpt: windows of `context` tokens)
  int64_t context = 0;         // gpt: tokens per window; 0: the model's block size
  int64_t image = 0;           // resnet50: image height and width; 0: 224 (ImageNet's)
  int warmup = 5;
  int steps = 20;
  std::string data_dir;
};

struct DeviceUse {
  std::string device;
  double peak_bytes = 0;
  double busy_share = 0;  // busy time / step time (median step)
};

struct BenchResult {
  BenchConfig config;
  double step_ms = 0;  // median
  double samples_per_second = 0;
  double tokens_per_second = 0;  // gpt: samples/s x context; 0 for the other models
  double gflops = 0;             // achieved, from the model's analytic FLOPs per training sample
  std::vector<DeviceUse> devices;
  std::vector<double> phase_ms;  // dp: device 0's busy time per phase (StepProfiler order)
  // dp: tasks handed to the device workers per step (all devices) and their mean wait from
  // submission to start, in µs (medians over the timed steps; Worker::handoffs)
  double handoffs_per_step = 0;
  double handoff_wait_us = 0;
  bool overlap_during_backward = true;  // ddp: what the ranks' --overlap resolved to
  // ddp: the bytes rank 0 handed to its process group per timed step (the gradient buckets, in
  // their dtype on the wire; ProcessGroup::bytes_submitted)
  double bytes_per_step = 0;
  // The last step's loss (ddp: rank 0's): a setting that must not change the arithmetic
  // (--activation-checkpointing) leaves it as it was
  double final_loss = 0;
  // single and dp on host devices: one more step after the timed ones, traced op by op with
  // each prim's time (engine/trace/op_trace.h): the roofline's input (roofline.h)
  std::vector<TraceEvent> traced_step;
};

// Training FLOPs per sample (forward + both backward products, except the input gradient of
// the first layer, which training does not need), 2 per multiply-add, the products only (the
// convolutions and linear layers; not BatchNorm, activations or pooling). gpt: per window of
// `context` tokens (0: the block size), with the corpus's 32 000-token vocabulary. resnet50: per
// image of `image` x `image` (0: 224; there 2 x 4.09 G forward, torchvision's "4.1 GFLOPS" being
// multiply-adds); resnet-tiny: per 1 x 28 x 28 Fashion-MNIST image.
double training_flops_per_sample(const std::string& model, int64_t context = 0, int64_t image = 0);

// resnet50's image side: `image`, or 224 when it is 0; 0 for the other models. Throws
// dpe::Error when `image` is negative.
int64_t bench_image(const std::string& model, int64_t image);

// The gpt models' window length: `context`, or the model's block size when it is 0; 0 for the
// other models. Throws dpe::Error when `context` exceeds the block size.
int64_t bench_context(const std::string& model, int64_t context);

// The row's name: "single", "dp", "dp+ploss" (the loss on the replicas), "ddp/<backend>",
// "ddp/<backend>+zero" (ZeRO-1), "ddp/<backend>+bf16hook" / "+fp16hook" (a compress hook), or
// "fsdp/<backend>+full" / "fsdp/<backend>+grad-op".
inline std::string mode_label(const BenchConfig& c) {
  if (c.mode == "dp" && c.dp_loss == "replicas") return "dp+ploss";
  if (c.mode != "ddp") return c.mode;
  if (!c.sharding.empty()) return "fsdp/" + c.ddp_backend + "+" + c.sharding;
  const std::string hook = c.comm_hook == "none" ? "" : "+" + c.comm_hook + "hook";
  return "ddp/" + c.ddp_backend + (c.zero ? "+zero" : "") + hook;
}

// Runs single or dp in this process: host devices with config.threads compute threads each, or
// CUDA devices (cuda:0..devices-1; each step ends when every device has finished its work).
BenchResult run_in_process(const BenchConfig& config);

// Runs ddp: re-executes `self_exe` as `devices` worker processes (one host device of
// config.threads compute threads each) over config.ddp_backend — gloo: child processes
// rendezvousing on 127.0.0.1; mpi: started by mpirun — and reads rank 0's result.
BenchResult run_ddp(const BenchConfig& config, const std::string& self_exe);

// The worker side of run_ddp, entered by --ddp-worker: measures, then rank 0 writes its JSON
// result to `result_path`.
void ddp_worker(const BenchConfig& config, const std::string& result_path);

// One SGEMM (n x n x n) on `device` (host: oneDNN on one thread; cuda: cuBLAS); returns GFLOP/s
// of the fastest of `reps`. A peak: on a shared machine a neighbour's burst slows a rep and never
// speeds one up, so the fastest rep is the machine's rate, where a median of a few can be a
// burst's (and a run's steps then above 100% of its "peak").
double measure_gemm_gflops(int64_t n, int reps, Device device = Device(),
                           DType dtype = DType::kFloat32);

}  // namespace dpe::tools
