// topology: one node's GPU topology as `nvidia-smi topo -m` prints it: the link kind of every GPU
// pair, each GPU's CPU socket and PCIe switches; parsed from nvidia-smi's text, written back in its
// layout, and checked.
//
// Threading contract: pure functions of their arguments; NodeTopology is a value, safe to share
// read-only.
#pragma once

#include <string>
#include <vector>

namespace dpe::sim {

// nvidia-smi topo -m's X, NV#, PIX, PXB, PHB, NODE, SYS (older drivers print SOC for SYS).
enum class LinkKind { kSelf, kNvLink, kPix, kPxb, kPhb, kNode, kSys };
struct PairLink {
  LinkKind kind = LinkKind::kSys;
  int nvlinks = 0;  // the # of NV#
  bool operator==(const PairLink& o) const { return kind == o.kind && nvlinks == o.nvlinks; }
};
struct NodeTopology {
  int gpus = 0;
  std::vector<std::vector<PairLink>> pairs;  // [gpus][gpus], symmetric, kSelf on the diagonal
  // CPU socket (NUMA node) of each GPU; empty: unknown (all on socket 0).
  std::vector<int> socket;
  // The PCIe switches between each GPU and its host bridge, nearest first (empty: the GPU sits on
  // a root port). Switch ids are per node. Empty outer vector: no switches known.
  std::vector<std::vector<int>> switches;
  bool operator==(const NodeTopology& o) const {
    return gpus == o.gpus && pairs == o.pairs && socket == o.socket && switches == o.switches;
  }
};
// Parses the GPU matrix of `nvidia-smi topo -m` (header line "GPU0 GPU1 ...", rows "GPU0 X NV2
// ..."; ignores NIC rows and columns, the CPU affinity column and the legend; strips the terminal
// escapes nvidia-smi prints). Sockets come from a numeric "NUMA Affinity" column when present,
// otherwise from the matrix (PIX/PXB/PHB/NODE: same socket, SYS: different sockets); switches from
// the PIX/PXB groups (GPUs joined only by NVLink show no switch). dpe::Error naming the line on bad
// input.
NodeTopology parse_topology(const std::string& nvidia_smi_topo_m);
// Back in nvidia-smi's layout (a "NUMA Affinity" column when sockets are known, and the legend):
// parse_topology(format_topology(t)) gives t back for every t that parse_topology returned.
std::string format_topology(const NodeTopology& t);
std::string link_kind_name(const PairLink& link);  // "X", "NV2", "PIX", ...
// Throws dpe::Error unless t is square, symmetric, kSelf exactly on the diagonal, NV# >= 1,
// socket/switches empty or of size gpus, and the sockets agree with the matrix (SYS across
// sockets, PIX/PXB/PHB/NODE within one).
void validate_topology(const NodeTopology& t);
// One cell of the matrix ("X", "NV2", "PIX", "SOC", ...) into *out; false when it is none.
bool parse_pair_link(const std::string& cell, PairLink* out);
// What the matrix alone implies, as parse_topology infers it: each GPU's socket (PCIe relations
// join GPUs into one socket, SYS separates them, GPUs seen only through NVLink join the first
// socket they have no SYS pair with), and each GPU's PCIe switches, nearest first (PIX pairs share
// a leaf switch; PXB pairs sit under leaf switches that share a parent), ids in order of the first
// GPU that shows them.
std::vector<int> infer_sockets(const NodeTopology& t);
std::vector<std::vector<int>> infer_switches(const NodeTopology& t);

}  // namespace dpe::sim
