// topology: nvidia-smi topo -m parsing and formatting (real DGX-1 and 2x TITAN RTX outputs),
// errors that name the bad line, the sockets and switches a matrix implies.
#include "tools/cost_model/topology.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/tools/cost_model/topology_test_util.h"
#include "tools/cost_model/cluster.h"

namespace dpe::sim {
namespace {

using testing_topology::error_of;
using testing_topology::kDgx1;
using testing_topology::kind_at;
using testing_topology::kTitanNv2;

// ---- parse / format --------------------------------------------------------------------------

TEST(TopologyTest, ParsesTheDgx1Output) {
  const NodeTopology t = parse_topology(kDgx1);
  ASSERT_EQ(t.gpus, 8);
  EXPECT_EQ(kind_at(t, 0, 0), "X");
  EXPECT_EQ(kind_at(t, 0, 1), "NV1");
  EXPECT_EQ(kind_at(t, 0, 3), "NV2");
  EXPECT_EQ(kind_at(t, 0, 4), "NV2");
  EXPECT_EQ(kind_at(t, 0, 5), "SYS");
  EXPECT_EQ(kind_at(t, 7, 6), "NV2");
  // Sockets from the matrix: GPUs 4-7 have SYS pairs with 0-3 (the CPU Affinity column is not
  // used: this machine printed the same affinity for all eight).
  EXPECT_EQ(t.socket, (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
  ASSERT_EQ(t.switches.size(), 8u);
  for (const auto& chain : t.switches) EXPECT_TRUE(chain.empty());
  // The GPU matrix is the preset's.
  EXPECT_EQ(t.pairs, cluster_preset("dgx1-v100", 8).topology.pairs);
}

TEST(TopologyTest, Dgx1RoundTrips) {
  const NodeTopology t = parse_topology(kDgx1);
  const std::string text = format_topology(t);
  EXPECT_NE(text.find("\tGPU0\tGPU1"), std::string::npos) << text;
  EXPECT_NE(text.find("NUMA Affinity"), std::string::npos) << text;
  EXPECT_NE(text.find("Legend:"), std::string::npos) << text;
  EXPECT_EQ(parse_topology(text), t);
  EXPECT_EQ(format_topology(parse_topology(text)), text);
}

TEST(TopologyTest, TitanRtxNv2RoundTrips) {
  const NodeTopology t = parse_topology(kTitanNv2);
  ASSERT_EQ(t.gpus, 2);
  EXPECT_EQ(t.pairs[0][1], (PairLink{LinkKind::kNvLink, 2}));
  EXPECT_EQ(t.pairs[1][0], (PairLink{LinkKind::kNvLink, 2}));
  EXPECT_EQ(t.socket, (std::vector<int>{0, 0}));  // NUMA Affinity N/A: from the matrix
  EXPECT_EQ(parse_topology(format_topology(t)), t);
  EXPECT_EQ(t.pairs, cluster_preset("titanrtx-nvlink", 2).topology.pairs);
}

TEST(TopologyTest, StripsTerminalEscapesAndReadsNumaAffinity) {
  // nvidia-smi on a terminal: tabs, the header underlined, a NUMA Affinity column.
  const std::string text =
      "\x1b[4m\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\x1b[0m\n"
      "GPU0\t X \tNV12\tNV12\tNV12\t0-31\t3\n"
      "GPU1\tNV12\t X \tNV12\tNV12\t0-31\t3\n"
      "GPU2\tNV12\tNV12\t X \tNV12\t32-63\t1\n"
      "GPU3\tNV12\tNV12\tNV12\t X \t32-63\t1\n";
  const NodeTopology t = parse_topology(text);
  ASSERT_EQ(t.gpus, 4);
  EXPECT_EQ(kind_at(t, 2, 3), "NV12");
  EXPECT_EQ(t.socket, (std::vector<int>{0, 0, 1, 1}));  // NUMA nodes 3 and 1, renumbered
  EXPECT_EQ(parse_topology(format_topology(t)), t);
}

TEST(TopologyTest, SkipsNicColumnsBeforeNumaAffinityAndTheNicLegend) {
  // Recent drivers: NIC columns, "GPU NUMA ID" after "NUMA Affinity", a NIC legend at the end.
  const char* text =
      R"(        GPU0    GPU1    GPU2    NIC0    NIC1    CPU Affinity    NUMA Affinity   GPU NUMA ID
GPU0     X      NV18    SYS     PIX     SYS     0-31,64-95      0               N/A
GPU1    NV18     X      SYS     PIX     SYS     0-31,64-95      0               N/A
GPU2    SYS     SYS      X      SYS     PIX     32-63,96-127    1               N/A
NIC0    PIX     PIX     SYS      X      SYS
NIC1    SYS     SYS     PIX     SYS      X

Legend:

  X    = Self
  NV#  = Connection traversing a bonded set of # NVLinks

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
)";
  const NodeTopology t = parse_topology(text);
  ASSERT_EQ(t.gpus, 3);
  EXPECT_EQ(kind_at(t, 0, 1), "NV18");
  EXPECT_EQ(kind_at(t, 1, 2), "SYS");
  EXPECT_EQ(t.socket, (std::vector<int>{0, 0, 1}));
  EXPECT_EQ(parse_topology(format_topology(t)), t);
}

TEST(TopologyTest, InfersSwitchesAndSocketsFromPcieKinds) {
  const Cluster c = cluster_preset("pcie-a100", 8);
  const NodeTopology t = parse_topology(format_topology(c.topology));
  EXPECT_EQ(t, c.topology);  // the preset's PCIe tree is what the matrix implies
  EXPECT_EQ(t.switches[0], std::vector<int>{0});
  EXPECT_EQ(t.switches[1], std::vector<int>{0});
  EXPECT_EQ(t.switches[2], (std::vector<int>{1, 2}));
  EXPECT_EQ(t.switches[3], (std::vector<int>{3, 2}));
}

TEST(TopologyTest, OldDriversSocIsSys) {
  const NodeTopology t = parse_topology(
      "\tGPU0\tGPU1\tCPU Affinity\n"
      "GPU0\t X \tSOC\t0-9\n"
      "GPU1\tSOC\t X \t10-19\n");
  EXPECT_EQ(t.pairs[0][1].kind, LinkKind::kSys);
  EXPECT_EQ(t.socket, (std::vector<int>{0, 1}));
}

TEST(TopologyTest, ErrorsNameTheBadLine) {
  std::string e = error_of([] {
    parse_topology(
        "\tGPU0\tGPU1\n"
        "GPU0\t X \tNV2\n"
        "GPU1\tNV2\t Y \n");
  });
  EXPECT_NE(e.find("line 3"), std::string::npos) << e;
  EXPECT_NE(e.find("'Y'"), std::string::npos) << e;

  e = error_of([] {
    parse_topology(
        "\tGPU0\tGPU1\n"
        "GPU0\t X \tNV2\n"
        "GPU1\tNV1\t X \n");
  });
  EXPECT_NE(e.find("line 3"), std::string::npos) << e;
  EXPECT_NE(e.find("NV1"), std::string::npos) << e;
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;

  e = error_of([] {
    parse_topology(
        "\tGPU0\tGPU1\n"
        "GPU0\t X \tNV2\n"
        "GPU1\t X \tNV2\n");
  });
  EXPECT_NE(e.find("line 3"), std::string::npos) << e;
  EXPECT_NE(e.find("diagonal"), std::string::npos) << e;

  e = error_of([] {
    parse_topology(
        "\tGPU0\tGPU1\tGPU2\n"
        "GPU0\t X \tPIX\n");
  });
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
  EXPECT_NE(e.find("expected 3"), std::string::npos) << e;

  e = error_of([] {
    parse_topology(
        "\tGPU0\tGPU1\n"
        "GPU0\t X \tPIX\n");
  });
  EXPECT_NE(e.find("line 1"), std::string::npos) << e;
  EXPECT_NE(e.find("1 GPU rows"), std::string::npos) << e;

  e = error_of([] {
    parse_topology(
        "\tGPU0\tGPU1\n"
        "GPU1\tPIX\t X \n");
  });
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
  EXPECT_NE(e.find("GPU0"), std::string::npos) << e;

  e = error_of([] { parse_topology("No devices were found\n"); });
  EXPECT_NE(e.find("no header line"), std::string::npos) << e;
}

// ---- the parts parse_topology is made of ----------------------------------------------------

TEST(TopologyTest, ParsePairLinkReadsEveryKindAndRefusesTheRest) {
  PairLink l;
  ASSERT_TRUE(parse_pair_link("NV12", &l));
  EXPECT_EQ(l, (PairLink{LinkKind::kNvLink, 12}));
  ASSERT_TRUE(parse_pair_link("SOC", &l));
  EXPECT_EQ(l, (PairLink{LinkKind::kSys, 0}));
  for (const char* cell : {"X", "PIX", "PXB", "PHB", "NODE", "SYS"}) {
    ASSERT_TRUE(parse_pair_link(cell, &l)) << cell;
    EXPECT_EQ(link_kind_name(l), cell);
  }
  l = PairLink{LinkKind::kPix, 0};
  for (const char* cell : {"NV", "NV0", "NV2a", "nv2", "x", "", "Y"}) {
    EXPECT_FALSE(parse_pair_link(cell, &l)) << cell;
  }
  EXPECT_EQ(l, (PairLink{LinkKind::kPix, 0}));  // untouched by a refused cell
}

NodeTopology from_cells(const std::vector<std::vector<std::string>>& cells) {
  NodeTopology t;
  t.gpus = static_cast<int>(cells.size());
  t.pairs.assign(t.gpus, std::vector<PairLink>(t.gpus));
  for (int i = 0; i < t.gpus; ++i) {
    for (int j = 0; j < t.gpus; ++j) EXPECT_TRUE(parse_pair_link(cells[i][j], &t.pairs[i][j]));
  }
  return t;
}

TEST(TopologyTest, InfersSocketsAndSwitchesFromTheMatrixAlone) {
  // GPUs 0,1 under one switch (PIX), 2 on the same socket's root complex (NODE), 3 across (SYS)
  // and 4 seen only through NVLink from 3.
  const NodeTopology t = from_cells({
      {"X", "PIX", "NODE", "SYS", "SYS"},
      {"PIX", "X", "NODE", "SYS", "SYS"},
      {"NODE", "NODE", "X", "SYS", "SYS"},
      {"SYS", "SYS", "SYS", "X", "NV4"},
      {"SYS", "SYS", "SYS", "NV4", "X"},
  });
  EXPECT_EQ(infer_sockets(t), (std::vector<int>{0, 0, 0, 1, 1}));
  EXPECT_EQ(infer_switches(t), (std::vector<std::vector<int>>{{0}, {0}, {}, {}, {}}));
  // GPUs joined by NVLink alone, with no SYS pair, share the first socket.
  const NodeTopology nv = from_cells({{"X", "NV2"}, {"NV2", "X"}});
  EXPECT_EQ(infer_sockets(nv), (std::vector<int>{0, 0}));
  EXPECT_EQ(infer_switches(nv), (std::vector<std::vector<int>>{{}, {}}));
}

}  // namespace
}  // namespace dpe::sim
