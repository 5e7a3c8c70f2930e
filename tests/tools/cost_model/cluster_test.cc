// cluster: the presets' matrices, pair rates and paths, clusters made from nvidia-smi's text, GPU
// and framework lookups. The parser itself: topology_test.cc.
#include "tools/cost_model/cluster.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/tools/cost_model/topology_test_util.h"

namespace dpe::sim {
namespace {

using testing_topology::error_of;
using testing_topology::kDgx1;
using testing_topology::kind_at;
using testing_topology::kTitanPhb;

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// ---- presets ---------------------------------------------------------------------------------

// The cards users rent or own beside the data-center ones, with their datasheets' dense peaks.
TEST(ClusterPresetTest, PcieCardsOfOtherKinds) {
  EXPECT_EQ(gpu_spec("t4").fp16_tflops, 65);
  EXPECT_EQ(gpu_spec("L4").tf32_tflops, 60);
  EXPECT_EQ(gpu_spec("rtx4090").mem_bw_gbs, 1008);
  EXPECT_EQ(gpu_spec("4090").name, "RTX 4090");
  EXPECT_EQ(cluster_preset("pcie-l4", 8).gpu.name, "L4");
  EXPECT_TRUE(cluster_preset("pcie-t4", 8).p2p);
  EXPECT_FALSE(cluster_preset("pcie-rtx4090", 8).p2p);  // GeForce 40: no P2P
}

TEST(ClusterPresetTest, EveryPresetIsSymmetricWithSelfOnTheDiagonal) {
  const std::vector<std::string> names = cluster_preset_names();
  EXPECT_EQ(names, (std::vector<std::string>{"titanrtx-nvlink", "titanrtx-pcie", "dgx1-v100",
                                             "dgx-a100", "dgx-a100-40g", "dgx-h100", "pcie-a100",
                                             "pcie-t4", "pcie-l4", "pcie-rtx4090"}));
  for (const std::string& name : names) {
    const Cluster c = cluster_preset(name, name.rfind("titanrtx", 0) == 0 ? 2 : 8);
    SCOPED_TRACE(name);
    EXPECT_EQ(c.name, name);
    const NodeTopology& t = c.topology;
    ASSERT_EQ(static_cast<int>(t.pairs.size()), t.gpus);
    for (int i = 0; i < t.gpus; ++i) {
      for (int j = 0; j < t.gpus; ++j) {
        EXPECT_EQ(t.pairs[i][j], t.pairs[j][i]);
        EXPECT_EQ(i == j, t.pairs[i][j].kind == LinkKind::kSelf);
        if (i == j) continue;
        // Every path's resources have a rate, and the pair rate is the slowest of them.
        double slowest = 1e30;
        for (const std::string& r : c.path(i, j)) slowest = std::min(slowest, c.resource_gbs(r));
        EXPECT_DOUBLE_EQ(c.pair_gbs(i, j), slowest);
        EXPECT_GT(c.pair_latency_us(i, j), 0);
      }
    }
    EXPECT_NO_THROW(validate_topology(t));
  }
}

TEST(ClusterPresetTest, DocumentedLinkKinds) {
  const Cluster titan = cluster_preset("titanrtx-nvlink", 2);
  EXPECT_EQ(titan.gpu.name, "TITAN RTX");
  EXPECT_EQ(kind_at(titan.topology, 0, 1), "NV2");
  EXPECT_TRUE(titan.p2p);
  EXPECT_FALSE(cluster_preset("titanrtx-pcie", 2).p2p);

  // DGX-1's hybrid cube-mesh: six NVLinks per GPU (two NV2, two NV1), three SYS pairs.
  const Cluster dgx1 = cluster_preset("dgx1-v100", 8);
  EXPECT_EQ(dgx1.gpu.name, "V100-SXM2-32GB");
  EXPECT_FALSE(dgx1.nvswitch);
  for (int i = 0; i < 8; ++i) {
    int links = 0, sys = 0, nv2 = 0;
    for (int j = 0; j < 8; ++j) {
      links += dgx1.topology.pairs[i][j].nvlinks;
      sys += dgx1.topology.pairs[i][j].kind == LinkKind::kSys;
      nv2 += dgx1.topology.pairs[i][j].nvlinks == 2;
    }
    EXPECT_EQ(links, 6) << "GPU" << i;
    EXPECT_EQ(sys, 3) << "GPU" << i;
    EXPECT_EQ(nv2, 2) << "GPU" << i;
  }

  for (const auto& [name, cell] : std::vector<std::pair<std::string, std::string>>{
           {"dgx-a100", "NV12"}, {"dgx-h100", "NV18"}}) {
    const Cluster c = cluster_preset(name, 8);
    EXPECT_TRUE(c.nvswitch) << name;
    for (int i = 0; i < 8; ++i) {
      for (int j = 0; j < 8; ++j) {
        if (i != j) {
          EXPECT_EQ(kind_at(c.topology, i, j), cell) << name;
        }
      }
    }
  }
  EXPECT_EQ(cluster_preset("dgx-a100", 8).gpu.name, "A100-SXM4-80GB");
  EXPECT_EQ(cluster_preset("dgx-h100", 8).gpu.name, "H100-SXM5-80GB");

  const Cluster pcie = cluster_preset("pcie-a100", 8);
  EXPECT_EQ(pcie.gpu.name, "A100-PCIe-40GB");
  EXPECT_EQ(kind_at(pcie.topology, 0, 1), "PIX");
  EXPECT_EQ(kind_at(pcie.topology, 2, 3), "PXB");
  EXPECT_EQ(kind_at(pcie.topology, 0, 2), "NODE");
  EXPECT_EQ(kind_at(pcie.topology, 0, 4), "SYS");
  EXPECT_EQ(kind_at(pcie.topology, 6, 7), "PXB");
}

TEST(ClusterPresetTest, FewerGpusPerNodeTakeTheFirstOfTheMatrix) {
  const Cluster c = cluster_preset("dgx1-v100", 4, 4);
  EXPECT_EQ(c.topology.gpus, 4);
  EXPECT_EQ(c.nodes, 4);
  EXPECT_EQ(c.total_gpus(), 16);
  EXPECT_EQ(kind_at(c.topology, 0, 3), "NV2");
  EXPECT_EQ(c.topology.socket.size(), 4u);
  EXPECT_EQ(cluster_preset("dgx-h100", 8, 2).total_gpus(), 16);

  std::string e = error_of([] { cluster_preset("dgx-a100", 9); });
  EXPECT_NE(e.find("8 GPUs per node"), std::string::npos) << e;
  e = error_of([] { cluster_preset("dgx-a100", 0); });
  EXPECT_NE(e.find("asked for 0"), std::string::npos) << e;
  e = error_of([] { cluster_preset("dgx-a100", 8, 0); });
  EXPECT_NE(e.find("0 nodes"), std::string::npos) << e;
  e = error_of([] { cluster_preset("dgx-b200", 8); });
  EXPECT_NE(e.find("unknown preset 'dgx-b200'"), std::string::npos) << e;
  EXPECT_NE(e.find("dgx1-v100"), std::string::npos) << e;
}

// ---- pair rates and paths ----------------------------------------------------------------------

TEST(ClusterPairTest, Nv2PairIsTwiceTheLinkRate) {
  const Cluster c = cluster_preset("titanrtx-nvlink", 2);
  EXPECT_DOUBLE_EQ(c.pair_gbs(0, 1), 2 * c.links.nvlink_gbs_per_link);
  EXPECT_DOUBLE_EQ(c.pair_gbs(1, 0), 2 * c.links.nvlink_gbs_per_link);
  EXPECT_EQ(c.path(0, 1), std::vector<std::string>{"nvlink:0>1"});
  EXPECT_EQ(c.path(1, 0), std::vector<std::string>{"nvlink:1>0"});
  EXPECT_DOUBLE_EQ(c.pair_latency_us(0, 1), c.links.p2p_latency_us);

  const Cluster dgx1 = cluster_preset("dgx1-v100", 8);
  EXPECT_DOUBLE_EQ(dgx1.pair_gbs(0, 1), dgx1.links.nvlink_gbs_per_link);      // NV1
  EXPECT_DOUBLE_EQ(dgx1.pair_gbs(0, 3), 2 * dgx1.links.nvlink_gbs_per_link);  // NV2
}

TEST(ClusterPairTest, PhbPairIsTheHostBridgeRate) {
  const Cluster c = make_cluster("titanrtx", parse_topology(kTitanPhb), 1, Network{});
  EXPECT_DOUBLE_EQ(c.pair_gbs(0, 1), c.links.host_bridge_gbs);
  EXPECT_EQ(c.path(0, 1), (std::vector<std::string>{"pcie:up:0", "bridge:socket0", "pcie:down:1"}));
  EXPECT_DOUBLE_EQ(c.pair_latency_us(0, 1), c.links.host_latency_us);
  EXPECT_LT(c.links.host_bridge_gbs, c.links.pcie_gbs);
}

TEST(ClusterPairTest, P2pOffRoutesNvLinkPairsThroughTheHost) {
  const Cluster off = cluster_preset("titanrtx-pcie", 2);
  EXPECT_DOUBLE_EQ(off.pair_gbs(0, 1), off.links.host_bridge_gbs);
  const std::vector<std::string> p = off.path(0, 1);
  EXPECT_TRUE(contains(p, "bridge:socket0"));
  EXPECT_TRUE(contains(p, "pcie:up:0"));
  EXPECT_TRUE(contains(p, "pcie:down:1"));
  EXPECT_FALSE(contains(p, "nvlink:0>1"));
  EXPECT_DOUBLE_EQ(off.pair_latency_us(0, 1), off.links.host_latency_us);
  EXPECT_LT(off.pair_gbs(0, 1), cluster_preset("titanrtx-nvlink", 2).pair_gbs(0, 1));

  // The same on an NVSwitch machine; across sockets the CPU interconnect is crossed.
  Cluster dgx = cluster_preset("dgx-a100", 8);
  dgx.p2p = false;
  const std::vector<std::string> cross = dgx.path(0, 4);
  EXPECT_TRUE(contains(cross, "sys:0>1"));
  EXPECT_TRUE(contains(cross, "bridge:socket0"));
  EXPECT_TRUE(contains(cross, "bridge:socket1"));
  EXPECT_TRUE(contains(cross, "switch:up:0"));
  EXPECT_TRUE(contains(cross, "switch:down:2"));
  EXPECT_DOUBLE_EQ(dgx.pair_gbs(0, 4),
                   std::min(dgx.links.host_bridge_gbs, dgx.links.inter_socket_gbs));
}

TEST(ClusterPairTest, NvSwitchSharesEachGpusPorts) {
  const Cluster c = cluster_preset("dgx-a100", 8);
  EXPECT_EQ(c.path(0, 7), (std::vector<std::string>{"nvswitch:out:0", "nvswitch:in:7"}));
  EXPECT_DOUBLE_EQ(c.pair_gbs(0, 7), 12 * c.links.nvlink_gbs_per_link);
  EXPECT_DOUBLE_EQ(c.resource_gbs("nvswitch:out:3"), 12 * c.links.nvlink_gbs_per_link);
  const Cluster h = cluster_preset("dgx-h100", 8);
  EXPECT_DOUBLE_EQ(h.pair_gbs(2, 5), 18 * h.links.nvlink_gbs_per_link);
}

TEST(ClusterPairTest, PciePairCrossesBothGpusX16Links) {
  const Cluster c = cluster_preset("pcie-a100", 8);
  // PIX: one switch, no uplink.
  EXPECT_EQ(c.path(0, 1), (std::vector<std::string>{"pcie:up:0", "pcie:down:1"}));
  EXPECT_DOUBLE_EQ(c.pair_gbs(0, 1), c.links.pcie_gbs);
  EXPECT_DOUBLE_EQ(c.pair_latency_us(0, 1), c.links.pcie_latency_us);
  // PXB: up one switch level and down another, below the host bridge.
  EXPECT_EQ(c.path(2, 3),
            (std::vector<std::string>{"pcie:up:2", "switch:up:1", "switch:down:3", "pcie:down:3"}));
  EXPECT_DOUBLE_EQ(c.pair_gbs(2, 3), c.links.pcie_gbs);
  // NODE: through the socket's root complex.
  EXPECT_EQ(c.path(0, 2),
            (std::vector<std::string>{"pcie:up:0", "switch:up:0", "bridge:socket0", "switch:down:2",
                                      "switch:down:1", "pcie:down:2"}));
  EXPECT_DOUBLE_EQ(c.pair_gbs(0, 2), c.links.host_bridge_gbs);
  // SYS: across the CPU interconnect.
  const std::vector<std::string> sys = c.path(1, 5);
  EXPECT_EQ(sys.front(), "pcie:up:1");
  EXPECT_EQ(sys.back(), "pcie:down:5");
  EXPECT_TRUE(contains(sys, "sys:0>1"));
  EXPECT_DOUBLE_EQ(c.pair_gbs(1, 5), std::min(c.links.host_bridge_gbs, c.links.inter_socket_gbs));
  EXPECT_DOUBLE_EQ(c.resource_gbs("pcie:up:7"), c.links.pcie_gbs);
  EXPECT_DOUBLE_EQ(c.resource_gbs("switch:down:6"), c.links.pcie_gbs);
  EXPECT_DOUBLE_EQ(c.resource_gbs("sys:1>0"), c.links.inter_socket_gbs);
}

TEST(ClusterPairTest, SelfAndBadArguments) {
  const Cluster c = cluster_preset("dgx1-v100", 8);
  EXPECT_TRUE(c.path(3, 3).empty());
  EXPECT_DOUBLE_EQ(c.pair_gbs(3, 3), c.gpu.mem_bw_gbs / 2);
  EXPECT_DOUBLE_EQ(c.pair_latency_us(3, 3), 0);
  std::string e = error_of([&] { c.pair_gbs(0, 8); });
  EXPECT_NE(e.find("GPU 8"), std::string::npos) << e;
  e = error_of([&] { c.resource_gbs("qpi:0"); });
  EXPECT_NE(e.find("unknown resource 'qpi:0'"), std::string::npos) << e;
  e = error_of([&] { c.resource_gbs("nvlink:0>5"); });
  EXPECT_NE(e.find("not NVLink"), std::string::npos) << e;
  e = error_of([&] { c.resource_gbs("switch:up:9"); });
  EXPECT_NE(e.find("no PCIe switch 9"), std::string::npos) << e;
}

TEST(ClusterPairTest, MakeClusterFromTopologyText) {
  const Cluster dgx1 = make_cluster("v100", parse_topology(kDgx1), 2, Network{45, 9.6, "4x EDR"});
  EXPECT_FALSE(dgx1.nvswitch);  // six NVLinks per GPU, as many as a V100 has
  EXPECT_EQ(dgx1.total_gpus(), 16);
  EXPECT_DOUBLE_EQ(dgx1.pair_gbs(0, 3), 2 * dgx1.links.nvlink_gbs_per_link);
  EXPECT_TRUE(contains(dgx1.path(0, 5), "sys:0>1"));

  const NodeTopology nv12 = parse_topology(format_topology(cluster_preset("dgx-a100", 8).topology));
  const Cluster a100 = make_cluster("a100", nv12, 1, Network{});
  EXPECT_TRUE(a100.nvswitch);  // 7 x NV12 on a GPU with 12 ports
  EXPECT_EQ(a100.path(0, 1), (std::vector<std::string>{"nvswitch:out:0", "nvswitch:in:1"}));
  // Two GPUs of an NVSwitch node read as a dedicated NV12 pair: the same rate.
  const Cluster two = make_cluster("a100", cluster_preset("dgx-a100", 2).topology, 1, Network{});
  EXPECT_FALSE(two.nvswitch);
  EXPECT_DOUBLE_EQ(two.pair_gbs(0, 1), a100.pair_gbs(0, 1));
}

// ---- GPUs, rates, frameworks ---------------------------------------------------------------

TEST(ClusterGpuTest, AliasesAndPeaks) {
  EXPECT_EQ(gpu_spec("titanrtx").name, "TITAN RTX");
  EXPECT_EQ(gpu_spec("Titan RTX").name, "TITAN RTX");
  EXPECT_EQ(gpu_spec("V100").name, "V100-SXM2-32GB");
  EXPECT_EQ(gpu_spec("a100").name, "A100-SXM4-80GB");
  EXPECT_EQ(gpu_spec("h100").name, "H100-SXM5-80GB");
  EXPECT_EQ(gpu_spec("a100-sxm4-40gb").name, "A100-SXM4-40GB");
  EXPECT_EQ(gpu_spec("A100-PCIE").name, "A100-PCIe-40GB");
  EXPECT_EQ(gpu_spec("h100-pcie").name, "H100-PCIe");

  const GpuSpec& titan = gpu_spec("titanrtx");
  EXPECT_DOUBLE_EQ(titan.peak_tflops(Precision::kTf32), titan.peak_tflops(Precision::kFp32));
  EXPECT_DOUBLE_EQ(titan.peak_tflops(Precision::kFp32), 16.3);
  const GpuSpec& a100 = gpu_spec("a100");
  EXPECT_DOUBLE_EQ(a100.peak_tflops(Precision::kTf32), 156);
  EXPECT_DOUBLE_EQ(a100.peak_tflops(Precision::kFp16), 312);
  EXPECT_DOUBLE_EQ(a100.mem_bw_gbs, 2039);
  EXPECT_DOUBLE_EQ(gpu_spec("h100").peak_tflops(Precision::kFp16), 989.4);
  // bf16 at fp16's tensor-core rate from Ampere on; a V100 or a TITAN RTX has none.
  EXPECT_DOUBLE_EQ(a100.peak_tflops(Precision::kBf16), 312);
  EXPECT_DOUBLE_EQ(gpu_spec("h100").peak_tflops(Precision::kBf16), 989.4);
  EXPECT_FALSE(gpu_spec("v100").has_bf16());
  EXPECT_THROW(gpu_spec("v100").peak_tflops(Precision::kBf16), Error);
  EXPECT_THROW(titan.peak_tflops(Precision::kBf16), Error);
  for (const GpuSpec& g : gpu_specs()) {
    SCOPED_TRACE(g.name);
    EXPECT_FALSE(g.source.empty());
    EXPECT_GT(g.fp32_tflops, 0);
    EXPECT_GE(g.tf32_tflops, g.fp32_tflops);
    EXPECT_GT(g.fp16_tflops, g.tf32_tflops);
    EXPECT_GT(g.launch_us, 0);
    EXPECT_EQ(&gpu_spec(g.name), &g);
  }
}

TEST(ClusterGpuTest, UnknownGpuListsTheKnownNames) {
  const std::string e = error_of([] { gpu_spec("rtx9090"); });
  EXPECT_NE(e.find("unknown GPU 'rtx9090'"), std::string::npos) << e;
  EXPECT_NE(e.find("TITAN RTX"), std::string::npos) << e;
  EXPECT_NE(e.find("H100-SXM5-80GB"), std::string::npos) << e;
  EXPECT_NE(e.find("v100"), std::string::npos) << e;
}

TEST(ClusterGpuTest, LinkRatesFollowTheGeneration) {
  const LinkRates gen3 = link_rates_for(gpu_spec("v100"));
  const LinkRates gen4 = link_rates_for(gpu_spec("a100"));
  const LinkRates gen5 = link_rates_for(gpu_spec("h100"));
  EXPECT_DOUBLE_EQ(gen3.pcie_gbs, 12);
  EXPECT_DOUBLE_EQ(gen4.pcie_gbs, 24);
  EXPECT_DOUBLE_EQ(gen5.pcie_gbs, 48);
  EXPECT_DOUBLE_EQ(gen3.nvlink_gbs_per_link, 20);
  EXPECT_DOUBLE_EQ(gen5.nvlink_gbs_per_link, 20.6);
  for (const LinkRates& r : {gen3, gen4, gen5}) {
    EXPECT_LT(r.host_bridge_gbs, r.pcie_gbs);
    EXPECT_LT(r.p2p_latency_us, r.pcie_latency_us);
    EXPECT_LT(r.pcie_latency_us, r.host_latency_us);
  }
  EXPECT_DOUBLE_EQ(cluster_preset("dgx1-v100", 8).links.inter_socket_gbs, 6);  // Broadwell QPI
}

TEST(ClusterFrameworkTest, LookupAndKnownNames) {
  const Framework& pt = framework("pytorch");
  const Framework& dpe = framework("DPE");
  EXPECT_EQ(pt.name, "pytorch");
  EXPECT_EQ(dpe.name, "dpe");
  EXPECT_GT(pt.op_dispatch_us, dpe.op_dispatch_us);
  EXPECT_GT(pt.dp_fixed_us, dpe.dp_fixed_us);
  EXPECT_TRUE(pt.dp_forward_serialized);
  EXPECT_FALSE(dpe.dp_forward_serialized);
  EXPECT_FALSE(pt.source.empty());
  EXPECT_FALSE(dpe.source.empty());
  const std::string e = error_of([] { framework("jax"); });
  EXPECT_NE(e.find("unknown framework 'jax'"), std::string::npos) << e;
  EXPECT_NE(e.find("pytorch, dpe"), std::string::npos) << e;
}

}  // namespace
}  // namespace dpe::sim
