// host_cluster: this machine's host devices as a cluster of the cost model; the measured rates
// and the few host constants, with what each is calibrated on.
#include "tools/cost_model/host_cluster.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/core/error.h"
#include "engine/device/device_guard.h"
#include "engine/device/runtime.h"
#include "engine/distributed/distributed.h"
#include "engine/tensor/random.h"

namespace dpe::sim {

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2);
}

void set_host_devices(int n) {
  HostDeviceOptions o;
  o.count = n;
  o.compute_threads = 1;  // as //tools:bench runs every host device
  Runtime::get().set_host_devices(o);
}

// Seconds per n^3 SGEMM on host device `index`, median of `reps` after one warm-up.
double sgemm_seconds(int index, int64_t n, int reps) {
  const Device device(DeviceType::kHost, index);
  Generator g(static_cast<uint64_t>(index) + 1);
  Tensor a = randn({n, n}, g, device), b = randn({n, n}, g, device);
  Tensor c = Tensor::empty({n, n}, DType::kFloat32, device);
  DeviceGuard guard(&Runtime::get().context(device));
  std::vector<double> times;
  for (int i = 0; i < reps + 1; ++i) {
    const auto start = Clock::now();
    backend_for(device).matmul(a, b, c);
    if (i > 0) times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  return median(times);
}

double memcpy_gbs(size_t bytes, int reps) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  std::vector<double> times;
  for (int i = 0; i < reps + 1; ++i) {
    const auto start = Clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    if (i > 0) times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    src[static_cast<size_t>(i) % bytes] = dst[bytes - 1];  // the copies are not dead code
  }
  return static_cast<double>(bytes) / median(times) / 1e9;
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
  g.source = "measured on this machine (measure_host_rates)";
  return g;
}

// One rank of measure_gloo_all_reduce; rank 0 writes the two medians (seconds) to `result`.
void gloo_rank(int rank, const std::string& dir, const std::string& result, const int64_t* floats) {
  HostDeviceOptions host;
  host.count = 1;
  host.compute_threads = 1;
  Runtime::get().set_host_devices(host);
  auto group = distributed::init_process_group("gloo", "file://" + dir, 2, rank);
  double t[2];
  for (int s = 0; s < 2; ++s) {
    Tensor x = Tensor::zeros(Shape{floats[s]}, DType::kFloat32);
    std::vector<double> times;
    for (int i = 0; i < 25; ++i) {
      group->barrier();
      const auto start = Clock::now();
      group->all_reduce(x);
      if (i >= 5) times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
    t[s] = median(times);
  }
  if (rank == 0) std::ofstream(result) << t[0] << " " << t[1] << "\n";
  group->barrier();
  distributed::destroy_process_group();
}

}  // namespace

GlooRates measure_gloo_all_reduce() {
  char dir_template[] = "/tmp/dpe_gloo_XXXXXX";
  const char* dir = mkdtemp(dir_template);
  DPE_CHECK(dir != nullptr, "measure_gloo_all_reduce: cannot create a temporary directory");
  const std::string store = std::string(dir) + "/store", result = std::string(dir) + "/t.txt";
  DPE_CHECK(mkdir(store.c_str(), 0700) == 0, "measure_gloo_all_reduce: cannot create " << store);
  const int64_t floats[2] = {16 * 1024, 1024 * 1024};
  pid_t pids[2];
  for (int rank = 0; rank < 2; ++rank) {
    pids[rank] = fork();
    DPE_CHECK(pids[rank] >= 0, "measure_gloo_all_reduce: fork failed");
    if (pids[rank] == 0) {
      int code = 0;
      try {
        gloo_rank(rank, store, result, floats);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "measure_gloo_all_reduce: rank %d: %s\n", rank, e.what());
        code = 1;
      }
      _exit(code);
    }
  }
  int failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  GlooRates g;
  std::ifstream(result) >> g.small_us >> g.large_us;
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  DPE_CHECK(failed == 0 && g.large_us > 0,
            "measure_gloo_all_reduce: " << failed << " rank(s) failed, no timing");
  const double b0 = 4.0 * static_cast<double>(floats[0]), b1 = 4.0 * static_cast<double>(floats[1]);
  g.small_us *= 1e6;
  g.large_us *= 1e6;
  g.gbs = (b1 - b0) / std::max(g.large_us - g.small_us, 1e-3) / 1e3;
  g.alpha_us = std::max(0.0, (g.small_us - b0 / (g.gbs * 1e3)) / 2);
  return g;
}

double measure_sgemm_gflops(int64_t n, int reps) {
  set_host_devices(2);
  return 2.0 * static_cast<double>(n) * n * n / sgemm_seconds(0, n, reps) / 1e9;
}

HostRates measure_host_rates(int devices) {
  DPE_CHECK(devices >= 1, "measure_host_rates: need at least one device, got " << devices);
  constexpr int64_t n = 512;
  constexpr int reps = 15;
  const double flops = 2.0 * n * n * n;
  HostRates r;
  set_host_devices(std::max(devices, 2));
  r.sgemm_gflops = flops / sgemm_seconds(0, n, reps) / 1e9;
  // Every device busy at once, as in a DataParallel or DDP step: on a machine with fewer free
  // cores than devices they share them, and each one's rate drops.
  std::vector<double> seconds(static_cast<size_t>(devices));
  std::vector<std::thread> threads;
  for (int d = 0; d < devices; ++d) {
    threads.emplace_back([&, d] { seconds[static_cast<size_t>(d)] = sgemm_seconds(d, n, reps); });
  }
  for (std::thread& t : threads) t.join();
  r.sgemm_gflops_shared = flops / *std::max_element(seconds.begin(), seconds.end()) / 1e9;
  r.shared_devices = devices;
  r.memcpy_gbs = memcpy_gbs(size_t{64} << 20, 10);  // beyond the caches: DRAM
  set_host_devices(devices);
  return r;
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
  c.links.nvlink_gbs_per_link = r.memcpy_gbs;
  c.links.pcie_gbs = c.links.host_bridge_gbs = c.links.inter_socket_gbs = r.memcpy_gbs;
  c.links.p2p_latency_us = c.links.pcie_latency_us = c.links.host_latency_us = 0;
  c.p2p = false;
  c.network.name = "gloo over loopback TCP";
  c.network.gbs_per_node = r.gloo_gbs;
  c.network.latency_us = r.gloo_alpha_us;
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
  // The README's bench on this 2-core host: DataParallel's wake-ups and joins of the device
  // workers cost ~185 µs per 2-device step (three threads on two cores).
  o.framework.dp_per_device_us = 185.0 / 2;
  o.framework.name = "dpe (host)";
  // The GEMM peak is measured at the Mlp's GEMM size: gemm runs at it by construction. memory:
  // calibrated once on the Mlp's single-device bench step (batch 256): the non-GEMM ops
  // (elementwise, softmax, SGD) reach this share of the memcpy rate. conv is not calibrated (the
  // check runs the Mlp only).
  o.efficiency.gemm = 1.0;
  o.efficiency.conv = 1.0;
  o.efficiency.memory = 0.5;
  o.context_gib = 0;
  return o;
}

}  // namespace dpe::sim
