#include "engine/trace/op_trace.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <mutex>
#include <unordered_map>

#include "engine/backend/op_table.h"
#include "engine/core/error.h"
#include "engine/device/step_observer.h"

namespace dpe {

namespace {

using Clock = std::chrono::steady_clock;

// What the recording thread is doing, for the events it records: the backward node it runs, and
// its small id within the trace (by generation, so ids restart with every trace).
struct ThreadContext {
  int64_t node = -1;
  bool backward = false;
  int thread = -1;
  uint64_t generation = 0;
};
thread_local ThreadContext t_context;

std::atomic<uint64_t> g_generation{0};

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

// The trace's state, its step observer, and the decorators it puts in place of the op tables.
class OpTrace::Recorder final : public StepObserver {
 public:
  explicit Recorder(const TraceOptions& options)
      : execute_(options.execute), generation_(++g_generation), start_(Clock::now()) {}

  bool execute() const { return execute_; }

  // Adds the thread's context (category, backward, node, thread id, seq) and appends.
  void append(TraceEvent event) {
    event.seq = seq_.fetch_add(1);
    event.category = current_memory_category();
    event.backward = t_context.backward;
    if (event.kind != TraceKind::kNode) event.node = t_context.node;
    event.thread = thread_id();
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(event));
  }

  std::vector<TraceEvent> take() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<TraceEvent> out;
    out.swap(events_);
    std::sort(out.begin(), out.end(),
              [](const TraceEvent& a, const TraceEvent& b) { return a.seq < b.seq; });
    return out;
  }

  int64_t since_start(Clock::time_point t) const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t - start_).count();
  }

  // --- StepObserver ---

  bool on_copy(Device src, Device dst, int64_t bytes) override {
    return transfer(TraceKind::kCopy, dst, src, bytes);
  }
  bool on_fill(Device device, int64_t bytes) override {
    return transfer(TraceKind::kFill, device, Device(), bytes);
  }
  // A dtype conversion is an op of its own in the schedule, named as PyTorch's ("to").
  bool on_convert(Device device, DType from, DType to, int64_t n) override {
    TraceEvent e;
    e.kind = TraceKind::kOp;
    e.name = "to";
    e.op_class = "elementwise";
    e.device = device;
    e.dtype = to;
    e.bytes_read = n * static_cast<int64_t>(dtype_size(from));
    e.bytes_written = n * static_cast<int64_t>(dtype_size(to));
    e.shapes = {{n}};
    append(std::move(e));
    return execute_;
  }
  void on_node_begin(const void* node, const std::string& name, Device device,
                     const std::vector<const void*>& next) override {
    TraceEvent e;
    e.kind = TraceKind::kNode;
    e.name = name;
    e.device = device;
    e.node = node_id(node);
    for (const void* n : next) e.next_nodes.push_back(node_id(n));
    saved_.push_back({t_context.node, t_context.backward});
    t_context.node = e.node;
    t_context.backward = true;
    append(std::move(e));
  }
  void on_node_end() override {
    // The autograd engine runs a node wholly on one thread, so the saved context is that thread's;
    // the stack is per thread too (thread_local below).
    if (saved_.empty()) return;
    t_context.node = saved_.back().node;
    t_context.backward = saved_.back().backward;
    saved_.pop_back();
  }
  void on_collective(const char* name, Device device, int64_t index, int64_t bytes) override {
    TraceEvent e;
    e.kind = TraceKind::kBucket;
    e.name = name;
    e.device = device;
    e.bucket = index;
    e.bytes_read = e.bytes_written = bytes;
    append(std::move(e));
  }

 private:
  struct SavedContext {
    int64_t node;
    bool backward;
  };

  int thread_id() {
    if (t_context.thread < 0 || t_context.generation != generation_) {
      t_context.thread = threads_.fetch_add(1);
      t_context.generation = generation_;
    }
    return t_context.thread;
  }

  int64_t node_id(const void* node) {
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, inserted] = node_ids_.emplace(node, static_cast<int64_t>(node_ids_.size()));
    return it->second;
  }

  bool transfer(TraceKind kind, Device device, Device src, int64_t bytes) {
    TraceEvent e;
    e.kind = kind;
    e.name = e.op_class = trace_kind_name(kind);
    e.device = device;
    e.src = src;
    if (kind == TraceKind::kCopy) e.bytes_read = bytes;
    e.bytes_written = bytes;
    append(std::move(e));
    return execute_;
  }

  const bool execute_;
  const uint64_t generation_;
  const Clock::time_point start_;
  std::mutex mu_;
  std::vector<TraceEvent> events_;
  std::unordered_map<const void*, int64_t> node_ids_;
  std::atomic<int64_t> seq_{0};
  std::atomic<int> threads_{0};
  static thread_local std::vector<SavedContext> saved_;
};

thread_local std::vector<OpTrace::Recorder::SavedContext> OpTrace::Recorder::saved_;

namespace {

// The decorator of one device type's table: records each prim with its cost, and runs it (timed)
// unless the trace skips the work.
class TracingTable final : public OpTable {
 public:
  TracingTable(OpTable& inner, OpTrace::Recorder& recorder) : inner_(inner), recorder_(recorder) {}

#define DPE_TRACING_SLOT(Op) \
  void run(const prim::Op& op) override { record(op); }
  DPE_PRIMS(DPE_TRACING_SLOT)
#undef DPE_TRACING_SLOT

  bool has(PrimId id) const override { return inner_.has(id); }
  DTypeSet dtypes(PrimId id) const override { return inner_.dtypes(id); }
  bool channels_last() const override { return inner_.channels_last(); }

 private:
  template <class Op>
  void record(const Op& op) {
    OpCost cost = op.cost();
    TraceEvent e;
    e.kind = TraceKind::kOp;
    e.name = Op::kName;
    e.op_class = cost.op_class;
    e.device = op.first().device();
    e.flops = cost.flops;
    e.padding_flops = cost.padding_flops;
    e.bytes_read = cost.bytes_read;
    e.bytes_written = cost.bytes_written;
    e.shapes = std::move(cost.shapes);
    e.dtype = cost.dtype;
    if (recorder_.execute()) {
      const Clock::time_point start = Clock::now();
      inner_.run(op);
      e.start_ns = recorder_.since_start(start);
      e.duration_ns =
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
    }
    recorder_.append(std::move(e));
  }

  OpTable& inner_;
  OpTrace::Recorder& recorder_;
};

// The decorators a trace installs, and the tables they replaced.
struct Installed {
  std::array<std::unique_ptr<TracingTable>, kDeviceTypeCount> tables;
  std::array<OpTable*, kDeviceTypeCount> originals{};
};
std::mutex g_install_mu;
Installed* g_installed = nullptr;  // under g_install_mu: the active trace's, or null

void uninstall() {
  std::lock_guard<std::mutex> lock(g_install_mu);
  if (g_installed == nullptr) return;
  for (int t = 0; t < kDeviceTypeCount; ++t) {
    if (g_installed->originals[t] != nullptr) {
      replace_op_table(static_cast<DeviceType>(t), g_installed->originals[t]);
    }
  }
  set_step_observer(nullptr);
  delete g_installed;
  g_installed = nullptr;
}

}  // namespace

OpTrace::OpTrace(const TraceOptions& options) : recorder_(std::make_unique<Recorder>(options)) {
  std::lock_guard<std::mutex> lock(g_install_mu);
  DPE_CHECK(g_installed == nullptr && step_observer() == nullptr,
            "OpTrace: a trace is already active");
  auto installed = std::make_unique<Installed>();
  for (int t = 0; t < kDeviceTypeCount; ++t) {
    const DeviceType type = static_cast<DeviceType>(t);
    OpTable* inner = find_op_table(type);
    if (inner == nullptr) continue;
    installed->tables[t] = std::make_unique<TracingTable>(*inner, *recorder_);
    installed->originals[t] = replace_op_table(type, installed->tables[t].get());
  }
  set_step_observer(recorder_.get());
  g_installed = installed.release();
}

OpTrace::~OpTrace() {
  if (recorder_) uninstall();
}

std::vector<TraceEvent> OpTrace::stop() {
  DPE_CHECK(recorder_ != nullptr, "OpTrace::stop: the trace was already stopped");
  uninstall();
  std::vector<TraceEvent> events = recorder_->take();
  recorder_.reset();
  return events;
}

}  // namespace dpe
