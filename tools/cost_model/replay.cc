#include "tools/cost_model/replay.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include "engine/core/error.h"

namespace dpe::sim {

ReplayOptions::ReplayOptions() : framework(sim::framework("pytorch")) {}

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// bytes at `gbs` GB/s, in microseconds.
double transfer_us(double bytes, double gbs) { return bytes / (gbs * 1e3); }

// A resource's rate while `transfers` cross it at once: a host bridge loses to concurrent
// transfers (LinkRates::host_duplex_efficiency).
double shared_gbs(const Cluster& c, const std::string& resource, int transfers) {
  const double gbs = c.resource_gbs(resource);
  return resource.rfind("bridge:", 0) == 0 && transfers >= 2 ? gbs * c.links.host_duplex_efficiency
                                                             : gbs;
}

// --- rings over the cluster's GPUs ---

// The per-byte cost of every edge of a ring (or chain) carrying the same bytes at once, with the
// edges' shared resources loaded together: max over resources of load / bandwidth, in us per byte;
// and the slowest edge's latency.
struct RingCost {
  double us_per_byte = 0;
  double latency_us = 0;
  bool through_host = false;  // an edge inside a node goes through host memory (NCCL's SHM)
};

class Rings {
 public:
  Rings(const Cluster& c, int gpus) : c_(c), gpus_(gpus) {
    g_ = std::min(gpus, c.topology.gpus);
    nodes_ = (gpus + g_ - 1) / g_;
    order_ = best_local_order();
  }

  // A ring through every GPU (closed = true) or the chain from GPU 0 (closed = false).
  RingCost cost(bool closed) const { return cost_of(order_, closed); }

 private:
  RingCost cost_of(const std::vector<int>& order, bool closed) const {
    std::map<std::string, double> load;
    double latency = 0;
    const int n = static_cast<int>(order.size());
    // Edges inside each node; with several nodes the last GPU of a node feeds the next node's
    // first over the network (one flow out of and one into each node's NICs).
    bool through_host = false;
    auto add_edge = [&](int node, int a, int b) {
      for (const std::string& r : c_.path(a, b)) {
        load[prefix(node) + r] += 1;
        through_host = through_host || r.rfind("bridge:", 0) == 0;
      }
      latency = std::max(latency, c_.pair_latency_us(a, b));
    };
    for (int node = 0; node < nodes_; ++node) {
      for (int i = 0; i + 1 < n; ++i) add_edge(node, order[i], order[i + 1]);
    }
    if (nodes_ > 1) {
      for (int node = 0; node < nodes_; ++node) {
        if (!closed && node == nodes_ - 1) break;
        load["nic:out:" + std::to_string(node)] += 1;
        load["nic:in:" + std::to_string((node + 1) % nodes_)] += 1;
      }
      latency = std::max(latency, c_.network.latency_us);
    } else if (closed && n > 1) {
      add_edge(0, order[n - 1], order[0]);
    }
    RingCost out;
    out.latency_us = latency;
    out.through_host = through_host;
    for (const auto& [r, l] : load) {
      const double gbs = r.rfind("nic:", 0) == 0
                             ? c_.network.gbs_per_node
                             : shared_gbs(c_, r.substr(r.find('|') + 1), static_cast<int>(l));
      out.us_per_byte = std::max(out.us_per_byte, l / (gbs * 1e3));
    }
    return out;
  }

  static std::string prefix(int node) { return "n" + std::to_string(node) + "|"; }

  // NCCL searches the topology for its rings; for up to 8 GPUs a node, every order from GPU 0.
  std::vector<int> best_local_order() const {
    std::vector<int> order(g_);
    std::iota(order.begin(), order.end(), 0);
    if (g_ <= 2) return order;
    std::vector<int> best = order;
    double best_cost = cost_of(order, true).us_per_byte;
    while (std::next_permutation(order.begin() + 1, order.end())) {
      const double cost = cost_of(order, true).us_per_byte;
      if (cost < best_cost - 1e-15) {
        best_cost = cost;
        best = order;
      }
    }
    return best;
  }

  const Cluster& c_;
  int gpus_, g_, nodes_;
  std::vector<int> order_;
};

// Concurrent point-to-point transfers within one node: max over resources of the bytes through
// it / its bandwidth, plus the slowest pair's latency.
struct Flow {
  int src, dst;
  int64_t bytes;
};

double flows_us(const Cluster& c, const std::vector<Flow>& flows) {
  std::map<std::string, double> load;
  // The GPU pairs crossing each resource: several tensors of one pair are one transfer.
  std::map<std::string, std::set<std::pair<int, int>>> pairs;
  double latency = 0;
  for (const Flow& f : flows) {
    if (f.src == f.dst || f.bytes == 0) continue;
    for (const std::string& r : c.path(f.src, f.dst)) {
      load[r] += static_cast<double>(f.bytes);
      pairs[r].insert({f.src, f.dst});
    }
    latency = std::max(latency, c.pair_latency_us(f.src, f.dst));
  }
  double t = 0;
  for (const auto& [r, bytes] : load) {
    t = std::max(t, transfer_us(bytes, shared_gbs(c, r, static_cast<int>(pairs[r].size()))));
  }
  return load.empty() ? 0 : t + latency;
}

// --- DataParallel's phases ---

enum DpPhase {
  kFramework,
  kReplicate,
  kScatter,
  kForward,
  kGather,
  kLoss,
  kGradScatter,
  kBackward,
  kReduceAdd,
  kStep,
  kNumDpPhases
};
const char* dp_phase_name(int p) {
  static const char* names[kNumDpPhases] = {"framework",  "replicate", "scatter",      "forward",
                                            "gather",     "loss",      "grad_scatter", "backward",
                                            "reduce_add", "step"};
  return names[p];
}

// `category`: what the event's scope allocated as; in backward, the category of the node it ran
// in (the phase that built the node: the Gather's backward scatters the output gradients, the
// Broadcast's reduces the gradients).
DpPhase dp_phase(const TraceEvent& e, MemoryCategory category) {
  if (e.op_class == "optimizer" || category == MemoryCategory::kOptimizerState) return kStep;
  switch (category) {
    case MemoryCategory::kReplicas:
      return e.backward ? kReduceAdd : kReplicate;
    case MemoryCategory::kGradients:
      return e.backward ? kReduceAdd : kStep;
    case MemoryCategory::kInputs:
      return e.backward ? kBackward : kScatter;
    case MemoryCategory::kOutputs:
      return e.backward ? kGradScatter : kGather;
    case MemoryCategory::kOutputGradients:
      return kLoss;
    default:
      return e.backward ? kBackward : kForward;
  }
}

// One device's stream of kernels: the CPU issues each after `dispatch_us`, the GPU runs it when
// both it is issued and the previous one is done.
struct Stream {
  double cpu = 0, gpu = 0;
  int ops = 0;
  void run(double gpu_us, double dispatch_us) {
    cpu += dispatch_us;
    gpu = std::max(gpu, cpu) + gpu_us;
    ++ops;
  }
};

std::string limiting_phase(const std::vector<std::pair<std::string, double>>& phases) {
  std::string best;
  double t = -1;
  for (const auto& [name, ms] : phases) {
    if (ms > t) {
      t = ms;
      best = name;
    }
  }
  return best;
}

}  // namespace

bool is_kernel(const TraceEvent& e) {
  return e.kind == TraceKind::kOp || e.kind == TraceKind::kFill ||
         (e.kind == TraceKind::kCopy && e.src == e.device);
}

double Efficiency::conv_for(Precision p) const {
  switch (p) {
    case Precision::kTf32:
      return conv_tf32;
    case Precision::kFp16:
    case Precision::kBf16:  // the same tensor-core rate, calibrated on fp16 (AMP) runs
      return conv_fp16;
    case Precision::kFp32:
      break;
  }
  return conv;
}

double op_time_us(const TraceEvent& e, const GpuSpec& gpu, const ReplayOptions& o) {
  const Efficiency& eff = o.efficiency;
  double bytes = static_cast<double>(e.bytes_read + e.bytes_written);
  // Mixed precision keeps activations and their gradients in 16 bits (the trace's bytes are
  // fp32); the optimizer steps the fp32 master weights.
  if (is_mixed(o.precision) && e.op_class != "optimizer") bytes /= 2;
  double t = transfer_us(bytes, gpu.mem_bw_gbs * eff.memory);
  if (e.kind == TraceKind::kOp && e.flops > 0) {
    const bool tensor_math = e.op_class == "gemm" || e.op_class == "conv";
    const double peak = tensor_math ? gpu.peak_tflops(o.precision) : gpu.fp32_tflops;
    const double factor = e.op_class == "gemm"   ? eff.gemm
                          : e.op_class == "conv" ? eff.conv_for(o.precision)
                                                 : 1.0;
    t = std::max(t, e.flops / (peak * factor * 1e6));
  }
  return std::max(t, gpu.launch_us);
}

Collectives::Collectives(const Cluster& c, int gpus) : cluster_(c), gpus_(gpus) {
  if (gpus <= 1) return;
  const RingCost ring = Rings(c, gpus).cost(true);
  us_per_byte_ = ring.us_per_byte;
  latency_us_ = ring.latency_us;
}

double Collectives::all_reduce_us(int64_t bytes) const {
  const Cluster& c = cluster_;
  const int gpus = gpus_;
  if (gpus <= 1 || bytes == 0) return 0;
  const double n = gpus;
  const double t_ring = c.links.collective_base_us +
                        2 * (n - 1) / n * static_cast<double>(bytes) * us_per_byte_ +
                        2 * (n - 1) * latency_us_;
  const int nodes = (gpus + c.topology.gpus - 1) / c.topology.gpus;
  if (nodes <= 1) return t_ring;
  // NCCL's tree across nodes: reduce up and broadcast down, pipelined (each link carries the
  // bytes once each way), latency logarithmic in the nodes.
  const double bottleneck_us_per_byte =
      std::max(us_per_byte_, 1.0 / (c.network.gbs_per_node * 1e3));
  const double t_tree = c.links.collective_base_us +
                        2 * static_cast<double>(bytes) * bottleneck_us_per_byte +
                        2 * std::ceil(std::log2(nodes)) * c.network.latency_us +
                        2 * (c.topology.gpus - 1) * c.links.p2p_latency_us;
  return std::min(t_ring, t_tree);
}

// The ring's steps; a reduce-scatter takes the same steps, each adding what it receives in flight.
double Collectives::all_gather_us(int64_t bytes) const {
  if (gpus_ <= 1 || bytes == 0) return 0;
  const double n = gpus_;
  return cluster_.links.collective_base_us +
         (n - 1) / n * static_cast<double>(bytes) * us_per_byte_ + (n - 1) * latency_us_;
}

double all_reduce_us(const Cluster& c, int gpus, int64_t bytes) {
  if (gpus <= 1 || bytes == 0) return 0;
  return Collectives(c, gpus).all_reduce_us(bytes);
}

double all_gather_us(const Cluster& c, int gpus, int64_t bytes) {
  if (gpus <= 1 || bytes == 0) return 0;
  return Collectives(c, gpus).all_gather_us(bytes);
}

double reduce_scatter_us(const Cluster& c, int gpus, int64_t bytes) {
  return all_gather_us(c, gpus, bytes);
}

bool all_reduce_through_host(const Cluster& c, int gpus) {
  return gpus > 1 && Rings(c, gpus).cost(true).through_host;
}

double broadcast_us(const Cluster& c, int gpus, int64_t bytes) {
  if (gpus <= 1 || bytes == 0) return 0;
  const RingCost chain = Rings(c, gpus).cost(false);
  return static_cast<double>(bytes) * chain.us_per_byte + (gpus - 1) * chain.latency_us;
}

Prediction dp_across_nodes(int gpus) {
  Prediction p;
  p.mode = "dp";
  p.gpus = gpus;
  p.possible = false;
  p.note = "DataParallel is one process: it cannot span nodes";
  return p;
}

Prediction replay_dp(const TracedStep& trace, const Cluster& c, const ReplayOptions& o) {
  const int gpus = static_cast<int>(trace.devices.size());
  if (gpus > c.topology.gpus) return dp_across_nodes(gpus);
  Prediction p;
  p.mode = "dp";
  p.gpus = gpus;
  const Framework& fw = o.framework;
  std::map<Device, int> gpu_of;
  for (size_t i = 0; i < trace.devices.size(); ++i) gpu_of[trace.devices[i]] = static_cast<int>(i);

  std::vector<std::vector<Stream>> streams(kNumDpPhases, std::vector<Stream>(p.gpus));
  std::vector<std::vector<Flow>> flows(kNumDpPhases);
  std::vector<int64_t> replicated(p.gpus, 0), reduced(p.gpus, 0);
  std::map<int64_t, MemoryCategory> node_category;
  for (const TraceEvent& e : trace.events) {
    if (e.kind == TraceKind::kNode) node_category[e.node] = e.category;
  }
  for (const TraceEvent& e : trace.events) {
    const auto node = node_category.find(e.node);
    const DpPhase phase =
        dp_phase(e, e.backward && node != node_category.end() ? node->second : e.category);
    if (is_kernel(e)) {
      if (phase == kReduceAdd && e.kind == TraceKind::kOp && o.reduce_add_in_flight) continue;
      streams[phase][gpu_of.at(e.device)].run(op_time_us(e, c.gpu, o), fw.op_dispatch_us);
    } else if (e.kind == TraceKind::kCopy) {
      const int src = gpu_of.at(e.src), dst = gpu_of.at(e.device);
      if (phase == kReplicate) {
        replicated[dst] += e.bytes_read;
      } else if (phase == kReduceAdd) {
        reduced[src] += e.bytes_read;
      } else {
        flows[phase].push_back({src, dst, e.bytes_read});
      }
    }
  }
  std::vector<double> us(kNumDpPhases, 0);
  // DataParallel on one device calls the module itself (PyTorch: len(device_ids) == 1).
  if (p.gpus > 1) {
    us[kFramework] = fw.dp_fixed_us + fw.dp_per_device_us * p.gpus +
                     fw.dp_per_tensor_us * static_cast<double>(trace.param_tensors) * p.gpus;
  }
  int64_t device0_bytes = 0;
  for (int ph = kReplicate; ph < kNumDpPhases; ++ph) {
    double compute = 0, dispatch_total = 0;
    for (const Stream& s : streams[ph]) {
      compute = std::max(compute, s.gpu);
      dispatch_total += s.cpu;
    }
    // PyTorch's replicas dispatch their forward under one GIL: the CPU time adds up.
    if (ph == kForward && fw.dp_forward_serialized) compute = std::max(compute, dispatch_total);
    us[ph] = compute + flows_us(c, flows[ph]);
    for (const Flow& f : flows[ph]) device0_bytes += f.bytes;
  }
  const int64_t replica_bytes = *std::max_element(replicated.begin(), replicated.end());
  const int64_t grad_bytes = *std::max_element(reduced.begin(), reduced.end());
  us[kReplicate] += broadcast_us(c, p.gpus, replica_bytes);
  us[kReduceAdd] += broadcast_us(c, p.gpus, grad_bytes);  // a reduce is a broadcast reversed
  device0_bytes += replica_bytes + grad_bytes;
  for (int ph = 0; ph < kNumDpPhases; ++ph) {
    if (us[ph] <= 0) continue;
    p.phases.emplace_back(dp_phase_name(ph), us[ph] / 1e3);
    p.step_ms += us[ph] / 1e3;
  }
  p.limiting = limiting_phase(p.phases);
  for (int64_t b : trace.peak_bytes) {
    p.peak_gib.push_back(static_cast<double>(b) / kGiB + o.context_gib);
    p.out_of_memory = p.out_of_memory || p.peak_gib.back() > c.gpu.mem_gib;
  }
  p.comm_bytes_per_gpu = device0_bytes;
  return p;
}

Prediction replay_ddp(const TracedStep& trace, int gpus, const Cluster& c, const ReplayOptions& o) {
  DPE_CHECK(gpus >= 1 && gpus <= c.total_gpus(),
            "replay_ddp: " << gpus << " GPUs on a cluster of " << c.total_gpus());
  Prediction p;
  p.mode = "ddp";
  p.gpus = gpus;
  const Framework& fw = o.framework;
  int last_bucket = -1;
  for (size_t i = 0; i < trace.events.size(); ++i) {
    if (trace.events[i].kind == TraceKind::kBucket) last_bucket = static_cast<int>(i);
  }
  // Collectives that cannot overlap backward run on the compute stream, in order.
  const bool serial = o.communication_uses_compute ||
                      (!o.host_memory_all_reduce_overlaps && all_reduce_through_host(c, gpus));
  const Collectives nccl(c, gpus);
  Stream s;
  double comm_free = 0, forward_end = -1, backward_end = 0, waited = 0, serial_comm = 0;
  for (size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& e = trace.events[i];
    const bool step_op = e.op_class == "optimizer" || e.category == MemoryCategory::kOptimizerState;
    if (forward_end < 0 && (e.backward || step_op)) forward_end = s.gpu;
    if (e.kind == TraceKind::kBucket) {
      p.comm_bytes_per_gpu += static_cast<int64_t>(2.0 * (gpus - 1) / gpus * e.bytes_read);
      ++p.buckets;
      // The hook that launches the bucket's all-reduce holds the CPU that issues the kernels.
      if (gpus > 1) s.cpu += fw.ddp_per_bucket_us;
      if (serial) {
        // On the compute stream: after the work queued before it, before the work after it.
        const double t = nccl.all_reduce_us(e.bytes_read);
        s.gpu = std::max(s.gpu, s.cpu) + t;
        s.cpu = s.gpu;
        comm_free = s.gpu;
        serial_comm += t;
        if (static_cast<int>(i) == last_bucket) {
          // Every all-reduce is exposed; backward is the compute between forward and here.
          backward_end = s.gpu - serial_comm;
          waited = serial_comm;
        }
        continue;
      }
      const double start = std::max({s.gpu, s.cpu, comm_free});
      comm_free = start + nccl.all_reduce_us(e.bytes_read);
      if (static_cast<int>(i) == last_bucket) {
        // The reducer's finalize: backward ends when every bucket is reduced.
        backward_end = s.gpu;
        waited = std::max(0.0, comm_free - s.gpu);
        s.gpu = std::max(s.gpu, comm_free);
        s.cpu = std::max(s.cpu, s.gpu);
      }
      continue;
    }
    if (!is_kernel(e)) continue;
    const double d = op_time_us(e, c.gpu, o);
    const double start = std::max(s.gpu, s.cpu + fw.op_dispatch_us);
    if (!serial && o.overlap_slowdown > 0 && comm_free > start) {
      // The part of the op that runs beside the all-reduce runs slower.
      const double f = 1 + o.overlap_slowdown, window = comm_free - start;
      s.cpu += fw.op_dispatch_us;
      s.gpu = d * f <= window ? start + d * f : comm_free + (d - window / f);
      ++s.ops;
    } else {
      s.run(d, fw.op_dispatch_us);
    }
  }
  if (forward_end < 0) forward_end = s.gpu;
  if (last_bucket < 0) backward_end = s.gpu;
  const double framework =
      fw.ddp_fixed_us + fw.ddp_per_tensor_us * static_cast<double>(trace.param_tensors);
  const double step_us = s.gpu - backward_end - waited;
  p.phases = {{"framework", framework / 1e3},
              {"forward", forward_end / 1e3},
              {"backward", (backward_end - forward_end) / 1e3},
              {"all_reduce_exposed", waited / 1e3},
              {"step", step_us / 1e3}};
  for (const auto& ph : p.phases) p.step_ms += ph.second;
  p.limiting = limiting_phase(p.phases);
  const double peak = static_cast<double>(trace.peak_bytes.at(0)) / kGiB + o.context_gib;
  p.peak_gib.assign(gpus, peak);
  p.out_of_memory = peak > c.gpu.mem_gib;
  return p;
}

}  // namespace dpe::sim
