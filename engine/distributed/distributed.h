// torch.distributed for dpe: init_process_group, the default group and the seeds' helpers
// (get_rank, get_world_size, is_main_process, barrier, reduce_value).
//
// Design note "the default group": like PyTorch, a process has at most one default process group,
// set by init_process_group and cleared by destroy_process_group; the helpers below act on it.
// init_process_group also returns the group as a std::shared_ptr, and code that can should pass
// that pointer explicitly (DDP takes one) rather than reach for default_group(). Without a default
// group the helpers answer for a single process: rank 0, world size 1, reduce_value a no-op.
//
// Where rank and world size come from (init_method "env://", or -1 arguments):
//   RANK, WORLD_SIZE, LOCAL_RANK          (tools/dpe-launch, torchrun)
//   SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID   (srun)
//   OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK   (mpirun)
// "env://" rendezvous at MASTER_ADDR:MASTER_PORT (rank 0 serves a TCPStore there);
// "tcp://host:port" does the same with an explicit address; "file:///path" uses Gloo's FileStore
// in that directory (it must be empty or fresh for each job).
//
// Threading contract: init_process_group and destroy_process_group are called from one thread,
// once per job (not concurrently with the helpers); the helpers may be called from any thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "engine/distributed/process_group.h"
#include "engine/tensor/tensor.h"

namespace gloo {
namespace rendezvous {
class Store;
}  // namespace rendezvous
}  // namespace gloo

namespace dpe {
namespace distributed {

// Where this process sits in the job, read from the environment.
struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string source;  // "RANK", "SLURM" or "OMPI": the variables it came from
};

// Reads the variables listed above, first family found wins; nullopt when none is set. `getenv`
// is replaceable for tests. Throws dpe::Error naming the variable when a value is malformed.
std::optional<DistEnv> dist_env_from_env(
    const std::function<const char*(const char*)>& getenv = nullptr);

constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::minutes(30);

// Design note "rendezvous wait": with a TCPStore, every rank first waits until all ranks have
// reached the store (keys rdzv/<prefix>/<world_size>/<generation>/<rank>, the generation from a
// counter, so a store can serve several jobs of one size in turn). The wait lasts up to the
// rendezvous timeout: the `timeout` argument, or DPE_RDZV_TIMEOUT (seconds) when that is set
// (PyTorch's default is 30 minutes). Every DPE_RDZV_LOG_INTERVAL seconds (default 30) a rank
// still waiting prints a line on stderr naming the ranks that have not arrived (a rank that cannot
// reach rank 0's store names its address); the timeout's error names them too.
std::chrono::milliseconds rendezvous_timeout(std::chrono::milliseconds timeout);
std::chrono::milliseconds rendezvous_log_interval();

// Design note "job id": the environment variable TORCHELASTIC_RUN_ID names the job, as torchrun
// sets it from --rdzv-id (tools/dpe-launch --rdzv-id and --standalone set it too). With the
// "env://" and "tcp://" rendezvous, rank 0 publishes its id in its store before any rank
// registers, and every other rank compares its own with it first: a rank of another job that
// reaches this store (a wrong endpoint, a port another job took) fails at once with both ids named,
// rather than joining this job or waiting out the rendezvous timeout. Unset is an id of its own
// ("none"), matching only unset. It names jobs; it is no secret (DPE_STORE_TOKEN is the secret).

// Creates the default process group and returns it. backend: "gloo" (host devices) or "nccl"
// (one GPU per process: this rank drives cuda:LOCAL_RANK); "nccl" throws before any rendezvous
// when the process sees no GPU, or none for its local rank. world_size/rank of -1 are read from
// the environment. Blocks until every rank has joined or the rendezvous timeout (design note
// "rendezvous wait") has passed (dpe::Error naming the missing ranks); `timeout` is also the
// collectives' timeout. Throws if a default group exists.
std::shared_ptr<ProcessGroup> init_process_group(
    const std::string& backend = "gloo", const std::string& init_method = "env://",
    int world_size = -1, int rank = -1, std::chrono::milliseconds timeout = kDefaultTimeout);

// As above, rendezvous through a store the caller made (PyTorch's store= argument), e.g. a
// TCPStore client of a server that a test or a launcher already runs.
std::shared_ptr<ProcessGroup> init_process_group(
    const std::string& backend, std::shared_ptr<gloo::rendezvous::Store> store, int world_size,
    int rank, std::chrono::milliseconds timeout = kDefaultTimeout);

// A process group that is not the default one (several groups may exist).
std::shared_ptr<ProcessGroup> new_process_group(const std::string& backend,
                                                std::shared_ptr<gloo::rendezvous::Store> store,
                                                int world_size, int rank,
                                                std::chrono::milliseconds timeout,
                                                const std::string& prefix);

bool is_initialized();
// The default group; throws dpe::Error when init_process_group has not been called.
std::shared_ptr<ProcessGroup> default_group();
// Drops the default group (and the store it rendezvoused through). A no-op without one.
void destroy_process_group();

int get_rank();          // 0 without a default group
int get_world_size();    // 1 without a default group
int get_local_rank();    // from the environment (LOCAL_RANK, ...); 0 when unset
bool is_main_process();  // get_rank() == 0
void barrier();          // no-op without a default group

// The seeds' reduce_value: all-reduces `value` in place over the default group (sum, divided by
// the world size when `average`) and returns it. Returns `value` untouched for one process.
Tensor reduce_value(Tensor value, bool average = true);

}  // namespace distributed
}  // namespace dpe
