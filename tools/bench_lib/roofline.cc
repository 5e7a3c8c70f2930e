#include "tools/bench_lib/roofline.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "engine/core/error.h"
#include "tools/cost_model/host_cluster.h"

namespace dpe::tools {

namespace {

// What an event moves: a copy reads and writes its bytes, a fill writes them.
double moved_bytes(const TraceEvent& e) {
  return static_cast<double>(e.bytes_read) + static_cast<double>(e.bytes_written);
}

bool priced(const TraceEvent& e) {
  return e.kind == TraceKind::kOp || e.kind == TraceKind::kCopy || e.kind == TraceKind::kFill;
}

}  // namespace

Roofline roofline(const std::vector<TraceEvent>& events, const MachineRates& rates) {
  DPE_CHECK(rates.peak_gflops > 0 && rates.memory_gbs > 0,
            "roofline: peak " << rates.peak_gflops << " GFLOP/s, memory " << rates.memory_gbs
                              << " GB/s (both must be positive)");
  // Per device, per (name, direction): the shares; and each device's bound.
  using Key = std::tuple<std::string, bool>;
  std::map<std::string, std::map<Key, OpShare>> by_device;
  std::map<std::string, Roofline> totals;
  for (const TraceEvent& e : events) {
    if (!priced(e)) continue;
    const std::string device = e.device.str();
    OpShare& s = by_device[device][Key{e.name, e.backward}];
    s.name = e.name;
    s.op_class = e.op_class;
    s.backward = e.backward;
    s.timed = e.kind == TraceKind::kOp;
    ++s.calls;
    s.flops += e.flops;
    s.bytes += moved_bytes(e);
    s.measured_ms += static_cast<double>(e.duration_ns) / 1e6;
    // A convolution's products with its padding are not work the machine must do.
    const double compute_ms = (e.flops - e.padding_flops) / (rates.peak_gflops * 1e9) * 1e3;
    const double memory_ms = moved_bytes(e) / (rates.memory_gbs * 1e9) * 1e3;
    const double bound = std::max(compute_ms, memory_ms);
    s.bound_ms += bound;
    Roofline& t = totals[device];
    t.bound_ms += bound;
    (compute_ms >= memory_ms ? t.compute_bound_ms : t.memory_bound_ms) += bound;
    if (e.kind == TraceKind::kOp) t.kernel_ms += static_cast<double>(e.duration_ns) / 1e6;
  }
  DPE_CHECK(!totals.empty(), "roofline: the trace has no op, copy or fill");
  auto busiest = std::max_element(totals.begin(), totals.end(), [](const auto& a, const auto& b) {
    return a.second.bound_ms < b.second.bound_ms;
  });
  Roofline r = busiest->second;
  r.rates = rates;
  r.device = busiest->first;
  for (auto& [key, share] : by_device[r.device]) r.ops.push_back(share);
  std::sort(r.ops.begin(), r.ops.end(), [](const OpShare& a, const OpShare& b) {
    return a.measured_ms != b.measured_ms ? a.measured_ms > b.measured_ms : a.bound_ms > b.bound_ms;
  });
  return r;
}

int64_t memory_measure_bytes(const std::vector<TraceEvent>& events) {
  constexpr int64_t kFloor = int64_t{64} << 10;  // below it a memcpy's time is the clock's
  if (std::none_of(events.begin(), events.end(), sim::is_memory_bound_kernel)) return kFloor;
  return std::max(kFloor, sim::memory_op_bytes(events));
}

double measure_memory_gbs(int64_t bytes, int reps) {
  // measure_memcpy_gbs gives the bytes copied per second; each is read and written.
  return 2 * sim::measure_memcpy_gbs(reps, bytes);
}

}  // namespace dpe::tools
