// The main demo: the seeds' DataParallel example on host devices — a Linear(5, 2) model wrapped in
// DataParallel, a RandomDataset of 100 samples of size 5, batch 30 — printing what each replica
// receives, then the imbalance DataParallel causes on device 0 where users meet it: the small GPT
// language model on 2 and 4 host devices, plain DataParallel against its two ways out
// (tools/demo_lib/lm_imbalance.h). `--model convnet|mlp|toy` profiles one of the seeds' models
// instead.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>

#include "engine/autograd/ops.h"
#include "engine/backend/host/host_devices.h"
#include "engine/data/data_loader.h"
#include "engine/data/fashion_mnist.h"
#include "engine/data/random_dataset.h"
#include "engine/device/runtime.h"
#include "engine/optim/sgd.h"
#include "engine/parallel/data_parallel.h"
#include "engine/parallel/imbalance_report.h"
#include "models/by_name.h"
#include "models/demo_model.h"
#include "tools/common/bool_flag.h"
#include "tools/common/devices.h"
#include "tools/common/exit_codes.h"
#include "tools/common/local_ranks.h"
#include "tools/common/paths.h"
#include "tools/demo_lib/lm_imbalance.h"

namespace {

struct Flags {
  std::string device = "host";  // host | cuda
  int devices = 0;              // 0: DPE_HOST_DEVICES (default 2), or every CUDA device
  int input_size = 5, output_size = 2, batch_size = 30, data_size = 100;
  std::string model = "gpt-small";
  std::vector<int> lm_devices = {2, 4};
  int64_t lm_batch_per_device = 6, context = 128;
  int lm_steps = 1;
  bool no_lm_ddp = false;
  std::string lm_ddp_worker;  // internal: run as one DDP rank, writing into this folder
  std::string lm_strategy = "ddp";  // internal: the worker's ddp, zero, grad-op or full
  bool lm_worker_ac = false;        // internal: the worker checkpoints every block
  bool no_lm_sharded = false;       // leaves out the ZeRO-1 and FSDP rows beside DDP's
  // The language-model part's precisions, a set of rows each (a worker: its one).
  std::vector<std::string> lm_precisions = {"fp32", "bf16"};
  int steps = 8;
  int train_batch = 256;  // global
  std::string data_dir = dpe::FashionMnist::kDefaultRoot;
};

void seeds_demo(const Flags& f, const std::vector<dpe::Device>& devices) {
  dpe::Generator gen(0);
  auto model = std::make_shared<dpe::models::DemoModel>(f.input_size, f.output_size, gen);
  std::mutex print_mu;  // replicas print from their own workers
  model->set_printer([&print_mu](const std::string& line) {
    std::lock_guard<std::mutex> lock(print_mu);
    std::printf("%s\n", line.c_str());
  });
  model->to(devices[0]);  // built on host:0
  std::shared_ptr<dpe::Module> net = model;
  if (devices.size() > 1) {
    std::printf("Let's use %zu devices!\n", devices.size());
    net = std::make_shared<dpe::DataParallel>(model, devices);
  }
  auto data = std::make_shared<dpe::RandomDataset>(f.input_size, f.data_size, 0);
  dpe::DataLoaderOptions o;
  o.batch_size = f.batch_size;
  o.shuffle = true;
  dpe::DataLoader loader(data, o);
  for (dpe::Batch& batch : loader) {
    // One device computes on its own memory; DataParallel scatters from wherever the batch is.
    const dpe::Tensor input = devices.size() == 1 && batch.input.device() != devices[0]
                                  ? batch.input.to(devices[0])
                                  : batch.input;
    dpe::Tensor output = net->forward(input);
    std::printf("Outside: input size %s output_size %s\n", batch.input.shape().str().c_str(),
                output.shape().str().c_str());
  }
}

void imbalance_demo(const Flags& f, const std::vector<dpe::Device>& devices) {
  if (devices.size() < 2) return;
  std::printf("\nTraining %s with DataParallel on %zu devices, global batch %d, %d steps:\n",
              f.model.c_str(), devices.size(), f.train_batch, f.steps);
  dpe::Generator gen(1);
  auto model = dpe::models::make_model(f.model, gen);
  model->to(devices[0]);
  dpe::DataParallel dp(model, devices);
  dpe::StepProfiler prof;
  dp.set_profiler(&prof);
  dpe::optim::SgdOptions so;
  so.lr = 0.01f;
  so.momentum = 0.9f;
  dpe::optim::SGD sgd(model->parameters(), so);

  dpe::Tensor images, labels;
  if (f.model == "toy") {
    images = dpe::randn({f.train_batch, 10}, gen);
    std::vector<int64_t> l(f.train_batch);
    for (auto& v : l) v = static_cast<int64_t>(gen.next_u64() % 5);
    labels = dpe::Tensor::from_vector(l, {f.train_batch});
  } else {
    std::unique_ptr<dpe::FashionMnist> loaded;
    try {
      loaded = std::make_unique<dpe::FashionMnist>(f.data_dir, true);
    } catch (const std::exception& e) {
      if (dpe::tools::out_of_memory(e)) throw;
      throw dpe::tools::DataError(e.what());
    }
    dpe::FashionMnist& train = *loaded;
    std::vector<int64_t> idx(f.train_batch);
    for (int i = 0; i < f.train_batch; ++i) idx[i] = i;
    dpe::Batch b = train.get_batch(idx);
    images = b.input;
    labels = b.target;
  }
  if (labels.device() != devices[0]) labels = labels.to(devices[0]);  // the loss is on device 0
  std::vector<dpe::StepStats> stats;
  for (int step = 0; step < f.steps; ++step) {
    prof.begin_step(devices);
    dpe::Tensor out = dp(images);
    dpe::Tensor loss;
    {
      dpe::StepProfiler::Scope s(&prof, devices[0], dpe::Phase::kLoss);
      loss = dpe::ops::cross_entropy(out, labels);
    }
    prof.backward(loss);
    {
      dpe::StepProfiler::Scope s(&prof, devices[0], dpe::Phase::kStep);
      sgd.step();
      sgd.zero_grad();
    }
    stats.push_back(prof.end_step());
    std::printf("  step %d: loss %.4f\n", step, loss.item());
  }
  // The first step pays one-time costs (primitive creation); report the rest.
  if (stats.size() > 1) stats.erase(stats.begin());
  dpe::ImbalanceReport report = dpe::ImbalanceReport::from_steps(stats);
  std::printf("\nImbalance report (%s, global batch %d):\n%s", f.model.c_str(), f.train_batch,
              report.table().c_str());
}

dpe::tools::LmImbalanceOptions lm_options(const Flags& f) {
  dpe::tools::LmImbalanceOptions o;
  o.config = dpe::models::gpt_config(f.model);
  o.context = f.context;  // checked against the block size (check_context)
  o.steps = f.lm_steps;
  o.precision = f.lm_precisions.front();
  return o;
}

// --context must fit the gpt model's block size, as train requires (a UsageError naming the range
// otherwise); the other models ignore it.
void check_context(const Flags& f) {
  if (f.model.rfind("gpt", 0) != 0) return;
  const int64_t block_size = dpe::models::gpt_config(f.model).block_size;
  DPE_TOOLS_CHECK(dpe::tools::UsageError, f.context >= 1 && f.context <= block_size,
                  "--context " << f.context << " must be between 1 and " << f.model
                               << "'s block size " << block_size);
}

// The flags that make a DDP rank run the same configuration (tools/demo_lib/lm_imbalance.h).
std::vector<std::string> lm_worker_argv(const Flags& f) {
  return {dpe::tools::self_executable(),
          "--model",
          f.model,
          "--lm-batch-size",
          std::to_string(f.lm_batch_per_device),
          "--context",
          std::to_string(f.context),
          "--lm-steps",
          std::to_string(f.lm_steps)};
}

// A DDP rank's global batch: --lm-batch-size per device, as in the parent, times WORLD_SIZE (set
// by run_local_ranks).
int64_t worker_global_batch(const Flags& f) {
  const char* text = std::getenv("WORLD_SIZE");
  char* end = nullptr;
  const long world = text != nullptr ? std::strtol(text, &end, 10) : 0;
  DPE_TOOLS_CHECK(dpe::tools::UsageError, text != nullptr && *end == '\0' && world >= 1,
                  "--lm-ddp-worker needs WORLD_SIZE (run_local_ranks sets it)");
  return f.lm_batch_per_device * world;
}

void lm_demo(const Flags& f, dpe::DeviceType type) {
  dpe::tools::LmImbalanceOptions o = lm_options(f);
  std::printf(
      "\n%s (%lld-token vocabulary) trained with AdamW on %s devices, %lld sequences of "
      "%lld tokens (random) per device,\nmedians of %d step(s) after %d warm-up step(s) of "
      "one sequence per device; memory in MiB at each device's peak:\n",
      f.model.c_str(), static_cast<long long>(o.config.vocab_size), dpe::device_type_name(type),
      static_cast<long long>(f.lm_batch_per_device), static_cast<long long>(o.context), o.steps,
      o.warmup_steps);
  dpe::Runtime& rt = dpe::Runtime::get();
  std::vector<dpe::tools::LmImbalanceRun> runs;
  // DDP's ranks beside DataParallel run on host devices: NCCL, the CUDA process group, wants a
  // GPU of its own per rank, which logical devices on one GPU are not.
  const bool ddp = !f.no_lm_ddp && type == dpe::DeviceType::kHost;
  if (!f.no_lm_ddp && !ddp) std::printf("(DDP's rows are left out on CUDA devices)\n");
  for (int n : f.lm_devices) {
    if (type == dpe::DeviceType::kHost) dpe::set_host_device_count(n);
    const auto devices = type == dpe::DeviceType::kHost ? rt.devices(dpe::DeviceType::kHost)
                                                        : dpe::tools::tool_devices(type, n);
    o.batch = f.lm_batch_per_device * n;
    for (const std::string& precision : f.lm_precisions) {
      o.precision = precision;
      for (auto v : {dpe::tools::DpVariant::kPlain, dpe::tools::DpVariant::kChunkWeights,
                     dpe::tools::DpVariant::kParallelLoss}) {
        runs.push_back(dpe::tools::profile_lm_dp(o, devices, v));
        std::fflush(stdout);
      }
      if (n == f.lm_devices.front() && precision == f.lm_precisions.front()) {
        std::printf("\nplain DataParallel on %d devices, what each device held at its peak:\n%s",
                    n, runs[runs.size() - 3].report.memory_breakdown().c_str());
      }
      if (!ddp) continue;
      using V = dpe::tools::DpVariant;
      // Each way out, then each with every transformer block checkpointed.
      for (bool ac : {false, true}) {
        if (ac && f.no_lm_sharded) break;
        o.activation_checkpointing = ac;
        for (V v : {V::kDdp, V::kDdpZero, V::kFsdpGradOp, V::kFsdpFull}) {
          if (v != V::kDdp && f.no_lm_sharded) continue;
          runs.push_back(dpe::tools::profile_lm_ddp(o, n, lm_worker_argv(f), v));
          std::fflush(stdout);
        }
      }
      o.activation_checkpointing = false;
    }
  }
  std::printf("\n%s", dpe::tools::lm_imbalance_table(runs).c_str());
}

// The command line, into f (the help texts are the --help output).
void add_flags(CLI::App& app, Flags& f) {
  app.add_option("--device", f.device,
                 "host (the default: host devices) or cuda (CUDA devices; with "
                 "DPE_CUDA_LOGICAL_DEVICES=N one GPU is N devices)")
      ->check(CLI::IsMember({"host", "cuda"}))
      ->capture_default_str();
  app.add_option("--devices", f.devices,
                 "number of devices (default: DPE_HOST_DEVICES or 2 host devices; every CUDA "
                 "device)")
      ->check(CLI::Range(1, 64));
  app.add_option("--batch-size", f.batch_size,
                 "GLOBAL batch size of the seeds' demo (DataParallel splits it over the devices)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--data-size", f.data_size, "samples in the RandomDataset")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--model", f.model, "model for the imbalance part")
      ->check(CLI::IsMember({"gpt-small", "gpt2", "toy", "mlp", "convnet"}));
  app.add_option("--lm-devices", f.lm_devices,
                 "device counts of the language-model part, a row each")
      ->check(CLI::Range(2, 64));
  // The older spellings (--lm-batch, --lm-context, --train-batch) keep working.
  app.add_option("--lm-batch-size,--lm-batch", f.lm_batch_per_device,
                 "batch size PER DEVICE of the language-model part: sequences on each device, "
                 "for DataParallel and DDP alike (the global batch is this x the device count)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--lm-steps", f.lm_steps, "profiled steps per run of the language-model part")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--context,--lm-context", f.context,
                 "tokens per sequence of the language-model part, from 1 to the model's block "
                 "size (gpt-small 128, gpt2 1024)")
      ->check(CLI::Range(1, 1 << 20));
  dpe::tools::add_switch(app, "--no-lm-ddp", f.no_lm_ddp,
                         "leave DDP's ranks out of the language-model part");
  dpe::tools::add_switch(app, "--no-lm-sharded", f.no_lm_sharded,
                         "leave the ZeRO-1, FSDP and activation-checkpointing rows out of the "
                         "language-model part");
  app.add_option("--lm-precision", f.lm_precisions,
                 "the language-model part's precisions, a set of rows each: fp32, bf16 (the "
                 "forward and the loss under autocast(bfloat16), PyTorch's default mixed "
                 "precision: float32 parameters, gradients and AdamW state)")
      ->delimiter(',')
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  app.add_option("--lm-ddp-worker", f.lm_ddp_worker, "internal: run as one DDP rank")->group("");
  app.add_option("--lm-strategy", f.lm_strategy, "internal: the DDP rank's strategy")->group("");
  app.add_flag("--lm-activation-checkpointing", f.lm_worker_ac,
               "internal: the DDP rank checkpoints every block")
      ->group("");
  app.add_option("--steps", f.steps, "training steps to profile (0 skips the training part)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--train-batch-size,--train-batch", f.train_batch,
                 "GLOBAL batch size of the training part (DataParallel splits it over the "
                 "devices)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--data-dir", f.data_dir, "Fashion-MNIST folder");
}

// DPE_HOST_DEVICES is the default of --devices: say so when the flag overrides it.
void warn_if_devices_override_env(const Flags& f) {
  const char* env_devices = std::getenv("DPE_HOST_DEVICES");
  if (f.devices > 0 && env_devices != nullptr && std::to_string(f.devices) != env_devices) {
    std::fprintf(stderr, "demo: --devices %d overrides DPE_HOST_DEVICES=%s\n", f.devices,
                 env_devices);
  }
}

// The seeds' demo's devices: --devices host devices (DPE_HOST_DEVICES's otherwise), or CUDA
// devices, checking up front that the language-model part's largest count exists (exit 2 before
// any work).
std::vector<dpe::Device> demo_devices(const Flags& f, dpe::DeviceType type, dpe::Runtime& rt) {
  if (type == dpe::DeviceType::kHost) {
    if (f.devices > 0) dpe::set_host_device_count(f.devices);
    return rt.devices(dpe::DeviceType::kHost);
  }
  const int lm_max = *std::max_element(f.lm_devices.begin(), f.lm_devices.end());
  const bool lm = f.steps > 0 && f.model.rfind("gpt", 0) == 0;
  std::vector<dpe::Device> devices = dpe::tools::tool_devices(
      type, f.devices > 0 ? f.devices : std::max(1, rt.device_count(type)));
  if (lm) dpe::tools::tool_devices(type, lm_max);
  return devices;
}

// One DDP rank of the language-model part (--lm-ddp-worker), or the whole demo.
void run_demo(Flags& f) {
  check_context(f);
  if (!f.lm_ddp_worker.empty()) {
    dpe::tools::LmImbalanceOptions o = lm_options(f);
    o.batch = worker_global_batch(f);
    o.activation_checkpointing = f.lm_worker_ac;
    dpe::tools::lm_ddp_worker(o, f.lm_ddp_worker, dpe::tools::strategy_from_flag(f.lm_strategy));
    return;
  }
  f.data_dir = dpe::tools::user_path(f.data_dir);
  const bool needs_data = f.steps > 0 && (f.model == "convnet" || f.model == "mlp");
  DPE_TOOLS_CHECK(dpe::tools::UsageError, !needs_data || std::filesystem::is_directory(f.data_dir),
                  "--data-dir " << f.data_dir << " is not a folder");
  dpe::Runtime& rt = dpe::Runtime::get();
  const dpe::DeviceType type = dpe::tools::parse_device_type(f.device);
  const std::vector<dpe::Device> devices = demo_devices(f, type, rt);
  seeds_demo(f, devices);
  if (f.steps > 0 && f.model.rfind("gpt", 0) == 0)
    lm_demo(f, type);
  else if (f.steps > 0)
    imbalance_demo(f, devices);
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{
      "dpe demo: the seeds' DataParallel example on host devices, then the imbalance "
      "DataParallel causes on device 0"};
  add_flags(app, f);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? dpe::tools::kExitOk : dpe::tools::kExitUsage;
  }
  try {
    dpe::host_options_from_env();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "demo: %s\n", e.what());
    return dpe::tools::kExitUsage;
  }
  warn_if_devices_override_env(f);
  try {
    run_demo(f);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "demo: %s\n", e.what());
    return dpe::tools::exit_code_for(e);
  }
}
