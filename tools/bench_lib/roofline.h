// Roofline: how close a measured step is to what this machine allows. A traced step (its every
// prim, copy and fill, engine/trace/op_trace.h) is priced op by op at max(FLOPs / the GEMM peak
// (less a convolution's products with its zero padding, which oneDNN skips),
// bytes read + written / the memory bandwidth), both measured on this machine; their sum on the
// busiest device is the step time the roofline allows. Beside it, op by op, the time each op
// really took in the traced step, so that "where does the step leave the peak" is a table.
//
// Design note "one peak, one bandwidth": every op meets the same two ceilings. GEMMs and
// convolutions are compute-bound at the measured single-thread SGEMM rate; everything else is
// memory-bound at one thread's memcpy rate at the size the step's memory-bound ops move (their
// byte-weighted median, sim::memory_op_bytes): a step whose activations fit the caches is priced
// at the caches' rate, not DRAM's. Copies and fills are priced but not timed by the trace.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/trace/op_trace.h"

namespace dpe::tools {

struct MachineRates {
  double peak_gflops = 0;   // GEMMs and convolutions
  double memory_gbs = 0;    // bytes read + written per second by memory-bound ops
  int64_t measured_at = 0;  // the bytes per op memory_gbs was measured at
};

// One op name and direction (forward or backward) of a traced step on one device.
struct OpShare {
  std::string name;      // the prim's name ("linear_backward", "layer_norm"), "copy", "fill"
  std::string op_class;  // OpCost::op_class: "gemm", "conv", "elementwise", ...
  bool backward = false;
  int64_t calls = 0;
  double flops = 0;
  double bytes = 0;        // read + written
  double measured_ms = 0;  // inside the prim, summed over calls; 0 for copies and fills
  double bound_ms = 0;     // what the roofline allows, summed over calls
  bool timed = true;       // false for copies and fills (the trace does not time them)
};

struct Roofline {
  MachineRates rates;
  std::string device;           // the busiest device: the one with the largest bound
  double bound_ms = 0;          // the step the roofline allows on it
  double compute_bound_ms = 0;  // the ops whose FLOPs set their bound
  double memory_bound_ms = 0;   // the ops whose bytes set it
  double kernel_ms = 0;         // its prims' measured time
  std::vector<OpShare> ops;     // its ops, largest measured time first
};

// The roofline of `events` (an executed OpTrace of one step) at `rates`. Throws dpe::Error when
// the rates are not positive or the trace has no op.
Roofline roofline(const std::vector<TraceEvent>& events, const MachineRates& rates);

// The bytes per op at which to measure the memory bandwidth for `events` (see the design note).
int64_t memory_measure_bytes(const std::vector<TraceEvent>& events);

// One thread's memory rate moving `bytes` per op (read + written), median of `reps`.
double measure_memory_gbs(int64_t bytes, int reps);

}  // namespace dpe::tools
