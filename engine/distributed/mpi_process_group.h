// MpiProcessGroup: ProcessGroup on MPI (Debian's Open MPI) for tensors on host devices, as
// PyTorch's init_process_group("mpi"). The job is started by mpirun (or srun with PMIx), and rank
// and world size are the MPI library's own: no store, no MASTER_ADDR. Within a node Open MPI moves
// data through shared memory (its vader transport, single-copy where the kernel allows), across
// nodes over the fabric it finds; that is why it exists beside Gloo, whose TCP loopback costs
// milliseconds per megabyte on one host (docs/performance.md, "Which backend on one host").
//
// Design note "MPI in threads": MPI is initialised once per process, asking for
// MPI_THREAD_MULTIPLE; each group duplicates MPI_COMM_WORLD and calls MPI only from its own
// communication thread (process_group.h). Where the library grants only MPI_THREAD_SERIALIZED,
// every MPI call of every group takes one process-wide lock. MPI is finalised at exit.
//
// Failures: argument errors are dpe::Errors on the caller's thread, as for every group; an error
// code from the library becomes a dpe::Error naming the op and the rank, and breaks the group.
// A rank that dies ends the whole job: mpirun sees it exit without MPI_Finalize and kills the
// other ranks with a message naming it, so no rank hangs waiting for it. MPI has no timeout, and
// a blocked MPI call cannot be cancelled: a rank that stays alive but stops calling collectives
// (or is stopped) would stall the others for good, so init_process_group("mpi") gives the group a
// watchdog that ends the job with abort_job once a collective has run for the timeout, naming the
// rank that holds it up (design note "collective watchdog", watchdog.h).
//
// Threading contract: as ProcessGroup (process_group.h).
#pragma once

#include <memory>
#include <string>

#include "engine/distributed/process_group.h"

namespace dpe {
namespace distributed {

class MpiProcessGroup : public ProcessGroup {
 public:
  // Initialises MPI if this process has not (arguments are not needed by Open MPI), then joins
  // a duplicate of MPI_COMM_WORLD. Collective over every rank of the job.
  MpiProcessGroup();
  ~MpiProcessGroup() override;

  std::string backend() const override { return "mpi"; }
  bool waits_spin() const override { return true; }  // Open MPI's progress loop
  int local_size() const override { return local_size_; }

  // Registered with atexit when this process initialises MPI: stops every live group's
  // communication thread, then calls MPI_Finalize. A group used after that throws.
  static void finalize_at_exit();

  // Ends every process of the job with exit code `code` (MPI_Abort on MPI_COMM_WORLD), from any
  // thread, even while another is blocked in an MPI call: the watchdog's way out (watchdog.h).
  [[noreturn]] static void abort_job(int code);

  // MPI's rank and world size, initialising MPI if needed (for init_process_group's checks).
  static int world_rank();
  static int world_size();

 protected:
  void run_all_reduce(Tensor& tensor, ReduceOp op) override;
  void run_broadcast(Tensor& tensor, int root) override;
  void run_all_gather(const Tensor& input, Tensor& gathered) override;
  void run_reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op) override;
  void run_barrier() override;

 private:
  void release();  // stops the communication thread and frees the communicator; idempotent
  // Throws a dpe::Error naming `op` and this rank when `rc` is an MPI error code.
  void check(int rc, const char* op) const;
  struct Comm;
  std::unique_ptr<Comm> comm_;
  int local_size_ = 1;  // the ranks on this machine (MPI_COMM_TYPE_SHARED)
};

}  // namespace distributed
}  // namespace dpe
