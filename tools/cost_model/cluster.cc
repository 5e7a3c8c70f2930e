// cluster: GPU and framework tables, link rates and routing, and the presets. Every number here
// has its row and source in docs/cluster_model.md.
#include "tools/cost_model/cluster.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <limits>
#include <map>
#include <sstream>

#include "engine/core/error.h"
#include "tools/cost_model/names.h"

namespace dpe::sim {
namespace {

// ---- GPUs ----------------------------------------------------------------------------------

std::vector<GpuSpec> make_gpu_specs() {
  // name, fp32, tf32, fp16 (dense), mem GB/s, GiB, launch us, source, sm, NVLink ports, PCIe gen
  return {
      {"TITAN RTX", 16.3, 16.3, 130.5, 672, 24, 4,
       "NVIDIA TITAN RTX product page / Quadro RTX 8000 datasheet (same TU102 at 1770 MHz: 16.3 "
       "FP32, 130.5 tensor TFLOPS, 672 GB/s, NVLink 100 GB/s, PCIe 3.0 x16)",
       75, 2, 3},
      {"V100-SXM2-32GB", 15.7, 15.7, 125, 900, 32, 4,
       "NVIDIA Tesla V100 datasheet (SXM2: 15.7 FP32, 125 tensor TFLOPS, 900 GB/s HBM2, NVLink "
       "300 GB/s = 6 links)",
       70, 6, 3},
      {"A100-SXM4-40GB", 19.5, 156, 312, 1555, 40, 4,
       "NVIDIA A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf: 19.5 FP32, 156 "
       "TF32, 312 FP16, 1,555 GB/s, NVLink 600 GB/s = 12 links, PCIe 4.0)",
       80, 12, 4},
      {"A100-SXM4-80GB", 19.5, 156, 312, 2039, 80, 4,
       "NVIDIA A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf: 19.5 FP32, 156 "
       "TF32, 312 FP16, 2,039 GB/s HBM2e, NVLink 600 GB/s = 12 links, PCIe 4.0)",
       80, 12, 4},
      {"A100-PCIe-40GB", 19.5, 156, 312, 1555, 40, 4,
       "NVIDIA A100 datasheet (PCIe 40GB: 19.5 FP32, 156 TF32, 312 FP16, 1,555 GB/s, NVLink "
       "bridge 600 GB/s, PCIe 4.0)",
       80, 12, 4},
      {"A100-PCIe-80GB", 19.5, 156, 312, 1935, 80, 4,
       "NVIDIA A100 datasheet (PCIe 80GB: 19.5 FP32, 156 TF32, 312 FP16, 1,935 GB/s, NVLink "
       "bridge 600 GB/s, PCIe 4.0)",
       80, 12, 4},
      {"H100-SXM5-80GB", 66.9, 494.7, 989.4, 3350, 80, 4,
       "NVIDIA H100 datasheet / Hopper whitepaper (SXM5: 67 FP32, 989 TF32 and 1,979 FP16 with "
       "sparsity = 494.7 / 989.4 dense, 3.35 TB/s HBM3, NVLink 900 GB/s = 18 links, PCIe 5.0)",
       90, 18, 5},
      {"H100-PCIe", 51, 378, 756, 2000, 80, 4,
       "NVIDIA H100 datasheet (PCIe: 51 FP32, 756 TF32 and 1,513 FP16 with sparsity = 378 / 756 "
       "dense, 2 TB/s HBM2e, NVLink bridge 600 GB/s = 12 links, PCIe 5.0)",
       90, 12, 5},
      {"T4", 8.1, 8.1, 65, 320, 16, 4,
       "NVIDIA T4 datasheet (t4-tensor-core-datasheet-951643.pdf: 8.1 FP32, 65 FP16 mixed-precision "
       "tensor TFLOPS, 320 GB/s GDDR6, 16 GB, PCIe 3.0 x16, no NVLink)",
       75, 0, 3},
      {"L4", 30.3, 60, 121, 300, 24, 4,
       "NVIDIA L4 datasheet (30.3 FP32, 120 TF32 and 242 FP16 tensor TFLOPS with sparsity = 60 / "
       "121 dense, 300 GB/s GDDR6, 24 GB, PCIe 4.0 x16, no NVLink)",
       89, 0, 4},
      {"RTX 4090", 82.6, 82.6, 165.2, 1008, 24, 4,
       "NVIDIA Ada Lovelace architecture whitepaper, appendix A (GeForce RTX 4090: 82.6 FP32, 82.6 "
       "TF32 and 165.2 FP16-with-FP32-accumulate tensor TFLOPS dense, 1,008 GB/s GDDR6X, 24 GB, "
       "PCIe 4.0 x16, no NVLink)",
       89, 0, 4},
  };
}

const std::map<std::string, std::string>& gpu_aliases() {
  static const std::map<std::string, std::string> aliases = {
      {"titanrtx", "TITAN RTX"},     {"v100", "V100-SXM2-32GB"},     {"a100", "A100-SXM4-80GB"},
      {"h100", "H100-SXM5-80GB"},    {"a100pcie", "A100-PCIe-40GB"}, {"h100pcie", "H100-PCIe"},
      {"h100sxm", "H100-SXM5-80GB"}, {"a100sxm", "A100-SXM4-80GB"},  {"v100sxm2", "V100-SXM2-32GB"},
      {"4090", "RTX 4090"},
  };
  return aliases;
}

// ---- frameworks ----------------------------------------------------------------------------

std::vector<Framework> make_frameworks() {
  Framework pytorch;
  pytorch.name = "pytorch";
  pytorch.op_dispatch_us = 10;
  pytorch.dp_fixed_us = 1000;
  pytorch.dp_per_device_us = 250;
  pytorch.ddp_fixed_us = 150;
  pytorch.dp_per_tensor_us = 10;
  pytorch.dp_forward_serialized = true;
  pytorch.ddp_per_tensor_us = 15;
  pytorch.ddp_per_bucket_us = 20;
  pytorch.source =
      "op dispatch: pytorch/pytorch#41383 (5-7 us per eager op on CPU tensors) and "
      "flagos-ai/FlagGems#4812 (~7 us eager wall time of a tiny CUDA op); DataParallel: "
      "pytorch/pytorch#15811 (2.8 ms for a 2-module model, +25 ms for 198 more modules) and #3930 "
      "(replicate up to 180 ms on ResNet-1001); DDP: benchmarks/distributed/ddp/README.md (1-GPU "
      "DDP adds 3 ms on ResNet-50, 9 ms on ResNet-101); fixed/per-device values are assumptions "
      "to calibrate (docs/cluster_model.md)";
  Framework dpe;
  dpe.name = "dpe";
  dpe.op_dispatch_us = 2;
  dpe.dp_fixed_us = 8.5;
  dpe.dp_per_device_us = 16.5;
  dpe.ddp_fixed_us = 10;
  dpe.dp_per_tensor_us = 1;
  dpe.dp_forward_serialized = false;
  dpe.ddp_per_tensor_us = 2;
  dpe.ddp_per_bucket_us = 5;
  dpe.source =
      "dpe's bench (docs/performance.md; toy model, 2-core host): device 0's "
      "replicate+scatter+gather+reduce-add 21-22 us on 2 devices, 34-35 us on 4 (8.5 us + 6.5 us/device), single-device step 37-54 "
      "us; +10 us/device worker hand-off, per-tensor and DDP values are assumptions";
  return {pytorch, dpe};
}

// ---- presets -------------------------------------------------------------------------------

NodeTopology matrix_topology(const std::vector<std::vector<std::string>>& cells,
                             const std::vector<int>& socket,
                             const std::vector<std::vector<int>>& switches) {
  NodeTopology t;
  t.gpus = static_cast<int>(cells.size());
  t.pairs.assign(t.gpus, std::vector<PairLink>(t.gpus));
  for (int i = 0; i < t.gpus; ++i) {
    for (int j = 0; j < t.gpus; ++j) {
      DPE_CHECK(parse_pair_link(cells[i][j], &t.pairs[i][j]),
                "cluster preset: bad cell " << cells[i][j]);
    }
  }
  t.socket = socket;
  t.switches = switches;
  validate_topology(t);
  return t;
}

NodeTopology uniform_topology(int n, const std::string& cell, const std::vector<int>& socket,
                              const std::vector<std::vector<int>>& switches) {
  std::vector<std::vector<std::string>> cells(n, std::vector<std::string>(n, cell));
  for (int i = 0; i < n; ++i) cells[i][i] = "X";
  return matrix_topology(cells, socket, switches);
}

// The first k GPUs of a node.
NodeTopology first_gpus(const NodeTopology& t, int k) {
  NodeTopology out;
  out.gpus = k;
  for (int i = 0; i < k; ++i) {
    out.pairs.emplace_back(t.pairs[i].begin(), t.pairs[i].begin() + k);
  }
  if (!t.socket.empty()) out.socket.assign(t.socket.begin(), t.socket.begin() + k);
  if (!t.switches.empty()) out.switches.assign(t.switches.begin(), t.switches.begin() + k);
  return out;
}

struct Preset {
  std::string name;
  std::string gpu;
  NodeTopology topology;
  bool p2p;
  bool nvswitch;
  Network network;
  double inter_socket_gbs;  // 0: the GPU generation's default
};

// 0.9 of line rate: nccl-tests issues #175 (86 of 100 GB/s) and #119 (85-96 of 100 GB/s).
constexpr double kNicEfficiency = 0.9;

const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = [] {
    std::vector<Preset> p;
    // Hugging Face's benchmark machine: `nvidia-smi topo -m` printed NV2 between the two cards
    // (transformers docs/source/en/perf_hardware.md); one CPU (affinity 0-23 on both).
    const NodeTopology titan = uniform_topology(2, "NV2", {0, 0}, {{}, {}});
    const Network ten_gbe{10 / 8.0 * kNicEfficiency, 20, "1x 10 GbE (TCP)"};
    p.push_back({"titanrtx-nvlink", "TITAN RTX", titan, true, false, ten_gbe, 0});
    p.push_back({"titanrtx-pcie", "TITAN RTX", titan, false, false, ten_gbe, 0});
    // DGX-1 (V100): the GPU matrix of pytorch/benchmarks/distributed/ddp/README.md; its NIC rows
    // put GPU pairs {0,1} {2,3} {4,5} {6,7} behind one PCIe switch each (mlx5_x PIX), 0-3 on
    // the first Xeon E5-2698 v4 (Broadwell), 4-7 on the second.
    const NodeTopology dgx1 = matrix_topology(
        {
            {"X", "NV1", "NV1", "NV2", "NV2", "SYS", "SYS", "SYS"},
            {"NV1", "X", "NV2", "NV1", "SYS", "NV2", "SYS", "SYS"},
            {"NV1", "NV2", "X", "NV2", "SYS", "SYS", "NV1", "SYS"},
            {"NV2", "NV1", "NV2", "X", "SYS", "SYS", "SYS", "NV1"},
            {"NV2", "SYS", "SYS", "SYS", "X", "NV1", "NV1", "NV2"},
            {"SYS", "NV2", "SYS", "SYS", "NV1", "X", "NV2", "NV1"},
            {"SYS", "SYS", "NV1", "SYS", "NV1", "NV2", "X", "NV2"},
            {"SYS", "SYS", "SYS", "NV1", "NV2", "NV1", "NV2", "X"},
        },
        {0, 0, 0, 0, 1, 1, 1, 1}, {{0}, {0}, {1}, {1}, {2}, {2}, {3}, {3}});
    p.push_back({"dgx1-v100", "V100-SXM2-32GB", dgx1, true, false,
                 Network{4 * 100 / 8.0 * kNicEfficiency, 9.6, "4x 100 Gb/s EDR InfiniBand"}, 6.0});
    // DGX A100 / DGX H100: six (four) NVSwitches, every pair NV12 (NV18); two CPUs, GPUs 0-3 on
    // the first; GPU pairs share a PCIe switch with their NICs.
    const std::vector<int> two_sockets = {0, 0, 0, 0, 1, 1, 1, 1};
    const std::vector<std::vector<int>> paired = {{0}, {0}, {1}, {1}, {2}, {2}, {3}, {3}};
    p.push_back({"dgx-a100", "A100-SXM4-80GB", uniform_topology(8, "NV12", two_sockets, paired),
                 true, true,
                 Network{8 * 200 / 8.0 * kNicEfficiency, 9.6, "8x 200 Gb/s HDR InfiniBand"}, 0});
    // The DGX A100 320GB: the same node with A100-SXM4-40GB.
    p.push_back({"dgx-a100-40g", "A100-SXM4-40GB",
                 uniform_topology(8, "NV12", two_sockets, paired), true, true,
                 Network{8 * 200 / 8.0 * kNicEfficiency, 9.6, "8x 200 Gb/s HDR InfiniBand"}, 0});
    p.push_back({"dgx-h100", "H100-SXM5-80GB", uniform_topology(8, "NV18", two_sockets, paired),
                 true, true,
                 Network{8 * 400 / 8.0 * kNicEfficiency, 9.6, "8x 400 Gb/s NDR InfiniBand"}, 0});
    // 8x A100 PCIe, two Intel sockets (UPI). Per socket: GPUs 0,1 behind one switch on one root
    // port (PIX); GPUs 2,3 behind a switch each, both under a parent switch on another root port
    // (PXB between them, NODE to 0,1). The same on socket 1; SYS across.
    const NodeTopology pcie = matrix_topology(
        {
            {"X", "PIX", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS"},
            {"PIX", "X", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS"},
            {"NODE", "NODE", "X", "PXB", "SYS", "SYS", "SYS", "SYS"},
            {"NODE", "NODE", "PXB", "X", "SYS", "SYS", "SYS", "SYS"},
            {"SYS", "SYS", "SYS", "SYS", "X", "PIX", "NODE", "NODE"},
            {"SYS", "SYS", "SYS", "SYS", "PIX", "X", "NODE", "NODE"},
            {"SYS", "SYS", "SYS", "SYS", "NODE", "NODE", "X", "PXB"},
            {"SYS", "SYS", "SYS", "SYS", "NODE", "NODE", "PXB", "X"},
        },
        {0, 0, 0, 0, 1, 1, 1, 1}, {{0}, {0}, {1, 2}, {3, 2}, {4}, {4}, {5, 6}, {7, 6}});
    p.push_back({"pcie-a100", "A100-PCIe-40GB", pcie, true, false,
                 Network{100 / 8.0 * kNicEfficiency, 20, "1x 100 Gb/s Ethernet"}, 10.0});
    // Cloud and workstation nodes of PCIe cards in the same two-socket layout: 8x T4 (as AWS
    // g4dn.metal), 8x L4 (as g6.48xlarge), and 8x RTX 4090, whose driver offers no P2P (GeForce 40
    // series), so every pair goes through host memory.
    p.push_back({"pcie-t4", "T4", pcie, true, false,
                 Network{100 / 8.0 * kNicEfficiency, 20, "1x 100 Gb/s Ethernet"}, 10.0});
    p.push_back({"pcie-l4", "L4", pcie, true, false,
                 Network{100 / 8.0 * kNicEfficiency, 20, "1x 100 Gb/s Ethernet"}, 10.0});
    p.push_back({"pcie-rtx4090", "RTX 4090", pcie, false, false,
                 Network{25 / 8.0 * kNicEfficiency, 20, "1x 25 Gb/s Ethernet"}, 10.0});
    return p;
  }();
  return all;
}

bool has_nvswitch(const NodeTopology& t, const GpuSpec& gpu) {
  for (int i = 0; i < t.gpus; ++i) {
    int links = 0;
    for (int j = 0; j < t.gpus; ++j) {
      if (t.pairs[i][j].kind == LinkKind::kNvLink) links += t.pairs[i][j].nvlinks;
    }
    if (links > gpu.nvlinks) return true;
  }
  return false;
}

// How a transfer between two GPUs of a node travels.
enum class Route { kSelf, kNvLink, kNvSwitch, kPcieP2p, kHost };

int parse_int(const std::string& s, const std::string& resource) {
  DPE_CHECK(
      !s.empty() && std::all_of(s.begin(), s.end(),
                                [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }),
      "resource_gbs: bad number '" << s << "' in '" << resource << "'");
  return std::atoi(s.c_str());
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(s);
  while (std::getline(in, part, sep)) parts.push_back(part);
  return parts;
}

}  // namespace

// ---- GpuSpec -----------------------------------------------------------------------------------

double GpuSpec::peak_tflops(Precision p) const {
  switch (p) {
    case Precision::kFp32:
      return fp32_tflops;
    case Precision::kTf32:
      return tf32_tflops;
    case Precision::kFp16:
      return fp16_tflops;
    case Precision::kBf16:
      DPE_CHECK(has_bf16(), name << " has no bf16 tensor cores (Ampere and later have)");
      return fp16_tflops;
  }
  return fp32_tflops;
}

const std::vector<GpuSpec>& gpu_specs() {
  static const std::vector<GpuSpec> specs = make_gpu_specs();
  return specs;
}

const GpuSpec& gpu_spec(const std::string& name) {
  std::string key = normalized_name(name);
  auto alias = gpu_aliases().find(key);
  if (alias != gpu_aliases().end()) key = normalized_name(alias->second);
  for (const GpuSpec& g : gpu_specs()) {
    if (normalized_name(g.name) == key) return g;
  }
  std::vector<std::string> known;
  for (const GpuSpec& g : gpu_specs()) known.push_back(g.name);
  for (const auto& a : gpu_aliases()) known.push_back(a.first);
  DPE_THROW("gpu_spec: unknown GPU '" << name << "' (known: " << joined_names(known) << ")");
}

// ---- link rates --------------------------------------------------------------------------------

LinkRates link_rates_for(const GpuSpec& gpu) {
  LinkRates r;
  // NCCL src/graph/topo.h: SM60 18, SM70 20, SM80 20, SM86 12, SM90 20.6 GB/s per link.
  r.nvlink_gbs_per_link = gpu.sm >= 90 ? 20.6 : gpu.sm == 86 ? 12.0 : gpu.sm >= 70 ? 20.0 : 18.0;
  // NCCL src/graph/topo.cc ncclTopoAddPci: width x speed / 80 = 12, 24, 48 GB/s for gen 3, 4, 5.
  const int gen = std::max(3, std::min(gpu.pcie_gen, 5));
  r.pcie_gbs = 12.0 * (1 << (gen - 3));
  // Through the root complex: Intel turns P2P into 64 B TLPs (NCCL's INTEL_P2P_OVERHEAD, 6/5).
  r.host_bridge_gbs = r.pcie_gbs / 1.2;
  // The usual platform of the generation: Skylake UPI (gen 3), AMD Zen 2 xGMI (DGX A100, gen 4),
  // Sapphire Rapids UPI (DGX H100, gen 5); NCCL's SKL_QPI_BW, AMD_BW, SRP_QPI_BW.
  r.inter_socket_gbs = gen == 3 ? 10.0 : gen == 4 ? 16.0 : 22.0;
  // NVIDIA/nccl#384, one gen 3 machine through SHM: a broadcast (one transfer) 10.31 GB/s, a
  // 2-GPU all-reduce (two opposite transfers) 3.9 GB/s each: 7.8 / 10.31 of one transfer's rate.
  r.host_duplex_efficiency = 2 * 3.9 / 10.31;
  // NCCL src/graph/tuning.cc hwLat, Ring/Simple per hop: NVLink 3.4, PCI 5.7 us; through host
  // memory two PCIe crossings.
  r.p2p_latency_us = 3.4;
  r.pcie_latency_us = 5.7;
  r.host_latency_us = 11.4;
  // tuning.cc baseLat, Ring/Simple: a collective's fixed cost before its first hop.
  r.collective_base_us = 8.4;
  return r;
}

// ---- frameworks --------------------------------------------------------------------------------

const std::vector<Framework>& frameworks() {
  static const std::vector<Framework> all = make_frameworks();
  return all;
}

const Framework& framework(const std::string& name) {
  for (const Framework& f : frameworks()) {
    if (normalized_name(f.name) == normalized_name(name)) return f;
  }
  std::vector<std::string> known;
  for (const Framework& f : frameworks()) known.push_back(f.name);
  DPE_THROW("framework: unknown framework '" << name << "' (known: " << joined_names(known) << ")");
}

// ---- Cluster -----------------------------------------------------------------------------------

namespace {

void check_gpu(const Cluster& c, int g, const char* what) {
  DPE_CHECK(g >= 0 && g < c.topology.gpus, what << ": GPU " << g << " is not on a node of "
                                                << c.topology.gpus << " GPUs (" << c.name << ")");
}

int socket_of(const Cluster& c, int g) {
  return c.topology.socket.empty() ? 0 : c.topology.socket[g];
}

std::vector<int> switches_of(const Cluster& c, int g) {
  return c.topology.switches.empty() ? std::vector<int>{} : c.topology.switches[g];
}

Route route(const Cluster& c, int a, int b) {
  if (a == b) return Route::kSelf;
  const LinkKind k = c.topology.pairs[a][b].kind;
  if (c.p2p && k == LinkKind::kNvLink) return c.nvswitch ? Route::kNvSwitch : Route::kNvLink;
  // NCCL's default P2P level is PXB: PHB, NODE and SYS pairs go through host memory (SHM).
  if (c.p2p && (k == LinkKind::kPix || k == LinkKind::kPxb)) return Route::kPcieP2p;
  return Route::kHost;
}

}  // namespace

std::vector<std::string> Cluster::path(int a, int b) const {
  check_gpu(*this, a, "Cluster::path");
  check_gpu(*this, b, "Cluster::path");
  const std::string sa = std::to_string(a), sb = std::to_string(b);
  std::vector<std::string> out;
  const std::vector<int> up = switches_of(*this, a), down = switches_of(*this, b);
  switch (route(*this, a, b)) {
    case Route::kSelf:
      return out;
    case Route::kNvLink:
      return {"nvlink:" + sa + ">" + sb};
    case Route::kNvSwitch:
      return {"nvswitch:out:" + sa, "nvswitch:in:" + sb};
    case Route::kPcieP2p: {
      // Up to the nearest switch both GPUs sit under, then down.
      size_t ia = up.size(), ib = down.size();
      for (size_t i = 0; i < up.size() && ia == up.size(); ++i) {
        auto it = std::find(down.begin(), down.end(), up[i]);
        if (it != down.end()) {
          ia = i;
          ib = static_cast<size_t>(it - down.begin());
        }
      }
      if (ia == up.size()) ia = ib = 0;  // switches unknown: one switch joins them
      out.push_back("pcie:up:" + sa);
      for (size_t i = 0; i < ia; ++i) out.push_back("switch:up:" + std::to_string(up[i]));
      for (size_t i = ib; i-- > 0;) out.push_back("switch:down:" + std::to_string(down[i]));
      out.push_back("pcie:down:" + sb);
      return out;
    }
    case Route::kHost: {
      const int s = socket_of(*this, a), t = socket_of(*this, b);
      out.push_back("pcie:up:" + sa);
      for (int sw : up) out.push_back("switch:up:" + std::to_string(sw));
      out.push_back("bridge:socket" + std::to_string(s));
      if (s != t) {
        out.push_back("sys:" + std::to_string(s) + ">" + std::to_string(t));
        out.push_back("bridge:socket" + std::to_string(t));
      }
      for (size_t i = down.size(); i-- > 0;)
        out.push_back("switch:down:" + std::to_string(down[i]));
      out.push_back("pcie:down:" + sb);
      return out;
    }
  }
  return out;
}

double Cluster::resource_gbs(const std::string& resource) const {
  const std::vector<std::string> part = split(resource, ':');
  const std::string kind = part.empty() ? "" : part[0];
  auto gpu_arg = [&](const std::string& s) {
    const int g = parse_int(s, resource);
    check_gpu(*this, g, "Cluster::resource_gbs");
    return g;
  };
  if (kind == "nvlink" && part.size() == 2) {
    const std::vector<std::string> ends = split(part[1], '>');
    DPE_CHECK(ends.size() == 2, "resource_gbs: expected nvlink:A>B, got '" << resource << "'");
    const int a = gpu_arg(ends[0]), b = gpu_arg(ends[1]);
    const PairLink& l = topology.pairs[a][b];
    DPE_CHECK(l.kind == LinkKind::kNvLink, "resource_gbs: '" << resource << "': GPU" << a << "-GPU"
                                                             << b << " is " << link_kind_name(l)
                                                             << ", not NVLink (" << name << ")");
    return l.nvlinks * links.nvlink_gbs_per_link;
  }
  if (kind == "nvswitch" && part.size() == 3 && (part[1] == "out" || part[1] == "in")) {
    const int g = gpu_arg(part[2]);
    int ports = 0;
    for (const PairLink& l : topology.pairs[g]) ports = std::max(ports, l.nvlinks);
    DPE_CHECK(ports > 0,
              "resource_gbs: '" << resource << "': GPU" << g << " has no NVLink (" << name << ")");
    return ports * links.nvlink_gbs_per_link;
  }
  if ((kind == "pcie" || kind == "switch") && part.size() == 3 &&
      (part[1] == "up" || part[1] == "down")) {
    if (kind == "pcie") {
      gpu_arg(part[2]);
    } else {
      const int id = parse_int(part[2], resource);
      bool known = false;
      for (const auto& chain : topology.switches) {
        known |= std::find(chain.begin(), chain.end(), id) != chain.end();
      }
      DPE_CHECK(known,
                "resource_gbs: '" << resource << "': no PCIe switch " << id << " in " << name);
    }
    return links.pcie_gbs;
  }
  if (kind == "bridge" && part.size() == 2 && part[1].rfind("socket", 0) == 0) {
    parse_int(part[1].substr(6), resource);
    return links.host_bridge_gbs;
  }
  if (kind == "sys" && part.size() == 2) {
    const std::vector<std::string> ends = split(part[1], '>');
    DPE_CHECK(ends.size() == 2, "resource_gbs: expected sys:S>T, got '" << resource << "'");
    parse_int(ends[0], resource);
    parse_int(ends[1], resource);
    return links.inter_socket_gbs;
  }
  DPE_THROW("resource_gbs: unknown resource '"
            << resource
            << "' (expected nvlink:A>B, nvswitch:out|in:G, pcie:up|down:G, switch:up|down:K, "
               "bridge:socketS or sys:S>T)");
}

double Cluster::pair_gbs(int a, int b) const {
  check_gpu(*this, a, "Cluster::pair_gbs");
  check_gpu(*this, b, "Cluster::pair_gbs");
  if (a == b) return gpu.mem_bw_gbs / 2;  // an on-device copy reads and writes
  double gbs = std::numeric_limits<double>::infinity();
  for (const std::string& r : path(a, b)) gbs = std::min(gbs, resource_gbs(r));
  return gbs;
}

double Cluster::pair_latency_us(int a, int b) const {
  check_gpu(*this, a, "Cluster::pair_latency_us");
  check_gpu(*this, b, "Cluster::pair_latency_us");
  switch (route(*this, a, b)) {
    case Route::kSelf:
      return 0;
    case Route::kNvLink:
    case Route::kNvSwitch:
      return links.p2p_latency_us;
    case Route::kPcieP2p:
      return links.pcie_latency_us;
    case Route::kHost:
      return links.host_latency_us;
  }
  return links.host_latency_us;
}

// ---- presets -----------------------------------------------------------------------------------

std::vector<std::string> cluster_preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : presets()) names.push_back(p.name);
  return names;
}

int cluster_preset_node_gpus(const std::string& name) {
  for (int n = 64; n >= 1; --n) {
    try {
      return cluster_preset(name, n, 1).topology.gpus;
    } catch (const Error&) {
      if (n == 1) throw;  // an unknown name: cluster_preset's message lists the known ones
    }
  }
  return 0;
}

Cluster cluster_preset(const std::string& name, int gpus_per_node, int nodes) {
  const Preset* preset = nullptr;
  for (const Preset& p : presets()) {
    if (normalized_name(p.name) == normalized_name(name)) preset = &p;
  }
  DPE_CHECK(preset != nullptr, "cluster_preset: unknown preset '"
                                   << name << "' (known: " << joined_names(cluster_preset_names())
                                   << ")");
  DPE_CHECK(gpus_per_node >= 1 && gpus_per_node <= preset->topology.gpus,
            "cluster_preset: " << preset->name << " has " << preset->topology.gpus
                               << " GPUs per node, asked for " << gpus_per_node);
  DPE_CHECK(nodes >= 1,
            "cluster_preset: " << preset->name << ": " << nodes << " nodes, expected at least 1");
  Cluster c;
  c.name = preset->name;
  c.gpu = gpu_spec(preset->gpu);
  c.topology = first_gpus(preset->topology, gpus_per_node);
  c.nodes = nodes;
  c.links = link_rates_for(c.gpu);
  if (preset->inter_socket_gbs > 0) c.links.inter_socket_gbs = preset->inter_socket_gbs;
  c.network = preset->network;
  c.p2p = preset->p2p;
  c.nvswitch = preset->nvswitch;
  return c;
}

Cluster make_cluster(const std::string& gpu, const NodeTopology& topology, int nodes,
                     const Network& network) {
  validate_topology(topology);
  DPE_CHECK(nodes >= 1, "make_cluster: " << nodes << " nodes, expected at least 1");
  Cluster c;
  c.gpu = gpu_spec(gpu);
  c.name = c.gpu.name + " x" + std::to_string(topology.gpus) + " x" + std::to_string(nodes);
  c.topology = topology;
  if (c.topology.socket.empty()) c.topology.socket = infer_sockets(topology);
  if (c.topology.switches.empty()) c.topology.switches = infer_switches(topology);
  validate_topology(c.topology);
  for (int i = 0; i < topology.gpus; ++i) {
    for (int j = 0; j < topology.gpus; ++j) {
      DPE_CHECK(topology.pairs[i][j].kind != LinkKind::kNvLink || c.gpu.nvlinks > 0,
                "make_cluster: GPU" << i << "-GPU" << j << " is "
                                    << link_kind_name(topology.pairs[i][j]) << " but " << c.gpu.name
                                    << " has no NVLink");
    }
  }
  c.nodes = nodes;
  c.links = link_rates_for(c.gpu);
  c.network = network;
  c.p2p = true;
  c.nvswitch = has_nvswitch(topology, c.gpu);
  return c;
}

}  // namespace dpe::sim
