#include "tools/train_lib/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/backend/host/host_devices.h"
#include "engine/data/data_loader.h"
#include "engine/device/runtime.h"
#include "engine/distributed/zero_redundancy_optimizer.h"
#include "engine/optim/grad_scaler.h"
#include "kernels/host/lowp_gemm.h"
#include "tools/common/precision.h"
#include "tools/common/train_distributed.h"
#include "tools/train_lib/checked_config.h"
#include "tools/train_lib/checkpoint_reader.h"
#include "tools/train_lib/checkpoint_recovery.h"
#include "tools/train_lib/checkpoint_writer.h"
#include "tools/train_lib/epoch_plan.h"
#include "tools/train_lib/metrics_log.h"
#include "tools/train_lib/model_and_optimizer.h"
#include "tools/train_lib/state_io.h"
#include "tools/train_lib/train_data.h"
#include "tools/train_lib/train_epoch.h"

namespace dpe::tools {

namespace {

// One process drives `devices` (dp) or one device (single, ddp: one device per process). In dp,
// --devices wins over DPE_HOST_DEVICES and says so when they differ.
void set_dp_device_count(const TrainConfig& c) {
  Runtime& rt = Runtime::get();  // in every mode: the runtime exists before the process group
  if (c.mode != "dp" || c.device != "host") return;
  const char* env = std::getenv("DPE_HOST_DEVICES");
  if (env != nullptr && *env != '\0' && std::to_string(c.devices) != env) {
    std::fprintf(stderr, "train: --devices %d overrides DPE_HOST_DEVICES=%s\n", c.devices, env);
  }
  if (rt.device_count(DeviceType::kHost) < c.devices) set_host_device_count(c.devices);
}

// The generation of the next checkpoint set. The main process first finishes a checkpoint whose
// commit a kill interrupted and removes what killed writes left, before any process reads it.
int64_t recover_checkpoints(const TrainConfig& c, const Distributed& dist, FILE* out) {
  int64_t generation = 1;
  if (!c.checkpoint_dir.empty()) {
    if (dist.rank == 0) generation = recover_checkpoint_dir(c.checkpoint_dir, out);
    dist.barrier();
  }
  return generation;
}

// Loads --checkpoint-dir's checkpoint into `model` and `opt` and returns where it leaves the run;
// the main process says where it resumed from and trims metrics.jsonl to match.
Position resume_training(const TrainConfig& c, const Data& data, const StateIo& io, bool main,
                         FILE* out) {
  std::string from;
  const Position at = resume(c, data.language_model, io, &from);
  if (main) {
    std::fprintf(out, "resumed from %s after epoch %d\n", from.c_str(), at.epoch);
    trim_metrics(metrics_path(c.checkpoint_dir), at.epoch, out);
  }
  return at;
}

// The main process's first lines: the run's configuration (and the corpus and model for gpt).
void print_run(const TrainConfig& c, const Data& data, const Module& model, const Distributed& dist,
               float lr, FILE* out) {
  const std::string length = c.max_steps > 0 ? std::to_string(c.max_steps) + " steps in all"
                                             : std::to_string(c.epochs) + " epoch(s)";
  std::fprintf(out, "training %s, mode %s (%d %s), batch %lld %s, %s%s lr %g, %s\n",
               c.model.c_str(), c.mode.c_str(), c.mode == "dp" ? c.devices : dist.world,
               c.mode == "dp" ? "devices" : "process(es)", static_cast<long long>(c.batch_size),
               ranked(c) ? "per process" : "global", c.zero ? "ZeRO-1 " : "", c.optimizer.c_str(),
               lr, length.c_str());
  if (const std::optional<DType> dt = autocast_dtype(c.precision)) {
    // Said once: whether the 16-bit products run on a matrix unit or are emulated.
    const char* where = c.device == "cuda"                     ? "on the GPU (cuBLAS, cuDNN)"
                        : host::lowp_gemm_engine(*dt) == "AMX" ? "on AMX (oneDNN)"
                                                               : "emulated in float32 (this CPU "
                                                                 "has no matrix unit for them)";
    std::fprintf(out,
                 "precision %s: forward and loss under autocast(%s)%s; float32 parameters, "
                 "gradients and optimizer state; 16-bit products %s\n",
                 c.precision.c_str(), dtype_name(*dt),
                 needs_grad_scaler(c.precision) ? " with a GradScaler" : "", where);
  }
  if (data.language_model) {
    int64_t parameters = 0;
    for (const auto& [name, p] : model.named_parameters()) parameters += p.numel();
    std::fprintf(out,
                 "%s: %lld training / %lld validation windows of %lld tokens; "
                 "%s, %lld parameters; clip_grad_norm %g\n",
                 data.text_source.c_str(), static_cast<long long>(data.train->size()),
                 static_cast<long long>(data.test->size()), static_cast<long long>(c.context),
                 model.repr().c_str(), static_cast<long long>(parameters), c.clip_grad_norm);
  }
}

// The main process commits the epoch's checkpoint set (generation `*generation`, then the next)
// with its metrics line; every rank waits for it.
void save_checkpoint(const Run& run, const EpochMetrics& m, int64_t* generation) {
  const TrainConfig& c = run.c;
  // --zero: every rank sends its shard's state to rank 0, which saves it as the plain one.
  if (auto* zero = dynamic_cast<distributed::ZeroRedundancyOptimizer*>(&run.opt)) {
    zero->consolidate_state_dict(0);
  }
  StateDict model_state, optimizer_state;
  if (run.main || run.io.collective) {
    model_state = run.io.model_state();
    optimizer_state = run.io.optimizer_state();
  }
  if (run.main) {
    nlohmann::ordered_json state = {{"format", kTrainingStateFormat},
                                    {"generation", *generation},
                                    {"epoch", m.epoch},
                                    {"model", c.model},
                                    {"mode", c.mode},
                                    {"optimizer", c.optimizer},
                                    {"seed", c.seed}};
    if (m.global_step >= 0) state["global_step"] = m.global_step;
    if (run.data.language_model) state["context"] = c.context;
    // The metrics line before the manifest's rename: a kill between the two leaves a line
    // without its checkpoint, which resume drops, never a checkpoint without its line.
    write_checkpoint(
        c.checkpoint_dir, (*generation)++, model_state, optimizer_state, state,
        [&] { append_metrics(metrics_path(c.checkpoint_dir), c, m, run.dist.world); }, run.out);
  }
  run.dist.barrier();
}

}  // namespace

TrainResult train(const TrainConfig& config, FILE* out) {
  const TrainConfig c = checked_config(config);
  set_dp_device_count(c);
  const std::chrono::milliseconds timeout(std::llround(c.timeout * 1000));
  Distributed dist = ranked(c) ? Distributed::init(ddp_backend(c), timeout) : Distributed::single();
  const Device home = Device();  // host:0 in this process
  const bool main = dist.rank == 0;
  int64_t generation = recover_checkpoints(c, dist, out);
  // The data comes before the model: the gpt models' vocabulary is the tokenizer's.
  const Data data = load_checked_data(c, out, main);
  std::shared_ptr<Module> model = build_model(c, data, dist);
  std::shared_ptr<Module> net = wrap_for_mode(c, model, dist);
  const int scale = c.mode == "dp" ? c.devices : dist.world;
  const float lr = c.scale_lr ? c.lr * static_cast<float>(scale) : c.lr;
  // FSDP's parameters are each rank's flat shards.
  std::unique_ptr<optim::Optimizer> opt =
      make_optimizer(c, c.mode == "fsdp" ? net->parameters() : model->parameters(), lr, dist);
  // fp16: a GradScaler, its state checkpointed beside the optimizer's.
  std::unique_ptr<optim::GradScaler> scaler;
  if (needs_grad_scaler(c.precision)) scaler = std::make_unique<optim::GradScaler>();
  const StateIo io = scaler ? with_grad_scaler(state_io(*model, *net, *opt), *scaler)
                            : state_io(*model, *net, *opt);
  // Where the run starts: the epoch after the checkpoint's, with the optimizer steps before it.
  Position at{-1, 0};
  if (c.resume || (c.resume_auto && has_checkpoint(c.checkpoint_dir))) {
    at = resume_training(c, data, io, main, out);
  } else if (c.resume_auto && main) {
    std::fprintf(out, "no checkpoint in %s yet: starting from scratch (--resume auto)\n",
                 c.checkpoint_dir.c_str());
    // Lines of epochs whose checkpoint never came (a run stopped before its first commit) go, as
    // --resume drops the lines past its checkpoint: this run's epochs are not appended to them.
    trim_metrics(metrics_path(c.checkpoint_dir), -1, out);
  }
  const int start_epoch = at.epoch + 1;
  int64_t done = at.global_step;  // -1: unknown (an older checkpoint), and stays so

  std::shared_ptr<Sampler> sampler = make_train_sampler(c, data, dist);
  DataLoaderOptions lo;
  lo.batch_size = c.batch_size;
  lo.sampler = sampler;
  DataLoader loader(data.train, lo);
  DataLoader test_loader(data.test, test_loader_options(c, data, dist));
  const Plan plan = plan_epochs(c, loader.size(), start_epoch, std::max<int64_t>(done, 0));
  if (main) print_run(c, data, *model, dist, lr, out);
  if (main && c.max_steps > 0 && done >= c.max_steps) {
    std::fprintf(out, "nothing to train: %lld steps done, --max-steps %lld\n",
                 static_cast<long long>(done), static_cast<long long>(c.max_steps));
  }

  const Run run{c, compute_device(c), dist, data, *model, *net, *opt, io, main, out, scaler.get()};
  TrainResult result;
  for (int epoch = start_epoch; epoch < plan.end_epoch; ++epoch) {
    const int64_t limit =
        c.max_steps > 0 ? std::min(plan.steps_per_epoch, c.max_steps - done) : plan.steps_per_epoch;
    EpochMetrics m = train_epoch(run, epoch, *sampler, loader, limit);
    if (done >= 0) done += m.steps;
    m.global_step = done;
    evaluate(run, test_loader, m);
    if (main) print_epoch(m, data.language_model, out);
    if (!c.checkpoint_dir.empty()) save_checkpoint(run, m, &generation);
    result.epochs.push_back(m);
  }
  // FSDP: the full state dict, which every rank takes part in gathering.
  for (auto& [k, v] : io.model_state()) result.final_state.emplace_back(k, v.to(home).clone());
  return result;
}

}  // namespace dpe::tools
