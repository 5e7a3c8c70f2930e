// host_cluster: this machine's host devices as a cluster of the cost model; the measured rates
// and the few host constants, with what each is calibrated on.
#include "tools/cost_model/host_cluster.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/backend/dispatch.h"
#include "engine/core/error.h"
#include "engine/device/device_guard.h"
#include "engine/device/runtime.h"
#include "engine/distributed/distributed.h"
#include "engine/tensor/random.h"
#include "tools/common/local_ranks.h"

namespace dpe::sim {

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kAllReduceWorkerFlag = "--dpe-all-reduce-worker";

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2);
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The threads of measure_gemm_gflops start each rep together, so that every rep has all
// devices busy (none runs alone at the end).
class StartLine {
 public:
  explicit StartLine(int n) : n_(n) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(m_);
    const int64_t gen = generation_;
    if (++waiting_ == n_) {
      waiting_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != gen; });
    }
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int n_, waiting_ = 0;
  int64_t generation_ = 0;
};

Shape shape_of(const std::vector<int64_t>& dims) { return Shape(dims); }

// One traced GEMM-class op, with its operands, ready to run again on its device.
struct Gemm {
  std::string name;
  Tensor x, w, b, y, gy, gx, gw, gb;
};

Gemm make_gemm(const TraceEvent& e, Generator& g) {
  Gemm m;
  m.name = e.name;
  const Device d = e.device;
  auto operand = [&](size_t i) {
    DPE_CHECK(i < e.shapes.size(),
              "measure_gemm_gflops: " << e.name << " traced with " << e.shapes.size() << " shapes");
    return randn(shape_of(e.shapes[i]), g, d);
  };
  if (e.name == "linear") {
    m.x = operand(0);
    m.w = operand(1);
    if (e.shapes.size() == 4) m.b = operand(2);  // x, w, b, y (x, w, y without a bias)
    m.y = Tensor::empty({m.x.size(0), m.w.size(0)}, DType::kFloat32, d);
  } else if (e.name == "linear_backward") {
    m.x = operand(0);
    m.w = operand(1);
    m.gy = operand(2);
    // Which products ran: the traced FLOPs are 2 N I O per product plus N O for the bias.
    const double product = 2.0 * static_cast<double>(m.x.size(0) * m.x.size(1) * m.w.size(0));
    const int products = static_cast<int>(std::floor(e.flops / product + 1e-9));
    DPE_CHECK(products == 1 || products == 2,
              "measure_gemm_gflops: linear_backward with " << e.flops << " FLOPs");
    if (products == 2) m.gx = Tensor::empty(m.x.shape(), DType::kFloat32, d);
    m.gw = Tensor::empty(m.w.shape(), DType::kFloat32, d);  // one product: the first layer's
    if (e.flops - products * product > 0.5) {
      m.gb = Tensor::empty({m.w.size(0)}, DType::kFloat32, d);
    }
  } else if (e.name == "matmul") {
    m.x = operand(0);
    m.w = operand(1);
    m.y = Tensor::empty({m.x.size(0), m.w.size(1)}, DType::kFloat32, d);
  } else {
    DPE_THROW("measure_gemm_gflops: no host replay of " << e.name << " (" << e.op_class << ")");
  }
  return m;
}

void run_gemm(Gemm& m) {
  if (m.name == "linear") {
    dispatch(prim::LinearForward{m.x, m.w, m.b, m.y});
  } else if (m.name == "linear_backward") {
    dispatch(prim::LinearBackward{m.x, m.w, m.gy, m.gx, m.gw, m.gb, 1.0f});
  } else {
    dispatch(prim::Matmul{m.x, m.w, m.y});
  }
}

GpuSpec host_gpu(double gflops, const HostRates& r) {
  GpuSpec g;
  g.name = "host (1 thread)";
  g.fp32_tflops = g.tf32_tflops = g.fp16_tflops = gflops / 1e3;
  g.mem_bw_gbs = 2 * r.memcpy_gbs;  // the roofline counts bytes read + written; memcpy does both
  g.mem_gib = 0;
  // The per-op floor of a host op (allocation, the validating front, oneDNN's primitive cache):
  // an assumption at the µs level; the Mlp's ops take tens of µs or more.
  g.launch_us = 2;
  g.source = "measured on this machine (host_cluster.h)";
  return g;
}

// One rank of measure_all_reduce; rank 0 writes the medians (µs) to `result`. `store`: Gloo's
// rendezvous directory, or "mpi". Rank and size come from the launcher (run_local_ranks' RANK and
// WORLD_SIZE, or mpirun).
void all_reduce_rank(const std::string& store, const std::string& result, int reps,
                     const std::vector<int64_t>& bytes) {
  set_host_devices(1);
  auto group = store == "mpi" ? distributed::init_process_group("mpi")
                              : distributed::init_process_group("gloo", "file://" + store);
  const int rank = group->rank();
  std::vector<Tensor> xs;
  for (int64_t b : bytes) xs.push_back(Tensor::zeros(Shape{b / 4}, DType::kFloat32));
  std::vector<std::vector<double>> times(bytes.size());
  constexpr int kWarmup = 3;
  for (int i = 0; i < kWarmup + reps; ++i) {
    group->barrier();
    for (size_t k = 0; k < xs.size(); ++k) {
      // Written just before, by this thread, as DDP's reducer writes a bucket (the gradients
      // divided into it) before its communication thread reduces it: the all-reduce then reads
      // lines another core may hold, as in a step, not the ones its last rep left in its cache.
      xs[k].fill_(static_cast<float>(i));
      const auto start = Clock::now();
      group->all_reduce(xs[k], distributed::ReduceOp::kSum);
      if (i >= kWarmup) times[k].push_back(seconds_since(start) * 1e6);
    }
  }
  if (rank == 0) {
    std::ofstream out(result);
    for (const auto& t : times) out << median(t) << " ";
    out << "\n";
  }
  group->barrier();
  distributed::destroy_process_group();
}

}  // namespace

double measure_gemm_gflops(const TracedStep& trace, int reps) {
  const int devices = static_cast<int>(trace.devices.size());
  DPE_CHECK(devices >= 1 && reps >= 1,
            "measure_gemm_gflops: " << devices << " devices, " << reps << " reps");
  set_host_devices(std::max(devices, 2));
  std::vector<std::vector<Gemm>> gemms(static_cast<size_t>(devices));
  std::vector<double> flops(static_cast<size_t>(devices), 0.0);
  Generator g(1);
  for (const TraceEvent& e : trace.events) {
    if (e.kind != TraceKind::kOp || e.op_class != "gemm") continue;
    const auto it = std::find(trace.devices.begin(), trace.devices.end(), e.device);
    DPE_CHECK(it != trace.devices.end(),
              "measure_gemm_gflops: " << e.name << " on " << e.device.str());
    const size_t d = static_cast<size_t>(it - trace.devices.begin());
    gemms[d].push_back(make_gemm(e, g));
    flops[d] += e.flops;
  }
  std::vector<double> seconds(static_cast<size_t>(devices), 0.0);
  StartLine line(devices);
  std::vector<std::thread> threads;
  for (int d = 0; d < devices; ++d) {
    threads.emplace_back([&, d] {
      const size_t i = static_cast<size_t>(d);
      DeviceGuard guard(&Runtime::get().context(trace.devices[i]));
      std::vector<double> times;
      for (int r = 0; r < reps + 1; ++r) {
        line.arrive_and_wait();
        const auto start = Clock::now();
        for (Gemm& m : gemms[i]) run_gemm(m);
        if (r > 0) times.push_back(seconds_since(start));
      }
      seconds[i] = median(times);
    });
  }
  for (std::thread& t : threads) t.join();
  double gflops = 0;
  for (size_t d = 0; d < seconds.size(); ++d) {
    const double rate = flops[d] / std::max(seconds[d], 1e-9) / 1e9;
    gflops = d == 0 ? rate : std::min(gflops, rate);
  }
  return gflops;
}

double measure_memcpy_gbs(int reps, int64_t moved_bytes) {
  DPE_CHECK(reps >= 1 && moved_bytes >= 2,
            "measure_memcpy_gbs: " << reps << " reps of " << moved_bytes << " bytes");
  const size_t bytes = static_cast<size_t>(moved_bytes / 2);  // each byte copied is read + written
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  std::vector<double> times;
  for (int i = 0; i < reps + 1; ++i) {
    const auto start = Clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    if (i > 0) times.push_back(seconds_since(start));
    src[static_cast<size_t>(i) % bytes] = dst[bytes - 1];  // the copies are not dead code
  }
  return static_cast<double>(bytes) / median(times) / 1e9;
}

bool is_memory_bound_kernel(const TraceEvent& e) {
  const bool compute_bound =
      e.kind == TraceKind::kOp && (e.op_class == "gemm" || e.op_class == "conv");
  return is_kernel(e) && !compute_bound && e.bytes_read + e.bytes_written > 0;
}

int64_t memory_op_bytes(const std::vector<TraceEvent>& events) {
  std::vector<int64_t> sizes;  // each op's bytes, also its weight
  int64_t total = 0;
  for (const TraceEvent& e : events) {
    if (!is_memory_bound_kernel(e)) continue;
    const int64_t b = e.bytes_read + e.bytes_written;
    sizes.push_back(b);
    total += b;
  }
  DPE_CHECK(total > 0, "memory_op_bytes: the trace has no memory-bound op");
  std::sort(sizes.begin(), sizes.end());
  int64_t seen = 0;
  for (const int64_t b : sizes) {
    seen += b;
    if (2 * seen >= total) return b;
  }
  return sizes.back();
}

std::vector<int64_t> bucket_bytes(const TracedStep& trace) {
  std::vector<int64_t> out;
  for (const TraceEvent& e : trace.events) {
    if (e.kind == TraceKind::kBucket) out.push_back(e.bytes_read);
  }
  return out;
}

AllReduceRates measure_all_reduce(const std::string& self_exe, const std::vector<int64_t>& buckets,
                                  int reps, const std::string& backend) {
  DPE_CHECK(backend == "mpi" || backend == "gloo",
            "measure_all_reduce: backend '" << backend << "' (expected mpi or gloo)");
  DPE_CHECK(!self_exe.empty() && !buckets.empty() && reps >= 1,
            "measure_all_reduce: needs the program's path, buckets and reps");
  AllReduceRates g;
  g.bytes.push_back(4096);
  g.bytes.insert(g.bytes.end(), buckets.begin(), buckets.end());
  char dir_template[] = "/tmp/dpe_all_reduce_XXXXXX";
  const char* dir = mkdtemp(dir_template);
  DPE_CHECK(dir != nullptr, "measure_all_reduce: cannot create a temporary directory");
  const std::string store = std::string(dir) + "/store", result = std::string(dir) + "/us.txt";
  DPE_CHECK(mkdir(store.c_str(), 0700) == 0, "measure_all_reduce: cannot create " << store);
  // The ranks start as the bench's DDP ranks do.
  std::vector<std::string> args{self_exe, kAllReduceWorkerFlag, backend == "mpi" ? "mpi" : store,
                                result, std::to_string(reps)};
  for (int64_t b : g.bytes) args.push_back(std::to_string(b));
  const int failed =
      backend == "mpi" ? tools::run_mpi_ranks(args, 2) : tools::run_local_ranks(args, 2);
  std::ifstream in(result);
  for (size_t k = 0; k < g.bytes.size(); ++k) {
    double us = 0;
    in >> us;
    g.us.push_back(us);
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  DPE_CHECK(failed == 0 && in && g.us.back() > 0,
            "measure_all_reduce: " << failed << " rank(s) of " << self_exe << " failed, no timing");
  // alpha from the small message; the bandwidth that makes the buckets' times add up.
  double bucket_us = 0, bucket_b = 0;
  for (size_t k = 1; k < g.bytes.size(); ++k) {
    bucket_us += g.us[k];
    bucket_b += static_cast<double>(g.bytes[k]);
  }
  const double n = static_cast<double>(buckets.size());
  // A noisy small message may take longer than the buckets: alpha is then capped at a quarter of
  // the buckets' mean time (the bandwidth term keeps the rest, and the sum stays exact).
  g.alpha_us = std::min(g.us[0], bucket_us / n / 2) / 2;
  g.gbs = bucket_b / std::max(bucket_us - 2 * g.alpha_us * n, 1.0) / 1e3;
  return g;
}

int all_reduce_worker_main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], kAllReduceWorkerFlag) != 0) return -1;
  try {
    DPE_CHECK(argc >= 6, "all-reduce worker: usage: " << kAllReduceWorkerFlag
                                                      << " STORE RESULT REPS BYTES...");
    std::vector<int64_t> bytes;
    for (int i = 5; i < argc; ++i) bytes.push_back(std::stoll(argv[i]));
    all_reduce_rank(argv[2], argv[3], std::stoi(argv[4]), bytes);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "all-reduce worker: %s\n", e.what());
    return 1;
  }
}

Cluster host_cluster(int devices, const HostRates& r) {
  DPE_CHECK(devices >= 1, "host_cluster: need at least one device, got " << devices);
  DPE_CHECK(devices == 1 || devices == r.shared_devices,
            "host_cluster: the rates were measured for " << r.shared_devices << " devices, not "
                                                         << devices);
  Cluster c;
  c.name = "host";
  c.gpu = host_gpu(devices > 1 ? r.sgemm_gflops_shared : r.sgemm_gflops, r);
  // Every pair "through host memory" (PHB, no P2P): copies between host devices are memcpys.
  c.topology.gpus = devices;
  c.topology.pairs.assign(devices, std::vector<PairLink>(devices, PairLink{LinkKind::kPhb, 0}));
  for (int i = 0; i < devices; ++i) c.topology.pairs[i][i] = PairLink{LinkKind::kSelf, 0};
  // A copy between host devices reads what the other device's core wrote (its caches, or DRAM).
  const double link_gbs = r.dram_gbs > 0 ? r.dram_gbs : r.memcpy_gbs;
  c.links.nvlink_gbs_per_link = link_gbs;
  c.links.pcie_gbs = c.links.host_bridge_gbs = c.links.inter_socket_gbs = link_gbs;
  c.links.p2p_latency_us = c.links.pcie_latency_us = c.links.host_latency_us = 0;
  c.p2p = false;
  c.network.name = "the DDP ranks' process group (MPI shared memory or Gloo loopback TCP)";
  c.network.gbs_per_node = r.ddp_gbs;
  c.network.latency_us = r.ddp_alpha_us;
  validate_topology(c.topology);
  return c;
}

Cluster host_ddp_cluster(int ranks, const HostRates& r) {
  Cluster c = host_cluster(1, r);
  c.gpu = host_gpu(ranks > 1 ? r.sgemm_gflops_shared : r.sgemm_gflops, r);
  c.nodes = ranks;  // one rank per "node": their all-reduce crosses the loopback network
  return c;
}

ReplayOptions host_replay_options() {
  ReplayOptions o;
  o.framework = framework("dpe");
  // The bench (docs/performance.md) on a 2-core host: DataParallel's wake-ups and joins of the device
  // workers cost ~185 µs per 2-device step (three threads on two cores).
  o.framework.dp_per_device_us = 185.0 / 2;
  o.framework.name = "dpe (host)";
  // MPI and Gloo run on the cores the ranks compute with (see ReplayOptions).
  o.communication_uses_compute = true;
  o.reduce_add_in_flight = false;
  // The GEMM peak is measured on the step's own GEMMs: gemm runs at it by construction. memory:
  // calibrated once on the Mlp's single-device bench step (batch 256): the non-GEMM ops
  // (elementwise, softmax, the optimizer) reach this share of the memcpy rate (SGD with momentum
  // on the Mlp, 13.4 MB read + written: 0.23-0.27 ms in a step, 0.28 predicted).
  // conv is not calibrated (the check runs the Mlp only).
  o.efficiency.gemm = 1.0;
  o.efficiency.conv = 1.0;
  o.efficiency.memory = 0.5;
  o.context_gib = 0;
  return o;
}

}  // namespace dpe::sim
