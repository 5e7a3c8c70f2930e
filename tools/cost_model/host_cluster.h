// host_cluster: the cost model's "host mode": this machine's host devices described as a cluster
// (a "GPU" whose peaks are the measured single-thread SGEMM and memcpy rates, links at the memcpy
// rate, DDP's ranks joined by Gloo over loopback TCP as a network), to check the replay against
// //tools:bench on the same machine (tests/tools/cost_model/host_check_test.cc).
//
// Threading contract: measure_* reset the host devices (Runtime::set_host_devices); call them from
// one thread that is not a device worker, with no other work on the host devices. The rest are
// pure functions.
#pragma once

#include <cstdint>

#include "tools/cost_model/cluster.h"
#include "tools/cost_model/replay.h"

namespace dpe::sim {

struct HostRates {
  double sgemm_gflops = 100;         // one oneDNN SGEMM on one thread, the machine otherwise idle
  double sgemm_gflops_shared = 100;  // per device while `devices` devices each run one at once
  int shared_devices = 1;            // the device count of sgemm_gflops_shared
  double memcpy_gbs = 5;             // one thread copying a few MB (bytes copied per second)
  // Gloo's all-reduce of 2 ranks on loopback TCP as alpha-beta: t = 2 alpha + bytes / gbs (the
  // replay's ring over a network of one rank per node). Measured by the caller (it needs ranks).
  double gloo_alpha_us = 50;
  double gloo_gbs = 1;
};

struct GlooRates {
  double small_us = 0, large_us = 0;  // median all-reduce of 64 KiB and 4 MiB
  double alpha_us = 0, gbs = 0;       // fitted: t = 2 alpha + bytes / gbs
};
// Gloo's all-reduce between 2 processes of this machine (forked children rendezvousing through a
// fresh directory, one host device of one thread each): the medians of 20 timed all-reduces of
// 64 KiB and 4 MiB (after 5, each after a barrier), and the alpha-beta through both. Forks: call it
// while this process runs no other thread (before any host device or store exists).
GlooRates measure_gloo_all_reduce();

// One oneDNN SGEMM (n x n x n) on host:0 with one compute thread; GFLOP/s, median of `reps`.
double measure_sgemm_gflops(int64_t n, int reps);
// Single-thread SGEMM alone and on `devices` host devices at once (n = 512: the size of the Mlp's
// GEMMs), and the memcpy rate of 64 MiB (DRAM, not cache). Leaves `devices` host devices of one
// thread each.
HostRates measure_host_rates(int devices);

// `devices` host devices as one node: links through host memory at the memcpy rate, the shared
// SGEMM rate when devices > 1. For DataParallel (replay_dp).
Cluster host_cluster(int devices, const HostRates& rates);
// `ranks` processes of one host device each, joined by Gloo over loopback TCP (the "network").
// For DDP (replay_ddp with gpus = ranks).
Cluster host_ddp_cluster(int ranks, const HostRates& rates);
// framework("dpe") with this machine's hand-offs, the host's efficiencies (see host_cluster.cc),
// no device context.
ReplayOptions host_replay_options();

}  // namespace dpe::sim
