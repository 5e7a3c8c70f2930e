// //tools:bench — DataParallel against DDP in one run: for each model, device count and global
// batch, training samples per second (median of timed steps after warm-up; data loading not
// included), speed-up over one device, each device's peak memory and busy share, achieved GFLOP/s
// against the machine's measured single-thread GEMM peak; for the gpt models tokens per second
// too; resnet-tiny on Fashion-MNIST, resnet50 on random 3 x 224 x 224 images (--image-size).
// Prints a table, writes JSON and an SVG plot. Every host device (and every DDP process) computes
// with one thread. Exit codes (tools/common/exit_codes.h): 0 done, 1 a run failed, 2 bad flags or
// DPE_* environment values, an output path that cannot be written or a --data-dir that is not a
// folder, 3 Fashion-MNIST files missing or corrupt.
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "engine/backend/host/host_devices.h"
#include "engine/data/fashion_mnist.h"
#include "engine/device/memory_stats.h"
#include "engine/device/runtime.h"
#include "kernels/host/lowp_gemm.h"
#include "models/by_name.h"
#include "tools/bench_lib/bench_plot.h"
#include "tools/bench_lib/bench_runner.h"
#include "tools/bench_lib/roofline.h"
#include "tools/common/bool_flag.h"
#include "tools/common/devices.h"
#include "tools/common/exit_codes.h"
#include "tools/common/local_ranks.h"
#include "tools/common/output_file.h"
#include "tools/common/paths.h"
#include "tools/common/precision.h"

namespace {

using dpe::tools::BenchConfig;
using dpe::tools::BenchResult;

nlohmann::json roofline_json(const dpe::tools::Roofline& f) {
  nlohmann::json j;
  j["bound_ms"] = f.bound_ms;
  j["compute_bound_ms"] = f.compute_bound_ms;
  j["memory_bound_ms"] = f.memory_bound_ms;
  j["kernel_ms"] = f.kernel_ms;
  j["device"] = f.device;
  j["peak_gflops"] = f.rates.peak_gflops;
  j["memory_gbs"] = f.rates.memory_gbs;
  j["memory_measured_at_bytes"] = f.rates.measured_at;
  j["ops"] = nlohmann::json::array();
  for (const auto& o : f.ops) {
    nlohmann::json op{{"name", o.name},   {"op_class", o.op_class}, {"backward", o.backward},
                      {"calls", o.calls}, {"flops", o.flops},       {"bytes", o.bytes},
                      {"bound_ms", o.bound_ms}};
    if (o.timed) op["measured_ms"] = o.measured_ms;
    j["ops"].push_back(op);
  }
  return j;
}

nlohmann::json to_json(const BenchResult& r, double speedup, double peak_gflops,
                       const dpe::tools::Roofline* roof) {
  nlohmann::json j;
  j["model"] = r.config.model;
  j["mode"] = r.config.mode;
  if (r.config.mode == "ddp") {
    j["ddp_backend"] = r.config.ddp_backend;
    j["gradient_as_bucket_view"] = r.config.bucket_view;
    j["overlap"] = r.config.overlap;
    j["overlap_during_backward"] = r.overlap_during_backward;
    j["zero"] = r.config.zero;
    j["sharding"] = r.config.sharding.empty() ? "none" : r.config.sharding;
    j["comm_hook"] = r.config.comm_hook;
    j["bytes_per_step"] = r.bytes_per_step;  // rank 0's, handed to its process group
  }
  j["fuse"] = r.config.fuse;
  j["channels_last"] = r.config.channels_last;
  j["activation_checkpointing"] = r.config.activation_checkpointing;
  j["precision"] = r.config.precision;
  j["peak_gflops"] = peak_gflops;  // the matrix peak of the row's precision, one thread
  j["final_loss"] = r.final_loss;
  j["devices"] = r.config.devices;
  j["global_batch"] = r.config.global_batch;
  j["step_ms"] = r.step_ms;
  j["samples_per_second"] = r.samples_per_second;
  if (r.tokens_per_second > 0) {
    j["context"] = dpe::tools::bench_context(r.config.model, r.config.context);
    j["tokens_per_second"] = r.tokens_per_second;
  }
  if (const int64_t image = dpe::tools::bench_image(r.config.model, r.config.image); image > 0) {
    j["image"] = image;
  }
  j["speedup_vs_1_device"] = speedup;
  j["gflops"] = r.gflops;
  j["threads"] = r.config.threads;
  j["gflops_share_of_peak"] = r.gflops / (peak_gflops * r.config.devices * r.config.threads);
  if (roof != nullptr) {
    j["roofline"] = roofline_json(*roof);
    j["share_of_roofline"] = roof->bound_ms / r.step_ms;
  }
  for (const auto& d : r.devices) {
    j["per_device"].push_back(
        {{"device", d.device}, {"peak_bytes", d.peak_bytes}, {"busy_share", d.busy_share}});
  }
  if (r.config.mode == "dp") {
    j["dp_loss"] = r.config.dp_loss;
    j["handoffs_per_step"] = r.handoffs_per_step;
    j["handoff_wait_us"] = r.handoff_wait_us;
    j["dp_overhead_us"] = 1000 * (r.phase_ms[0] + r.phase_ms[1] + r.phase_ms[3] + r.phase_ms[6]);
  }
  if (!r.phase_ms.empty()) {
    static const char* names[] = {"replicate", "scatter",  "forward",    "gather",
                                  "loss",      "backward", "reduce_add", "step"};
    for (size_t p = 0; p < r.phase_ms.size(); ++p) j["device0_phase_ms"][names[p]] = r.phase_ms[p];
  }
  return j;
}

// parse_options' and check_inputs' answer when the bench goes on.
constexpr int kRun = -1;

struct Options {
  std::vector<std::string> models{"toy", "mlp", "convnet"};
  std::vector<int> device_counts{1, 2, 4};
  std::vector<int64_t> batch_sizes{256};  // global
  std::vector<std::string> ddp_backends{BenchConfig().ddp_backend};
  bool zero = false;  // --zero: a ZeRO-1 row beside each DDP row (a worker: this row is one)
  // --ddp-comm-hooks: a DDP row per hook (a worker: its one)
  std::vector<std::string> comm_hooks{"none"};
  // --sharding: FSDP rows beside each DDP row, one per strategy (a worker: "none" or its one)
  std::vector<std::string> sharding;
  bool op_profile = false;  // --op-profile: each in-process row's ops against the roofline
  std::vector<std::string> dp_losses{"device0"};  // --dp-loss: a DataParallel row each
  BenchConfig base;
  CLI::Option* ddp_backends_option = nullptr;
  std::string json_path = "bench.json", svg_path = "bench.svg";
  std::string worker_result;  // --ddp-worker: run as one DDP rank, writing here
  // Whether the flag was given: the heavy models' smaller defaults apply only where it was not.
  bool batch_sizes_given = false, warmup_given = false, steps_given = false;
};

// The options of how each step runs: DDP's process groups and buckets, and fusion. DDP's
// defaults are train's (gradient_as_bucket_view, overlap, and PyTorch's bucket_cap_mb 25,
// broadcast_buffers, find_unused_parameters false), except the process group (see its help).
void add_step_options(CLI::App& app, Options& o) {
  BenchConfig& base = o.base;
  o.ddp_backends_option =
      app.add_option("--ddp-backends", o.ddp_backends,
                     "process groups to run DDP over, each a row: mpi (ranks started by mpirun, "
                     "shared memory) or gloo (ranks as child processes, TCP over loopback) on host "
                     "devices; nccl (ranks as child processes, one GPU each; the default with "
                     "--device cuda) on CUDA devices. The default on host devices is mpi, not "
                     "train's --backend auto (gloo unless mpirun started it): the bench starts its "
                     "ranks itself, and MPI's shared memory is the faster on one machine")
          ->delimiter(',')
          ->check(CLI::IsMember({"gloo", "mpi", "nccl"}))
          ->capture_default_str();
  // --bucket-view, the older spelling, keeps working.
  dpe::tools::add_bool_option(
      app, "--gradient-as-bucket-view,--bucket-view", base.bucket_view,
      "DDP's gradient_as_bucket_view, the gradients are "
      "views of the all-reduce buckets and linear layers write theirs straight into "
      "them; false (PyTorch's default) copies into and out of the buckets. True by "
      "default, as train's");
  app.add_option("--overlap", base.overlap,
                 "when DDP's bucket all-reduces start: during backward (PyTorch's way), after it, "
                 "or auto (as train's DDP): after it on host devices whose ranks fill the cores "
                 "over MPI, during it elsewhere")
      ->check(CLI::IsMember({"auto", "during", "after"}))
      ->capture_default_str();
  dpe::tools::add_bool_option(
      app, "--zero", o.zero,
      "beside each DDP row, one with "
      "ZeroRedundancyOptimizer (ZeRO stage 1, PyTorch's name) over the same optimizer, "
      "each rank holding 1/world of its state (row ddp/B+zero). Needs DDP rows: a "
      "--devices count above 1");
  app.add_option("--ddp-comm-hooks", o.comm_hooks,
                 "DDP comm hooks, a row each: none (all-reduce float32 buckets), bf16, fp16 "
                 "(PyTorch's bf16_compress_hook and fp16_compress_hook: 16-bit buckets on the "
                 "wire; rows ddp/B+bf16hook, ddp/B+fp16hook). Each DDP row's JSON says the bytes "
                 "rank 0 handed to its process group per step (bytes_per_step)")
      ->delimiter(',')
      ->check(CLI::IsMember({"none", "bf16", "fp16"}))
      ->capture_default_str();
  app.add_option("--sharding", o.sharding,
                 "full, grad-op or both (full,grad-op): beside each DDP row, one with "
                 "FullyShardedDataParallel in DDP's place, FULL_SHARD or SHARD_GRAD_OP (rows "
                 "fsdp/B+full, fsdp/B+grad-op), each gpt block a unit. Needs DDP rows")
      ->delimiter(',')
      ->check(CLI::IsMember({"full", "grad-op", "none"}));
  dpe::tools::add_bool_option(
      app, "--channels-last", base.channels_last,
      "image batches channels last (torch.channels_last): the convolutional layers' "
      "activations stay NHWC, with no reorder between layers");
  dpe::tools::add_bool_option(
      app, "--fuse", base.fuse,
      "run a BatchNorm2d followed by a ReLU, with a MaxPool2d right after them or a "
      "residual sum between them, as one op (false: apart, as PyTorch's eager mode; the "
      "ConvNet and the ResNets have them)");
  dpe::tools::add_bool_option(
      app, "--activation-checkpointing", base.activation_checkpointing,
      "gpt models only; recompute each transformer "
      "block's activations in backward instead of keeping them (torch.utils.checkpoint, "
      "non-reentrant): the same losses (JSON: final_loss), less activation memory");
}

// Reads the command line into `o`. Returns kRun, or the exit code when there is nothing to run
// (--help, or a bad flag: CLI11 has printed why).
int parse_options(int argc, char** argv, Options& o) {
  BenchConfig& base = o.base;
  CLI::App app{
      "dpe bench: DataParallel against DDP on host devices (one thread per device unless "
      "--threads)"};
  app.add_option("--models", o.models,
                 "models to run: toy, mlp, convnet, resnet-tiny (Fashion-MNIST, 1 input channel), "
                 "resnet50 (torchvision's, random 3-channel images, see --image-size), gpt-small, "
                 "gpt2")
      ->delimiter(',')
      ->check(
          CLI::IsMember({"toy", "mlp", "convnet", "resnet-tiny", "resnet50", "gpt-small", "gpt2"}))
      ->capture_default_str();
  app.add_option("--precision", base.precision,
                 "fp32, bf16 or fp16: bf16 and fp16 run every row's forward and loss under "
                 "autocast in that dtype (torch.autocast's lists; float32 parameters, gradients "
                 "and optimizer state), fp16 with a GradScaler, each row's %peak against the "
                 "16-bit matrix peak measured here")
      ->check(CLI::IsMember(dpe::tools::precision_names()))
      ->capture_default_str();
  app.add_option("--device", base.device,
                 "host (the default: host devices) or cuda (CUDA devices cuda:0..N-1; with "
                 "DPE_CUDA_LOGICAL_DEVICES=N one GPU is N devices)")
      ->check(CLI::IsMember({"host", "cuda"}))
      ->capture_default_str();
  app.add_option("--devices", o.device_counts,
                 "device COUNTS, a list (a row each): DataParallel over that many devices, DDP "
                 "over that many processes of one device each")
      ->delimiter(',')
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  // --batches, the older spelling, keeps working.
  CLI::Option* batch_sizes_opt =
      app.add_option("--batch-size,--batches", o.batch_sizes,
                     "GLOBAL batch sizes, a list (a row each; DataParallel splits the batch over "
                     "its devices, DDP gives each rank batch / devices). Default 256; 8 windows "
                     "for gpt, 8 images for resnet50; a list given applies to every model: "
                     "resnet50 at 224 holds about 150 MiB per image, so run it on its own with a "
                     "small batch")
          ->delimiter(',')
          ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  CLI::Option* warmup_opt =
      app.add_option("--warmup", base.warmup,
                     "untimed steps first (default 5; 1 for gpt and resnet50)")
          ->check(CLI::Range(0, 1 << 20));
  CLI::Option* steps_opt =
      app.add_option("--steps", base.steps,
                     "timed steps, the median is reported (default 20; 3 for gpt and resnet50)")
          ->check(CLI::Range(1, 1 << 20));
  app.add_option("--context", base.context,
                 "gpt: tokens per window (default: the block size, gpt-small 128, gpt2 1024)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  app.add_option("--image-size", base.image,
                 "resnet50: height and width of its random images (default 224)")
      ->check(CLI::Range(int64_t{0}, int64_t{4096}));
  app.add_option("--threads", base.threads,
                 "compute threads per device and per DDP rank (%peak counts each thread's "
                 "share of the single-thread peak)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  add_step_options(app, o);
  app.add_option("--dp-loss", o.dp_losses,
                 "where DataParallel rows compute the loss, a list (a row each): device0 "
                 "(PyTorch's: the outputs gathered on device 0, the loss there) or replicas (row "
                 "dp+ploss: each device's loss on its own outputs, only scalars gathered, dpe's "
                 "parallel_criterion)")
      ->delimiter(',')
      ->check(CLI::IsMember({"device0", "replicas"}))
      ->capture_default_str();
  dpe::tools::add_switch(
      app, "--op-profile", o.op_profile,
      "after each single-device and DataParallel row, its traced step op by op: calls, "
      "measured ms and share of the step, GFLOP/s, GB/s, and the roofline's bound");
  app.add_option("--json", o.json_path,
                 "where to write the results (checked before the run: a path that cannot be "
                 "written exits 2)")
      ->capture_default_str();
  app.add_option("--svg", o.svg_path, "where to draw the plot (checked as --json)")
      ->capture_default_str();
  app.add_option("--data-dir", base.data_dir, "Fashion-MNIST folder");
  app.add_option("--ddp-worker", o.worker_result, "internal: run as one DDP worker")->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? dpe::tools::kExitOk : dpe::tools::kExitUsage;
  }
  // DDP on CUDA devices runs over NCCL unless told otherwise.
  if (base.device == "cuda" && o.ddp_backends_option->count() == 0) o.ddp_backends = {"nccl"};
  o.batch_sizes_given = batch_sizes_opt->count() > 0;
  o.warmup_given = warmup_opt->count() > 0;
  o.steps_given = steps_opt->count() > 0;
  return kRun;
}

// One DDP rank of a run_ddp started by the bench itself (--ddp-worker).
void run_ddp_worker(const Options& o) {
  BenchConfig c = o.base;
  c.model = o.models.at(0);
  c.global_batch = o.batch_sizes.at(0);  // run_ddp passes the model's batch explicitly
  c.ddp_backend = o.ddp_backends.at(0);
  c.zero = o.zero;
  c.comm_hook = o.comm_hooks.at(0);
  if (!o.sharding.empty() && o.sharding[0] != "none") c.sharding = o.sharding[0];
  dpe::tools::ddp_worker(c, o.worker_result);
}

// Checks what would fail every run before any starts: each model's --context (a usage error) and,
// when a model reads them, --data-dir (a folder that does not exist: a usage error, as train's)
// and its Fashion-MNIST files (a data error). Returns kRun or the exit code.
int check_inputs(const Options& o) {
  if (o.base.precision == "fp16" && !o.sharding.empty() &&
      std::find(o.sharding.begin(), o.sharding.end(), "none") == o.sharding.end()) {
    std::fprintf(stderr,
                 "bench: --precision fp16 with --sharding needs a sharded GradScaler (each "
                 "rank sees only its shards' overflows), which dpe does not have; use "
                 "bf16\n");
    return dpe::tools::kExitUsage;
  }
  if (!o.sharding.empty() &&
      *std::max_element(o.device_counts.begin(), o.device_counts.end()) < 2) {
    std::fprintf(stderr,
                 "bench: --sharding needs DDP rows (FSDP takes DDP's place): a --devices count "
                 "above 1\n");
    return dpe::tools::kExitUsage;
  }
  if (o.zero && *std::max_element(o.device_counts.begin(), o.device_counts.end()) < 2) {
    std::fprintf(stderr,
                 "bench: --zero needs DDP rows (ZeroRedundancyOptimizer runs under DDP): a "
                 "--devices count above 1\n");
    return dpe::tools::kExitUsage;
  }
  try {
    const dpe::DeviceType type = dpe::tools::parse_device_type(o.base.device);
    for (const std::string& b : o.ddp_backends) {
      DPE_TOOLS_CHECK(dpe::tools::UsageError, (b == "nccl") == (type == dpe::DeviceType::kCuda),
                      "bench: --ddp-backends " << b << " does not run on --device " << o.base.device
                                               << " (nccl: cuda; gloo, mpi: host)");
    }
    if (type == dpe::DeviceType::kCuda) {
      dpe::tools::tool_devices(type,
                               *std::max_element(o.device_counts.begin(), o.device_counts.end()));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench: %s\n", e.what());
    return dpe::tools::exit_code_for(e);
  }
  for (const std::string& model : o.models) {
    if (o.base.activation_checkpointing && !dpe::models::is_language_model(model)) {
      std::fprintf(stderr,
                   "bench: --activation-checkpointing: %s has no unit to checkpoint (the gpt "
                   "models' transformer blocks are the only ones)\n",
                   model.c_str());
      return dpe::tools::kExitUsage;
    }
    try {
      dpe::tools::bench_context(model, o.base.context);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench: %s\n", e.what());
      return dpe::tools::kExitUsage;
    }
  }
  for (const std::string& model : o.models) {
    if (model != "mlp" && model != "convnet" && model != "resnet-tiny") continue;
    const std::string dir =
        o.base.data_dir.empty() ? dpe::FashionMnist::kDefaultRoot : o.base.data_dir;
    // A folder that is not there is a usage error, as train's; one without the files, data.
    struct stat st {};
    const bool found = ::stat(dir.c_str(), &st) == 0;
    if (!found || !S_ISDIR(st.st_mode)) {
      const std::string why = found ? " is not a folder" : std::string(": ") + std::strerror(errno);
      std::fprintf(stderr,
                   "bench: --data-dir %s%s (install dataset-fashion-mnist or pass --data-dir)\n",
                   dir.c_str(), why.c_str());
      return dpe::tools::kExitUsage;
    }
    try {
      dpe::FashionMnist(dir, true);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench: %s\n", e.what());
      return dpe::tools::out_of_memory(e) ? dpe::tools::kExitFailure : dpe::tools::kExitData;
    }
    break;
  }
  return kRun;
}

// The 16-bit matrix peak of dt, printed beside float32's with what computes it: on CUDA devices
// cuda:0's (cuBLAS GemmEx, 4096^3, as its SGEMM peak), else one thread's (oneDNN, 1024^3) on this
// CPU, where an emulated one says so.
double low_precision_peak(double peak32, dpe::DType dt, const std::string& device) {
  if (device == "cuda") {
    const double peak = dpe::tools::measure_gemm_gflops(4096, 10, dpe::Device::parse("cuda:0"), dt);
    std::printf(
        "cuda:0 %s matrix peak (cuBLAS GemmEx, float32 accumulation, 4096^3) %.1f GFLOP/s, "
        "%.2fx float32's; the rows' %%peak is of it\n",
        dpe::dtype_name(dt), peak, peak / peak32);
    return peak;
  }
  const double peak = dpe::tools::measure_gemm_gflops(1024, 10, dpe::Device(), dt);
  const std::string engine = dpe::host::lowp_gemm_engine(dt);
  const bool emulated = engine == "emulated in float32";
  std::printf(
      "single-thread %s matrix peak (%s%s, 1024^3) %.1f GFLOP/s, %.2fx float32's; the "
      "rows' %%peak is of it%s\n",
      dpe::dtype_name(dt), emulated ? "" : "oneDNN on ", engine.c_str(), peak, peak / peak32,
      emulated ? " (this CPU has no matrix unit for it: the products are emulated)" : "");
  return peak;
}

// The machine, how the figures are measured, and the table's header.
void print_preamble(const Options& o, unsigned cores, double peak) {
  const BenchConfig& base = o.base;
  if (base.device == "cuda") {
    std::printf("machine: %u cores; cuda:0 SGEMM (cuBLAS, fp32, 4096^3) peak %.1f GFLOP/s\n", cores,
                peak);
  } else {
    std::printf("machine: %u cores; single-thread SGEMM (oneDNN, 1024^3) peak %.1f GFLOP/s\n",
                cores, peak);
  }
  std::printf(
      "every device/process computes with %d thread%s; samples/s = global batch / median "
      "step time over %d steps after %d warm-up steps (gpt, resnet50: %d after %d "
      "unless --steps/--warmup say otherwise); tokens/s = samples/s x context; ddp/B: DDP "
      "over process group B, gradient_as_bucket_view=%s, all-reduces start %s; batch norm + "
      "ReLU (+ max pooling, + residual sum) %s%s\n",
      base.threads, base.threads == 1 ? "" : "s", base.steps, base.warmup,
      o.steps_given ? base.steps : 3, o.warmup_given ? base.warmup : 1,
      base.bucket_view ? "true" : "false",
      base.overlap == "auto"     ? "as --overlap auto decides (JSON: overlap_during_backward)"
      : base.overlap == "during" ? "during backward"
                                 : "after backward",
      (std::string(base.fuse ? "fused" : "unfused (--fuse false)") +
       (base.channels_last ? "; images channels last (--channels-last)" : ""))
          .c_str(),
      base.activation_checkpointing ? "; gpt blocks checkpointed (--activation-checkpointing)" : "");
  if (o.zero) {
    std::printf("ddp/B+zero: the same DDP with ZeroRedundancyOptimizer (ZeRO-1): each rank steps "
                "its shard, then every shard is broadcast from its owner\n");
  }
  for (int n : o.device_counts) {
    if (n * base.threads > static_cast<int>(cores)) {
      std::printf(
          "note: %d devices x %d threads oversubscribe the %u cores: their figures "
          "share the CPU\n",
          n, base.threads, cores);
    }
  }
  if (base.device != "cuda") {
    std::printf(
        "bound ms: the step a roofline of the row's traced ops allows (each op at max(FLOPs / "
        "the peak, bytes / one thread's memory rate at the size the step's ops move); "
        "--op-profile: op by op); %%bound = bound / step\n");
  }
  std::printf("\n%-11s %6s %8s %4s %9s %10s %9s %7s %8s %6s %8s %6s %9s  %s\n", "model", "batch",
              "mode", "dev", "step ms", "samples/s", "tokens/s", "speedup", "GFLOP/s", "%peak",
              "bound ms", "%bound", "DP ovh us", "per device: peak memory / busy share");
}

// One row of the table: the run `r` of configuration `c`.
void print_row(const BenchConfig& c, const BenchResult& r, double speedup, double peak,
               const dpe::tools::Roofline* roof) {
  std::string per_device;
  for (const auto& d : r.devices) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s %s/%.0f%%  ", d.device.c_str(),
                  dpe::format_bytes(static_cast<int64_t>(d.peak_bytes)).c_str(),
                  100 * d.busy_share);
    per_device += buf;
  }
  // DataParallel's own work per step on device 0: replicate, scatter, gather and reduce-add
  // (StepProfiler phases 0, 1, 3 and 6).
  const double overhead_us =
      c.mode == "dp" ? 1000 * (r.phase_ms[0] + r.phase_ms[1] + r.phase_ms[3] + r.phase_ms[6]) : 0;
  if (c.mode == "dp") {
    char buf[96];
    std::snprintf(buf, sizeof buf, "hand-offs %.0f/step, %.0f us each", r.handoffs_per_step,
                  r.handoff_wait_us);
    per_device += buf;
  }
  if (c.mode == "ddp") {  // measured by rank 0's process group, not computed from the model
    per_device += "sent " + dpe::format_bytes(static_cast<int64_t>(r.bytes_per_step)) + "/step";
  }
  char overhead[16] = "-";
  if (c.mode == "dp") std::snprintf(overhead, sizeof overhead, "%.0f", overhead_us);
  char tokens[24] = "-";
  if (r.tokens_per_second > 0) {
    std::snprintf(tokens, sizeof tokens, "%.0f", r.tokens_per_second);
  }
  char bound[24] = "-", bound_share[16] = "-";
  if (roof != nullptr) {
    std::snprintf(bound, sizeof bound, "%.2f", roof->bound_ms);
    std::snprintf(bound_share, sizeof bound_share, "%.0f%%", 100 * roof->bound_ms / r.step_ms);
  }
  const std::string label = dpe::tools::mode_label(c);
  std::printf("%-11s %6lld %8s %4d %9.2f %10.1f %9s %7.2f %8.1f %5.0f%% %8s %6s %9s  %s\n",
              c.model.c_str(), static_cast<long long>(c.global_batch), label.c_str(), c.devices,
              r.step_ms, r.samples_per_second, tokens, speedup, r.gflops,
              100 * r.gflops / (peak * c.devices * c.threads), bound, bound_share, overhead,
              per_device.c_str());
  std::fflush(stdout);
}

// The traced step of a row op by op, against the roofline (--op-profile).
void print_op_profile(const dpe::tools::Roofline& f, double step_ms) {
  std::printf(
      "  %s's ops in one traced step (peak %.1f GFLOP/s; memory %.1f GB/s read + written, "
      "measured at %s per op): prims %.2f ms of the %.2f ms step, the rest is the engine "
      "(autograd, allocation, hand-offs) and untimed copies; roofline %.2f ms (compute-bound "
      "ops %.2f, memory-bound %.2f)\n",
      f.device.c_str(), f.rates.peak_gflops, f.rates.memory_gbs,
      dpe::format_bytes(f.rates.measured_at).c_str(), f.kernel_ms, step_ms, f.bound_ms,
      f.compute_bound_ms, f.memory_bound_ms);
  std::printf("  %-32s %-11s %5s %9s %6s %8s %8s %9s %6s\n", "op", "class", "calls", "ms",
              "%step", "GFLOP/s", "GB/s", "bound ms", "%bound");
  for (const auto& o : f.ops) {
    const std::string name = o.name + (o.backward ? " (bwd)" : "");
    if (!o.timed) {
      std::printf("  %-32s %-11s %5lld %9s %6s %8s %8s %9.3f %6s\n", name.c_str(),
                  o.op_class.c_str(), static_cast<long long>(o.calls), "-", "-", "-", "-",
                  o.bound_ms, "-");
      continue;
    }
    const double s = o.measured_ms / 1e3;
    std::printf("  %-32s %-11s %5lld %9.3f %5.1f%% %8.1f %8.1f %9.3f %5.0f%%\n", name.c_str(),
                o.op_class.c_str(), static_cast<long long>(o.calls), o.measured_ms,
                100 * o.measured_ms / step_ms, s > 0 ? o.flops / s / 1e9 : 0.0,
                s > 0 ? o.bytes / s / 1e9 : 0.0, o.bound_ms,
                o.measured_ms > 0 ? 100 * o.bound_ms / o.measured_ms : 0.0);
  }
  std::fflush(stdout);
}

// The roofline of a row that was traced (single and dp on host devices), else nothing.
std::optional<dpe::tools::Roofline> row_roofline(const BenchConfig& c, const BenchResult& r,
                                                 double peak) {
  if (r.traced_step.empty()) return std::nullopt;
  dpe::tools::MachineRates rates;
  rates.peak_gflops = peak * c.threads;
  rates.measured_at = dpe::tools::memory_measure_bytes(r.traced_step);
  rates.memory_gbs = dpe::tools::measure_memory_gbs(rates.measured_at, 7);
  return dpe::tools::roofline(r.traced_step, rates);
}

// Every run's result and its JSON, in the table's order.
struct Runs {
  nlohmann::json all = nlohmann::json::array();
  std::vector<BenchResult> results;
};

// Runs `model` at each of its batches and device counts: one device, then DataParallel and DDP
// over each backend; prints a row for each run and adds it to `runs`.
void run_model(const Options& o, const std::string& model, double peak, Runs& runs) {
  // The gpt models' and resnet50's steps take seconds here: smaller defaults keep a run short.
  const bool heavy = dpe::models::is_language_model(model) || model == "resnet50";
  BenchConfig model_base = o.base;
  if (heavy && !o.warmup_given) model_base.warmup = 1;
  if (heavy && !o.steps_given) model_base.steps = 3;
  const std::vector<int64_t> model_batches =
      heavy && !o.batch_sizes_given ? std::vector<int64_t>{8} : o.batch_sizes;
  for (int64_t batch : model_batches) {
    double one_device = 0;
    for (int n : o.device_counts) {
      struct Mode {
        std::string mode, backend;
        bool zero;
        std::string sharding, hook = "none";
      };
      std::vector<Mode> modes;
      for (const std::string& l : o.dp_losses) modes.push_back({"dp", l, false, ""});
      for (const std::string& b : o.ddp_backends) {
        for (const std::string& h : o.comm_hooks) modes.push_back({"ddp", b, false, "", h});
        if (o.zero) modes.push_back({"ddp", b, true, ""});
        for (const std::string& s : o.sharding) {
          if (s != "none") modes.push_back({"ddp", b, false, s});
        }
      }
      for (const auto& [mode, backend, zero, sharding, hook] : modes) {
        if (n == 1 && mode == "ddp") continue;  // one device: the same step
        BenchConfig c = model_base;
        c.model = model;
        c.global_batch = batch;
        c.devices = n;
        // One device: one row, whatever the DataParallel rows' loss.
        if (n == 1 && mode == "dp" && backend != o.dp_losses.front()) continue;
        c.mode = n == 1 ? "single" : mode;
        if (c.mode == "ddp") c.ddp_backend = backend;
        if (c.mode == "dp") c.dp_loss = backend;
        c.zero = c.mode == "ddp" && zero;
        c.sharding = c.mode == "ddp" ? sharding : "";
        c.comm_hook = c.mode == "ddp" ? hook : "none";
        BenchResult r = c.mode == "ddp" ? dpe::tools::run_ddp(c, dpe::tools::self_executable())
                                        : dpe::tools::run_in_process(c);
        if (n == 1) one_device = r.samples_per_second;
        const double speedup = one_device > 0 ? r.samples_per_second / one_device : 0;
        const std::optional<dpe::tools::Roofline> roof = row_roofline(c, r, peak);
        print_row(c, r, speedup, peak, roof ? &*roof : nullptr);
        if (o.op_profile && roof) print_op_profile(*roof, r.step_ms);
        runs.all.push_back(to_json(r, speedup, peak, roof ? &*roof : nullptr));
        r.traced_step.clear();  // the plot needs the figures, not the events
        runs.results.push_back(r);
      }
    }
  }
}

// Writes the JSON of every run and the plot, and says where.
void write_outputs(const Options& o, unsigned cores, double peak, const Runs& runs) {
  nlohmann::json doc;
  doc["device"] = o.base.device;
  doc["gemm_peak_gflops_1_thread"] = peak;  // cuda: the GPU's
  doc["cores"] = cores;
  doc["warmup"] = o.base.warmup;
  doc["steps"] = o.base.steps;
  doc["results"] = runs.all;
  dpe::tools::write_file_atomically(o.json_path, doc.dump(2) + "\n");
  dpe::tools::write_bench_svg(o.svg_path, runs.results);
  std::printf("\nwrote %s and %s\n", o.json_path.c_str(), o.svg_path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (const int code = parse_options(argc, argv, o); code != kRun) return code;
  try {
    dpe::host_options_from_env();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench: %s\n", e.what());
    return dpe::tools::kExitUsage;
  }
  try {
    if (!o.worker_result.empty()) {
      run_ddp_worker(o);
      return 0;
    }
    o.json_path = dpe::tools::user_path(o.json_path);
    o.svg_path = dpe::tools::user_path(o.svg_path);
    o.base.data_dir = dpe::tools::user_path(o.base.data_dir);
    if (const int code = check_inputs(o); code != kRun) return code;
    // The outputs before any work: a path that cannot be written is a usage error.
    dpe::tools::check_writable("--json", o.json_path);
    dpe::tools::check_writable("--svg", o.svg_path);
    const unsigned cores = std::thread::hardware_concurrency();
    const dpe::Device gemm_device =
        o.base.device == "cuda" ? dpe::Device::parse("cuda:0") : dpe::Device();
    const double peak32 =
        dpe::tools::measure_gemm_gflops(o.base.device == "cuda" ? 4096 : 1024, 10, gemm_device);
    print_preamble(o, cores, peak32);
    // A bf16 run's rows are measured against the bfloat16 matrix peak, printed beside fp32's.
    const std::optional<dpe::DType> lowp = dpe::tools::autocast_dtype(o.base.precision);
    const double peak = lowp ? low_precision_peak(peak32, *lowp, o.base.device) : peak32;
    Runs runs;
    for (const std::string& model : o.models) run_model(o, model, peak, runs);
    write_outputs(o, cores, peak, runs);
    return dpe::tools::kExitOk;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench: %s\n", e.what());
    return dpe::tools::exit_code_for(e);
  }
}
