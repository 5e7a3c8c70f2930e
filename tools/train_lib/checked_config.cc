#include "tools/train_lib/checked_config.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

#include "engine/backend/host/host_devices.h"
#include "engine/core/error.h"
#include "engine/distributed/distributed.h"
#include "tools/common/devices.h"
#include "tools/common/exit_codes.h"
#include "tools/train_lib/checkpoint_files.h"
#include "tools/train_lib/checkpoint_json.h"

namespace dpe::tools {

namespace {

// Backends that cannot serve the device type are usage errors, found from the flags alone before
// the environment is read.
void check_backend(const TrainConfig& c) {
  const DeviceType type = parse_device_type(c.device);
  const std::string backend = ddp_backend(c);
  DPE_TOOLS_CHECK(UsageError, !ranked(c) || type == DeviceType::kCuda || backend != "nccl",
                  "--backend nccl needs --device cuda (NCCL reduces CUDA tensors)");
  DPE_TOOLS_CHECK(
      UsageError, !ranked(c) || type == DeviceType::kHost || backend == "nccl",
      "--device cuda with --mode " << c.mode << " needs --backend nccl (or auto), not " << backend);
}

// --device cuda on a build or machine without (enough) CUDA devices is a usage error found before
// any work.
void check_device(const TrainConfig& c) {
  const DeviceType type = parse_device_type(c.device);
  if (type != DeviceType::kCuda) return;
  if (c.mode == "dp") {
    tool_devices(type, c.devices);
  } else if (ranked(c)) {
    tool_cuda_device(distributed::get_local_rank());
  } else {
    tool_devices(type, 1);
  }
}

// What --mode ddp needs from its environment, as init_process_group reads it: the ranks (RANK and
// WORLD_SIZE, or srun's or mpirun's variables) and, for the env:// rendezvous of gloo and nccl,
// MASTER_ADDR and a MASTER_PORT from 1 to 65535. MPI numbers the ranks itself, so --backend mpi
// in a job numbered by another launcher (tools/dpe-launch, torchrun: RANK without mpirun's
// variables) would see a world of one. Each is a UsageError naming the variables.
void check_ddp_environment(const TrainConfig& c) {
  const std::optional<distributed::DistEnv> env = distributed::dist_env_from_env();
  if (ddp_backend(c) == "mpi") {
    DPE_TOOLS_CHECK(UsageError,
                    !env || env->source != "RANK" || env->world_size == 1 ||
                        std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr,
                    "--backend mpi: the environment says rank "
                        << (env ? env->rank : 0) << " of " << (env ? env->world_size : 1)
                        << " (RANK and WORLD_SIZE, as tools/dpe-launch and torchrun set them), "
                           "but MPI numbers a job's ranks only under mpirun: start it with "
                           "mpirun -np "
                        << (env ? env->world_size : 1)
                        << ", or use --backend gloo with the launcher");
    return;
  }
  DPE_TOOLS_CHECK(UsageError, env.has_value(),
                  "--mode ddp needs RANK and WORLD_SIZE (tools/dpe-launch sets them, as srun and "
                  "mpirun set theirs): start it with tools/dpe-launch --nproc-per-node N");
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  DPE_TOOLS_CHECK(UsageError, addr != nullptr && *addr != '\0' && port != nullptr,
                  "--mode ddp with --backend "
                      << ddp_backend(c)
                      << " meets its ranks at MASTER_ADDR:MASTER_PORT "
                         "(missing: "
                      << (addr == nullptr || *addr == '\0' ? "MASTER_ADDR" : "")
                      << (port == nullptr ? " MASTER_PORT" : "")
                      << "); tools/dpe-launch sets them");
  const std::string p = port;
  bool digits = !p.empty() && p.size() <= 5;
  for (char ch : p) digits = digits && ch >= '0' && ch <= '9';
  const long value = digits ? std::strtol(p.c_str(), nullptr, 10) : 0;
  DPE_TOOLS_CHECK(UsageError, value >= 1 && value <= 65535,
                  "MASTER_PORT=" << shown(p) << " is not a port (a number from 1 to 65535)");
}

// Bad DPE_HOST_*, RANK/WORLD_SIZE, MASTER_* or DPE_RDZV_* values are usage errors, found before
// any work.
void check_environment(const TrainConfig& c) {
  try {
    host_options_from_env();
    if (ranked(c)) {
      check_ddp_environment(c);
      distributed::rendezvous_timeout(distributed::kDefaultTimeout);
      distributed::rendezvous_log_interval();
    }
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

// A run without --resume into a --checkpoint-dir that holds a run (its checkpoint, either layout,
// or its metrics.jsonl) would append its metrics to that run's and replace its checkpoint: a
// UsageError naming the directory and the files found, before anything is written. --resume auto
// goes on from such a run (or drops its lines when it has no checkpoint yet).
void check_fresh_checkpoint_dir(const TrainConfig& c) {
  if (c.resume || c.resume_auto || c.checkpoint_dir.empty()) return;
  const std::string& dir = c.checkpoint_dir;
  std::string found;
  for (const std::string& path :
       {checkpoint_manifest_path(dir), legacy_checkpoint_path(dir), model_checkpoint_path(dir),
        optimizer_checkpoint_path(dir), training_state_path(dir), metrics_path(dir)}) {
    if (::access(path.c_str(), F_OK) == 0) {
      found += (found.empty() ? "" : ", ") + path.substr(path.find_last_of('/') + 1);
    }
  }
  DPE_TOOLS_CHECK(UsageError, found.empty(),
                  "--checkpoint-dir " << dir << " already holds a run (" << found
                                      << "): pass --resume to continue it, or choose another "
                                         "directory (nothing was written)");
}

}  // namespace

TrainConfig checked_config(const TrainConfig& config) {
  DPE_TOOLS_CHECK(UsageError,
                  config.mode == "single" || config.mode == "dp" || config.mode == "ddp" ||
                      config.mode == "fsdp",
                  "unknown mode '" << config.mode << "' (expected single, dp, ddp or fsdp)");
  const TrainConfig c = resolve_defaults(config);
  DPE_TOOLS_CHECK(UsageError, c.epochs >= 1 && c.epochs <= kMaxEpochs,
                  "--epochs " << c.epochs << " must be between 1 and " << kMaxEpochs);
  DPE_TOOLS_CHECK(UsageError, c.batch_size >= 1,
                  "--batch-size " << c.batch_size << " must be at least 1");
  DPE_TOOLS_CHECK(UsageError, c.mode != "dp" || (c.devices >= 1 && c.devices <= 64),
                  "--devices " << c.devices << " must be between 1 and 64");
  DPE_TOOLS_CHECK(UsageError, !(c.resume || c.resume_auto) || !c.checkpoint_dir.empty(),
                  "--resume needs --checkpoint-dir");
  DPE_TOOLS_CHECK(UsageError, c.max_steps >= 0 && c.max_steps_per_epoch >= 0,
                  "--max-steps and --max-steps-per-epoch must be at least 0");
  DPE_TOOLS_CHECK(UsageError, !c.sync_bn || c.mode == "ddp", "--sync-bn needs --mode ddp");
  DPE_TOOLS_CHECK(UsageError, !c.zero || c.mode == "ddp", "--zero needs --mode ddp");
  DPE_TOOLS_CHECK(UsageError, c.sharding == "full" || c.sharding == "grad-op",
                  "--sharding " << shown(c.sharding) << " must be full or grad-op");
  DPE_TOOLS_CHECK(UsageError, std::isfinite(c.timeout) && c.timeout >= 0.001 && c.timeout <= 1e8,
                  "--timeout " << c.timeout << " must be a number of seconds from 0.001 to 1e8");
  for (const auto& [name, value] : {std::pair<const char*, float>{"--lr", c.lr},
                                    {"--momentum", c.momentum},
                                    {"--weight-decay", c.weight_decay},
                                    {"--clip-grad-norm", c.clip_grad_norm}}) {
    DPE_TOOLS_CHECK(UsageError, std::isfinite(value) && value >= 0,
                    name << " " << value << " must be a finite number >= 0");
  }
  check_backend(c);  // from the flags alone, before the environment is read
  check_environment(c);
  check_device(c);
  check_fresh_checkpoint_dir(c);
  return c;
}

}  // namespace dpe::tools
