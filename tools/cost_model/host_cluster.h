// host_cluster: the cost model's "host mode": this machine's host devices described as a cluster
// (a "GPU" whose peaks are the measured single-thread GEMM and memcpy rates, links at the DRAM
// rate, DDP's ranks joined by their process group, MPI or Gloo, as a network), to check the
// replay against //tools:bench on the same machine (host_check.h, //tools:host_check).
//
// The rates are measured where the step spends its time: the GEMMs at the traced step's own
// shapes, with as many devices busy at once as the step has; DDP's all-reduce at the step's own
// bucket sizes between two processes, as DDP's ranks run it. Each measurement is short, so a
// caller can repeat it between its bench rounds and take medians (a machine's load changes from
// one second to the next).
//
// Threading contract: measure_* set the host devices (Runtime::set_host_devices); call them from
// one thread that is not a device worker, with no other work on the host devices.
// measure_all_reduce starts processes (fork + execve of `self_exe`, safe with threads
// running). The rest are pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/cost_model/cluster.h"
#include "tools/cost_model/replay.h"
#include "tools/cost_model/step_trace.h"

namespace dpe::sim {

struct HostRates {
  double sgemm_gflops = 100;         // one device's GEMMs, one thread, the others idle
  double sgemm_gflops_shared = 100;  // per device while `shared_devices` run theirs at once
  int shared_devices = 1;            // the device count of sgemm_gflops_shared
  double memcpy_gbs = 5;             // memory-bound ops: one thread's memcpy (bytes copied per s)
  // One thread's memcpy of a buffer no cache holds (measure_memcpy_gbs's default size): the rate
  // of data another core wrote: DataParallel's copies between host devices. 0: memcpy_gbs.
  double dram_gbs = 0;
  // DDP's all-reduce of 2 ranks (MPI's shared memory or Gloo's loopback TCP) as alpha-beta:
  // t = 2 alpha + bytes / gbs (the replay's ring over a network of one rank per node). See
  // measure_all_reduce.
  double ddp_alpha_us = 50;
  double ddp_gbs = 1;
};

// The GEMM-class ops of `trace` (linear, linear_backward, matmul: what the engine's
// models use on host devices; others throw) run for real with their traced shapes, every traced
// device at once on its own thread (one compute thread each, as //tools:bench runs them), `reps`
// times after one warm-up. Returns the slowest device's GFLOP/s (its GEMM FLOPs / the median time
// of its GEMMs): per device, the rate the replay's "gemm" peak stands for.
double measure_gemm_gflops(const TracedStep& trace, int reps);

// One thread's memcpy moving `moved_bytes` (read + written: a copy of half as many), median of
// `reps`; GB/s copied. 64 MiB is DRAM's rate; a step's memory-bound ops move far less, from the
// caches: memory_op_bytes gives the size to measure at.
double measure_memcpy_gbs(int reps, int64_t moved_bytes = int64_t{128} << 20);

// Whether `e` is a memory-bound kernel: an op but a GEMM or a convolution, a fill, or a copy within
// a device, moving some bytes.
bool is_memory_bound_kernel(const TraceEvent& e);

// The size at which `events`' memory-bound kernels move their bytes: the median of their read +
// written bytes, weighted by those bytes. Throws dpe::Error when there is none.
int64_t memory_op_bytes(const std::vector<TraceEvent>& events);

// The bytes of each bucket all-reduce a DDP trace launches, in launch order.
std::vector<int64_t> bucket_bytes(const TracedStep& ddp_trace);

struct AllReduceRates {
  std::vector<int64_t> bytes;    // the sizes measured: a small message, then the buckets
  std::vector<double> us;        // the median all-reduce of each
  double alpha_us = 0, gbs = 0;  // t = 2 alpha + bytes / gbs through the small message and the
                                 // buckets' total (the replay then gives the buckets' sum exactly)
};
// The all-reduce of `backend` ("mpi" or "gloo"; ReduceOp::kSum, float32, as DDP's reducer)
// between 2 ranks of this machine, started as //tools:bench starts its DDP ranks (mpi: by
// mpirun; gloo: as child processes rendezvousing through a fresh directory), one host device of
// one thread each, running `self_exe` with all_reduce_worker_main's arguments; each rep is a
// barrier, then an all-reduce of 4 KiB and one of each of `buckets` in turn (a DDP step's end of
// backward), each buffer written by the rank's own thread just before (as the reducer fills a
// bucket for its communication thread), timed on rank 0; medians of `reps` after 3 warm-ups.
// `self_exe`'s main() must call all_reduce_worker_main first.
AllReduceRates measure_all_reduce(const std::string& self_exe, const std::vector<int64_t>& buckets,
                                  int reps, const std::string& backend = "mpi");
// The rank side of measure_all_reduce. Returns -1 when argv is not a worker's (the caller
// goes on as usual), else the process's exit code once the rank is done.
int all_reduce_worker_main(int argc, char** argv);

// `devices` host devices as one node: links through host memory at the DRAM rate, the shared
// GEMM rate when devices > 1. For DataParallel (replay_dp).
Cluster host_cluster(int devices, const HostRates& rates);
// `ranks` processes of one host device each, joined by their process group (the "network").
// For DDP (replay_ddp with gpus = ranks).
Cluster host_ddp_cluster(int ranks, const HostRates& rates);
// framework("dpe") with this machine's hand-offs, the host's efficiencies (see host_cluster.cc),
// communication on the compute cores, reduce-add's sums on device 0's core, no device context.
ReplayOptions host_replay_options();

}  // namespace dpe::sim
