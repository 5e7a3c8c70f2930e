#include "engine/device/op_trace.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "engine/core/error.h"

namespace dpe {

std::atomic<bool> OpTrace::active_{false};
std::atomic<bool> OpTrace::execute_{true};

namespace {

struct TraceState {
  std::mutex mu;
  std::vector<TraceEvent> events;
  std::unordered_map<const void*, int64_t> node_ids;
  std::atomic<int64_t> seq{0};
  std::atomic<int> threads{0};
  uint64_t generation = 0;  // bumps per trace, so thread ids restart
  std::chrono::steady_clock::time_point start;
};

TraceState& state() {
  static TraceState s;
  return s;
}

struct ThreadContext {
  int64_t node = -1;
  bool backward = false;
  int thread = -1;
  uint64_t generation = 0;
};
thread_local ThreadContext t_context;

int thread_id() {
  TraceState& s = state();
  if (t_context.thread < 0 || t_context.generation != s.generation) {
    t_context.thread = s.threads.fetch_add(1);
    t_context.generation = s.generation;
  }
  return t_context.thread;
}

int64_t since_start(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t - state().start).count();
}

void append(TraceEvent event, bool assign_seq) {
  TraceState& s = state();
  if (assign_seq) event.seq = s.seq.fetch_add(1);
  event.category = current_memory_category();
  event.backward = t_context.backward;
  if (event.kind != TraceKind::kNode) event.node = t_context.node;
  event.thread = thread_id();
  std::lock_guard<std::mutex> lock(s.mu);
  s.events.push_back(std::move(event));
}

}  // namespace

const char* trace_kind_name(TraceKind kind) {
  switch (kind) {
    case TraceKind::kOp:
      return "op";
    case TraceKind::kCopy:
      return "copy";
    case TraceKind::kFill:
      return "fill";
    case TraceKind::kNode:
      return "node";
    case TraceKind::kBucket:
      return "bucket";
  }
  return "?";
}

void OpTrace::start(const TraceOptions& options) {
  TraceState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  DPE_CHECK(!active_.load(), "OpTrace::start: a trace is already active");
  s.events.clear();
  s.node_ids.clear();
  s.seq = 0;
  s.threads = 0;
  ++s.generation;
  s.start = std::chrono::steady_clock::now();
  execute_.store(options.execute);
  active_.store(true, std::memory_order_release);
}

std::vector<TraceEvent> OpTrace::stop() {
  TraceState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  DPE_CHECK(active_.load(), "OpTrace::stop without start");
  active_.store(false, std::memory_order_release);
  execute_.store(true);
  std::vector<TraceEvent> out;
  out.swap(s.events);
  std::sort(out.begin(), out.end(),
            [](const TraceEvent& a, const TraceEvent& b) { return a.seq < b.seq; });
  return out;
}

void OpTrace::record(TraceEvent event) {
  if (!active()) return;
  append(std::move(event), true);
}

int64_t OpTrace::node_id(const void* node) {
  TraceState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto [it, inserted] = s.node_ids.emplace(node, static_cast<int64_t>(s.node_ids.size()));
  return it->second;
}

void TracedOp::begin(const char* name, Device device, OpCost cost) {
  name_ = name;
  device_ = device;
  cost_ = std::move(cost);
  start_ = std::chrono::steady_clock::now();
}

TracedOp::~TracedOp() {
  if (!tracing_ || !OpTrace::active()) return;
  const auto end = std::chrono::steady_clock::now();
  TraceEvent e;
  e.kind = TraceKind::kOp;
  e.name = name_;
  e.op_class = cost_.op_class;
  e.device = device_;
  e.flops = cost_.flops;
  e.bytes_read = cost_.bytes_read;
  e.bytes_written = cost_.bytes_written;
  e.shapes = std::move(cost_.shapes);
  if (execute_) {
    e.start_ns = since_start(start_);
    e.duration_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(end - start_).count();
  }
  OpTrace::record(std::move(e));
}

TraceNodeScope::TraceNodeScope(const void* node, const std::string& name, Device device,
                               const std::vector<const void*>& next)
    : tracing_(OpTrace::active()) {
  if (!tracing_) return;
  previous_node_ = t_context.node;
  previous_backward_ = t_context.backward;
  TraceEvent e;
  e.kind = TraceKind::kNode;
  e.name = name;
  e.device = device;
  e.node = OpTrace::node_id(node);
  for (const void* n : next) e.next_nodes.push_back(OpTrace::node_id(n));
  t_context.node = e.node;
  t_context.backward = true;
  OpTrace::record(std::move(e));
}

TraceNodeScope::~TraceNodeScope() {
  if (!tracing_) return;
  t_context.node = previous_node_;
  t_context.backward = previous_backward_;
}

namespace {

// Records a copy or fill of `bytes` on `device`; returns whether to perform it.
bool trace_transfer(TraceKind kind, Device device, Device src, int64_t bytes) {
  if (!OpTrace::active()) return true;
  TraceEvent e;
  e.kind = kind;
  e.name = e.op_class = trace_kind_name(kind);
  e.device = device;
  e.src = src;
  if (kind == TraceKind::kCopy) e.bytes_read = bytes;
  e.bytes_written = bytes;
  OpTrace::record(std::move(e));
  return OpTrace::executing();
}

}  // namespace

bool trace_copy(Device src, Device dst, int64_t bytes) {
  return trace_transfer(TraceKind::kCopy, dst, src, bytes);
}

bool trace_fill(Device device, int64_t bytes) {
  return trace_transfer(TraceKind::kFill, device, Device(), bytes);
}

}  // namespace dpe
