// OpTrace: a record of what one training step really did, op by op: every backend prim (name,
// shapes, FLOPs, bytes read and written, device), every copy between devices, every fill, every
// autograd node of backward with the nodes it feeds, every DDP bucket launch. The cost model
// (tools/cost_model) replays it on described GPUs; see docs/cluster_model.md.
//
// Design note "a layer of its own": a trace installs, for its lifetime, a recording decorator in
// place of every device type's op table (engine/backend/op_table.h) and itself as the step
// observer (engine/device/step_observer.h), and puts the originals back when it stops. The engine
// has no trace code and no switch: the trace is the engine's own schedule for any model, not an
// estimate, and a step without a trace costs what it did before tracing existed.
//
// Design note "the real schedule, optionally without the arithmetic": with execute = false the
// trace records and skips the work (kernels, copies, fills): memory is still allocated and
// accounted, so per-device peaks are real, but nothing is computed — a GPT-2 step over 16 host
// devices is traced in seconds. Values are then garbage: only shapes, order and memory mean
// anything, and code that branches on values (a NaN check) must not run under it.
//
// Threading contract: one trace at a time per process; it is constructed and stopped by one
// thread while no step runs; the recording happens from any thread during the step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/device/device.h"
#include "engine/device/memory_category.h"

namespace dpe {

enum class TraceKind { kOp, kCopy, kFill, kNode, kBucket };
const char* trace_kind_name(TraceKind kind);

struct TraceEvent {
  int64_t seq = 0;  // order of recording (the schedule's order on each device)
  TraceKind kind = TraceKind::kOp;
  std::string name;      // op name ("linear", "bmm"), autograd node name, "copy", "fill"
  std::string op_class;  // OpCost::op_class ("copy" for copies, "" for nodes and buckets)
  Device device;         // where it runs; a copy's destination
  Device src;            // a copy's source
  MemoryCategory category = MemoryCategory::kOther;  // the allocating scope: DataParallel's phase
  bool backward = false;                             // ran inside autograd's backward
  int64_t node = -1;                // the backward node it ran in (kNode: the node's own id)
  std::vector<int64_t> next_nodes;  // kNode: the nodes it hands gradients to
  int64_t bucket = -1;              // kBucket: the bucket's index
  double flops = 0;
  double padding_flops = 0;  // of flops, a convolution's products with its padding (OpCost)
  int64_t bytes_read = 0;    // kCopy and kBucket: the bytes moved
  int64_t bytes_written = 0;
  std::vector<std::vector<int64_t>> shapes;
  DType dtype = DType::kFloat32;  // kOp: the dtype it computed in (OpCost::dtype; "to": its target)
  int64_t start_ns = 0;     // from the trace's start, when executing
  int64_t duration_ns = 0;  // measured, when executing
  int thread = 0;           // small id of the recording thread, in order of first appearance
};

struct TraceOptions {
  bool execute = true;  // false: record and skip the work (see the design note)
};

class OpTrace {
 public:
  // Starts recording in this process. Throws dpe::Error when a trace (or another step observer)
  // is already installed.
  explicit OpTrace(const TraceOptions& options = {});
  // Stops the trace if stop() was not called (the events are then dropped).
  ~OpTrace();
  OpTrace(const OpTrace&) = delete;
  OpTrace& operator=(const OpTrace&) = delete;

  // Stops and returns the events in seq order. Throws when already stopped.
  std::vector<TraceEvent> stop();

  class Recorder;  // op_trace.cc

 private:
  std::unique_ptr<Recorder> recorder_;
};

}  // namespace dpe
