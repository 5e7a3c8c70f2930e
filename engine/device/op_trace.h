// OpTrace: a record of what one training step really did, op by op: every backend op (name,
// shapes, FLOPs, bytes read and written, device), every copy between devices, every fill, every
// autograd node of backward with the nodes it feeds, every DDP bucket launch. The cost model
// (tools/sim) replays it on described GPUs; see docs/cluster_model.md.
//
// Design note "the real schedule, optionally without the arithmetic": the hooks sit where every op
// already passes (the validating backend front, Runtime::copy, Tensor's fill, autograd's GraphTask,
// the DDP reducer), so the trace is the engine's own schedule for any model, not an estimate. With
// execute = false the hooks record and skip the work (kernels, copies, fills): memory is still
// allocated and accounted, so per-device peaks are real, but nothing is computed — a GPT-2 step
// over 16 host devices is traced in seconds. Values are then garbage: only shapes, order and
// memory mean anything, and code that branches on values (a NaN check) must not run under it.
//
// Threading contract: start() and stop() are called by one thread while no step runs; record() and
// the scopes may be used from any thread during a trace; off a trace they cost one atomic load.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/device/device.h"
#include "engine/device/memory_category.h"

namespace dpe {

enum class TraceKind { kOp, kCopy, kFill, kNode, kBucket };
const char* trace_kind_name(TraceKind kind);

// What bounds an op on a GPU, for the roofline's efficiency factor: "gemm" (linear, matmul, bmm),
// "conv", and memory-bound classes "elementwise", "norm", "softmax", "embedding", "loss", "pool",
// "reduction", "optimizer", "fill", "copy".
struct OpCost {
  const char* op_class = "elementwise";
  double flops = 0;
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  std::vector<std::vector<int64_t>> shapes;  // of the op's tensor arguments, in call order
};

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
  int64_t bytes_read = 0;  // kCopy and kBucket: the bytes moved
  int64_t bytes_written = 0;
  std::vector<std::vector<int64_t>> shapes;
  int64_t start_ns = 0;     // from the trace's start, when executing
  int64_t duration_ns = 0;  // measured, when executing
  int thread = 0;           // small id of the recording thread, in order of first appearance
};

struct TraceOptions {
  bool execute = true;  // false: record and skip the work (see the design note)
};

class OpTrace {
 public:
  // Starts recording in this process. Throws when a trace is already active.
  static void start(const TraceOptions& options = {});
  // Stops and returns the events in seq order.
  static std::vector<TraceEvent> stop();
  static bool active() { return active_.load(std::memory_order_acquire); }
  // False only during a trace with execute = false.
  static bool executing() { return !active() || execute_.load(std::memory_order_relaxed); }
  // Adds the thread's context (category, backward, node, thread id, seq) and appends.
  static void record(TraceEvent event);
  // The id of an autograd node within the trace (the first call for a pointer allocates one).
  static int64_t node_id(const void* node);

 private:
  static std::atomic<bool> active_;
  static std::atomic<bool> execute_;
};

// Times and records one op of `device` (when a trace is active). execute() says whether to do the
// work: false under a trace with execute = false.
class TracedOp {
 public:
  // `cost` (a callable returning OpCost) runs only while a trace is active.
  template <class CostFn>
  TracedOp(const char* name, Device device, CostFn&& cost)
      : tracing_(OpTrace::active()), execute_(OpTrace::executing()) {
    if (tracing_) begin(name, device, cost());
  }
  ~TracedOp();
  TracedOp(const TracedOp&) = delete;
  TracedOp& operator=(const TracedOp&) = delete;
  bool execute() const { return execute_; }

 private:
  void begin(const char* name, Device device, OpCost cost);

  bool tracing_;
  bool execute_;
  const char* name_ = nullptr;
  Device device_;
  OpCost cost_;
  std::chrono::steady_clock::time_point start_;
};

// Marks the calling thread as running autograd node `node` of backward; records the node with the
// nodes it feeds. Ops recorded inside carry its id and backward = true.
class TraceNodeScope {
 public:
  TraceNodeScope(const void* node, const std::string& name, Device device,
                 const std::vector<const void*>& next);
  ~TraceNodeScope();
  TraceNodeScope(const TraceNodeScope&) = delete;
  TraceNodeScope& operator=(const TraceNodeScope&) = delete;

 private:
  bool tracing_;
  int64_t previous_node_ = -1;
  bool previous_backward_ = false;
};

// Records a copy of `bytes` from src to dst; returns whether to perform it.
bool trace_copy(Device src, Device dst, int64_t bytes);
// Records a fill of `bytes` on device; returns whether to perform it.
bool trace_fill(Device device, int64_t bytes);

}  // namespace dpe
