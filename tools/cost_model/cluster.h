// cluster: the machine description of the DataParallel/DDP cost model (//tools:sim): GPU specs,
// the intra-node topology (topology.h, parsed from `nvidia-smi topo -m`), link and network rates,
// the framework's CPU-side costs, and named presets. Values and their sources:
// docs/cluster_model.md.
//
// Threading contract: every function is a pure function of its arguments or reads immutable tables
// (built on first use, thread-safe); Cluster is a value, safe to share read-only.
#pragma once

#include <string>
#include <vector>

#include "tools/cost_model/topology.h"

namespace dpe::sim {

// Math of GEMMs/convs: fp32 CUDA cores, TF32 tensor cores, or fp16 or bf16 mixed precision
// (tensor cores with fp32 accumulation; 16-bit activations and gradients, fp32 master weights and
// optimizer state), the names bench's and train's --precision use.
enum class Precision { kFp32, kTf32, kFp16, kBf16 };
// fp16 or bf16: 2-byte activations and gradients.
inline bool is_mixed(Precision p) { return p == Precision::kFp16 || p == Precision::kBf16; }

struct GpuSpec {
  std::string name;    // "TITAN RTX", "V100-SXM2-32GB", "A100-SXM4-80GB", "H100-SXM5-80GB", ...
  double fp32_tflops;  // dense peaks; tensor cores where they exist
  double tf32_tflops;  // = fp32_tflops where the GPU has no TF32
  double fp16_tflops;  // fp16 tensor cores, fp32 accumulation, dense
  double mem_bw_gbs;   // HBM/GDDR peak, GB/s (1e9 B/s)
  double mem_gib;      // nominal capacity
  double launch_us;    // per-kernel floor of a chain of dependent small kernels
  std::string source;  // short citation
  int sm = 0;          // compute capability x10 (75, 70, 80, 90): picks the NVLink rate
  int nvlinks = 0;     // NVLink ports of the GPU (0: none); more NV# in a matrix means NVSwitch
  int pcie_gen = 3;    // host interface: PCIe gen x16
  // bf16 tensor cores: Ampere (sm 80) on, at fp16's rate.
  bool has_bf16() const { return sm >= 80; }
  // Throws dpe::Error for bf16 on a GPU without it.
  double peak_tflops(Precision p) const;
};
const std::vector<GpuSpec>& gpu_specs();
// Case-insensitive, ignoring spaces, '-' and '_'; short aliases "titanrtx", "v100", "a100",
// "h100", "a100-pcie", "h100-pcie". Throws dpe::Error listing the known names.
const GpuSpec& gpu_spec(const std::string& name);

struct LinkRates {             // effective (achievable) one-direction GB/s and latency
  double nvlink_gbs_per_link;  // per link per direction for the GPU's NVLink generation
  double pcie_gbs;             // GPU's PCIe x16 effective one-direction (gen 3/4/5 by GPU)
  double host_bridge_gbs;      // through the CPU's root complex (PHB) when P2P is off/not possible
  double inter_socket_gbs;     // SYS: across the CPU interconnect (UPI/xGMI), per direction
  double p2p_latency_us;       // one NVLink P2P hop
  double pcie_latency_us = 0;  // one PCIe P2P hop (PIX/PXB)
  double host_latency_us = 0;  // through host memory (SHM: PHB/NODE/SYS, or P2P off)
  double collective_base_us = 0;  // every NCCL collective's fixed cost (its launch and setup)
  // What a host bridge delivers, as a share of host_bridge_gbs, while it carries two or more
  // transfers at once (every transfer through host memory is a write into it and a read out of
  // it, so concurrent ones cross each other at the root complex). 1: no loss.
  double host_duplex_efficiency = 1.0;
};
// The rates of a GPU's generation on its usual platform (PCIe gen, NVLink gen, CPU interconnect).
LinkRates link_rates_for(const GpuSpec& gpu);

// NICs summed per node, one direction, effective.
struct Network {
  double gbs_per_node = 12.5;
  double latency_us = 5;
  std::string name;
};

// Per-iteration costs of the framework on the CPU side that a roofline of kernels cannot see.
struct Framework {
  std::string name;         // "pytorch", "dpe"
  double op_dispatch_us;    // CPU time to launch one op (eager dispatch); overlaps GPU work
                            // unless kernels are shorter
  double dp_fixed_us;       // DataParallel's per-iteration fixed cost (replicate bookkeeping,
                            // threads start/join)
  double dp_per_device_us;  // ... per device (PyTorch: a Python thread per device in
                            // parallel_apply)
  double ddp_fixed_us;      // DDP's per-iteration cost (reducer prepare/finalize)
  std::string source;
  double dp_per_tensor_us = 0;         // DataParallel, per parameter/buffer tensor per replica
                                       // (replicate's per-module/per-tensor work, main thread)
  bool dp_forward_serialized = false;  // the replicas' forward dispatch shares one lock (PyTorch:
                                       // the GIL across parallel_apply's threads); backward never
  double ddp_per_tensor_us = 0;        // DDP's autograd hook per gradient (mark ready, bucket copy)
  double ddp_per_bucket_us = 0;        // DDP: CPU time to launch one bucket's all-reduce
};
const std::vector<Framework>& frameworks();
const Framework& framework(const std::string& name);  // "pytorch", "dpe"; dpe::Error otherwise

struct Cluster {
  std::string name;
  GpuSpec gpu;
  NodeTopology topology;  // of one node
  int nodes = 1;
  LinkRates links;
  Network network;
  bool p2p = true;  // false: NCCL_P2P_DISABLE=1 / no NVLink use: GPU pairs go through the host
                    // (PHB/SYS path, SHM)
  bool nvswitch = false;  // NV# pairs go through an NVSwitch fabric (each GPU's ports shared by
                          // all its peers) rather than dedicated links
  int total_gpus() const { return topology.gpus * nodes; }
  // Effective one-direction bandwidth (GB/s) and latency (us) between two GPUs of one node: the
  // slowest resource of path(a, b). a == b: an on-device copy (half the memory bandwidth), 0 us.
  double pair_gbs(int a, int b) const;
  double pair_latency_us(int a, int b) const;
  // The shared resources a transfer a->b (same node) crosses, for contention, each with its
  // bandwidth in resource_gbs(). Every name is per direction:
  //   "nvlink:0>1"                      dedicated NV# links from GPU 0 to GPU 1
  //   "nvswitch:out:0", "nvswitch:in:1" a GPU's NVLink ports into / out of an NVSwitch fabric
  //   "pcie:up:0", "pcie:down:1"        each GPU's x16 link, towards / from the host
  //   "switch:up:k", "switch:down:k"    PCIe switch k's uplink, towards / from the host
  //   "bridge:socket0"                  socket 0's root complex and host memory (SHM); both
  //                                     directions share it (CPUs handle bidirectional traffic
  //                                     poorly)
  //   "sys:0>1"                         the CPU interconnect from socket 0 to socket 1
  // Empty for a == b.
  std::vector<std::string> path(int a, int b) const;
  double resource_gbs(const std::string& resource) const;
};
// Named presets, each of `gpus_per_node` GPUs on `nodes` nodes:
//  "titanrtx-nvlink": 2x TITAN RTX joined by 2 NVLinks (NV2), PCIe 3 (Hugging Face's DP-vs-DDP
//                     benchmark machine)
//  "titanrtx-pcie":   the same with P2P/NVLink disabled (NCCL_P2P_DISABLE=1): pairs go through
//                     the host
//  "dgx1-v100":       8x V100 SXM2 hybrid cube-mesh (NV1/NV2 as DGX-1's `nvidia-smi topo -m`
//                     prints; pairs without NVLink are SYS), 4x 100 Gb/s EDR InfiniBand per node
//  "dgx-a100":        8x A100 SXM4 80GB, NVSwitch (every pair NV12), 8x 200 Gb/s HDR per node
//  "dgx-a100-40g":    the same with A100 SXM4 40GB (DGX A100 320GB)
//  "dgx-h100":        8x H100 SXM5, NVSwitch (NV18), 8x 400 Gb/s NDR per node
//  "pcie-a100":       8x A100 PCIe 40GB on two sockets behind PCIe switches (PIX/PXB/NODE/SYS),
//                     100 Gb/s Ethernet
//  "pcie-t4", "pcie-l4": 8x T4 / 8x L4 in pcie-a100's layout, 100 Gb/s Ethernet
//  "pcie-rtx4090":    8x RTX 4090 in that layout without P2P (GeForce 40), 25 Gb/s Ethernet
// gpus_per_node may be smaller than the preset's node (the first GPUs of the matrix). dpe::Error on
// an unknown name (listing the known ones), gpus_per_node outside 1..node size, or nodes < 1.
Cluster cluster_preset(const std::string& name, int gpus_per_node, int nodes = 1);
std::vector<std::string> cluster_preset_names();
// The GPUs of one node of a preset (8 for the DGX presets). dpe::Error on an unknown name.
int cluster_preset_node_gpus(const std::string& name);
// A cluster from a GPU name, a topology (e.g. parse_topology of nvidia-smi topo -m) and a network;
// link rates from the GPU's generation (link_rates_for), nvswitch when a GPU shows more NV# than
// it has ports.
Cluster make_cluster(const std::string& gpu, const NodeTopology& topology, int nodes,
                     const Network& network);

}  // namespace dpe::sim
