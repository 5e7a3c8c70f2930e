// topology: the nvidia-smi topo -m parser and formatter, the topology's checks, and the sockets and
// PCIe switches a matrix implies.
#include "tools/cost_model/topology.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <numeric>
#include <sstream>

#include "engine/core/error.h"
#include "tools/cost_model/names.h"

namespace dpe::sim {
namespace {

// nvidia-smi wraps the header in terminal escapes (ESC [ ... letter) when it writes to a terminal.
std::string without_escapes(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\x1b' && i + 1 < s.size() && s[i + 1] == '[') {
      size_t j = i + 2;
      while (j < s.size() && !std::isalpha(static_cast<unsigned char>(s[j]))) ++j;
      i = j;  // skip the final letter too
      continue;
    }
    out += s[i];
  }
  return out;
}

std::vector<std::string> words_of(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> words;
  std::string w;
  while (in >> w) words.push_back(w);
  return words;
}

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

// "GPU12" -> 12; -1 when the word is not GPU<digits>.
int gpu_index(const std::string& word) {
  if (word.size() < 4 || word.compare(0, 3, "GPU") != 0) return -1;
  for (size_t i = 3; i < word.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(word[i]))) return -1;
  }
  return std::atoi(word.c_str() + 3);
}

// Header cells after the GPU columns are separated by tabs or by two or more spaces ("CPU
// Affinity" is one cell); returns the index of the "NUMA Affinity" cell among them, or -1.
int numa_column(const std::string& rest) {
  std::vector<std::string> cells;
  std::string cell;
  for (size_t i = 0; i <= rest.size(); ++i) {
    const bool end = i == rest.size();
    const bool sep =
        !end && (rest[i] == '\t' || (rest[i] == ' ' && i + 1 < rest.size() && rest[i + 1] == ' '));
    if (end || sep) {
      const std::string t = trimmed(cell);
      if (!t.empty()) cells.push_back(t);
      cell.clear();
    } else {
      cell += rest[i];
    }
  }
  for (size_t k = 0; k < cells.size(); ++k) {
    if (normalized_name(cells[k]) == "numaaffinity") return static_cast<int>(k);
  }
  return -1;
}

bool same_socket_kind(LinkKind k) {
  return k == LinkKind::kPix || k == LinkKind::kPxb || k == LinkKind::kPhb || k == LinkKind::kNode;
}

struct UnionFind {
  std::vector<int> parent;
  explicit UnionFind(int n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  int find(int x) { return parent[x] == x ? x : parent[x] = find(parent[x]); }
  void join(int a, int b) { parent[find(a)] = find(b); }
};

// Socket ids renumbered in order of first appearance, so equal layouts compare equal.
std::vector<int> renumbered(const std::vector<int>& ids) {
  std::map<int, int> order;
  std::vector<int> out;
  for (int id : ids) out.push_back(order.emplace(id, static_cast<int>(order.size())).first->second);
  return out;
}

bool sockets_agree(const NodeTopology& t, const std::vector<int>& socket) {
  for (int i = 0; i < t.gpus; ++i) {
    for (int j = 0; j < t.gpus; ++j) {
      const LinkKind k = t.pairs[i][j].kind;
      if (k == LinkKind::kSys && socket[i] == socket[j]) return false;
      if (same_socket_kind(k) && socket[i] != socket[j]) return false;
    }
  }
  return true;
}

const char* kLegend =
    "\nLegend:\n\n"
    "  X    = Self\n"
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes "
    "(e.g., QPI/UPI)\n"
    "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges "
    "within a NUMA node\n"
    "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
    "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host "
    "Bridge)\n"
    "  PIX  = Connection traversing at most a single PCIe bridge\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n";

}  // namespace

bool parse_pair_link(const std::string& cell, PairLink* out) {
  static const std::map<std::string, LinkKind> kinds = {
      {"X", LinkKind::kSelf},  {"PIX", LinkKind::kPix},   {"PXB", LinkKind::kPxb},
      {"PHB", LinkKind::kPhb}, {"NODE", LinkKind::kNode}, {"SYS", LinkKind::kSys},
      {"SOC", LinkKind::kSys},  // drivers before 384 called SYS "SOC"
  };
  auto it = kinds.find(cell);
  if (it != kinds.end()) {
    *out = PairLink{it->second, 0};
    return true;
  }
  if (cell.size() > 2 && cell.compare(0, 2, "NV") == 0) {
    for (size_t i = 2; i < cell.size(); ++i) {
      if (!std::isdigit(static_cast<unsigned char>(cell[i]))) return false;
    }
    const int n = std::atoi(cell.c_str() + 2);
    if (n < 1) return false;
    *out = PairLink{LinkKind::kNvLink, n};
    return true;
  }
  return false;
}

// Sockets from the matrix alone: PCIe relations join GPUs into one socket, SYS separates them;
// GPUs seen only through NVLink join the first socket they do not have a SYS pair with.
std::vector<int> infer_sockets(const NodeTopology& t) {
  const int n = t.gpus;
  UnionFind same(n);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (same_socket_kind(t.pairs[i][j].kind)) same.join(i, j);
    }
  }
  std::vector<int> socket(n, -1);
  std::vector<std::vector<int>> groups;  // GPUs per socket
  for (int i = 0; i < n; ++i) {
    if (socket[i] >= 0) continue;
    std::vector<int> component;
    for (int j = 0; j < n; ++j) {
      if (same.find(j) == same.find(i)) component.push_back(j);
    }
    int chosen = -1;
    for (size_t g = 0; g < groups.size() && chosen < 0; ++g) {
      bool separated = false;
      for (int a : groups[g]) {
        for (int b : component) separated |= t.pairs[a][b].kind == LinkKind::kSys;
      }
      if (!separated) chosen = static_cast<int>(g);
    }
    if (chosen < 0) {
      chosen = static_cast<int>(groups.size());
      groups.emplace_back();
    }
    for (int j : component) {
      socket[j] = chosen;
      groups[chosen].push_back(j);
    }
  }
  return socket;
}

// Switches from the matrix alone: PIX pairs share a leaf switch; PXB pairs sit under leaf switches
// of their own that share a parent. Ids in order of the first GPU that shows them.
std::vector<std::vector<int>> infer_switches(const NodeTopology& t) {
  const int n = t.gpus;
  UnionFind leaf(n), tree(n);
  std::vector<bool> has_pxb(n, false);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      const LinkKind k = t.pairs[i][j].kind;
      if (k == LinkKind::kPix) leaf.join(i, j);
      if (k == LinkKind::kPix || k == LinkKind::kPxb) tree.join(i, j);
      if (k == LinkKind::kPxb) has_pxb[i] = true;
    }
  }
  auto leaf_size = [&](int i) {
    int size = 0;
    for (int j = 0; j < n; ++j) size += leaf.find(j) == leaf.find(i);
    return size;
  };
  auto leaves_in_tree = [&](int i) {
    std::vector<int> roots;
    for (int j = 0; j < n; ++j) {
      if (tree.find(j) == tree.find(i)) roots.push_back(leaf.find(j));
    }
    std::sort(roots.begin(), roots.end());
    return std::unique(roots.begin(), roots.end()) - roots.begin();
  };
  std::map<int, int> leaf_id, parent_id;
  int next = 0;
  std::vector<std::vector<int>> switches(n);
  for (int i = 0; i < n; ++i) {
    if (leaf_size(i) < 2 && !has_pxb[i]) continue;
    auto l = leaf_id.find(leaf.find(i));
    if (l == leaf_id.end()) l = leaf_id.emplace(leaf.find(i), next++).first;
    switches[i].push_back(l->second);
    if (leaves_in_tree(i) > 1) {
      auto p = parent_id.find(tree.find(i));
      if (p == parent_id.end()) p = parent_id.emplace(tree.find(i), next++).first;
      switches[i].push_back(p->second);
    }
  }
  return switches;
}

std::string link_kind_name(const PairLink& link) {
  switch (link.kind) {
    case LinkKind::kSelf:
      return "X";
    case LinkKind::kNvLink:
      return "NV" + std::to_string(link.nvlinks);
    case LinkKind::kPix:
      return "PIX";
    case LinkKind::kPxb:
      return "PXB";
    case LinkKind::kPhb:
      return "PHB";
    case LinkKind::kNode:
      return "NODE";
    case LinkKind::kSys:
      return "SYS";
  }
  return "?";
}

void validate_topology(const NodeTopology& t) {
  DPE_CHECK(t.gpus >= 1, "topology: " << t.gpus << " GPUs, expected at least 1");
  DPE_CHECK(static_cast<int>(t.pairs.size()) == t.gpus,
            "topology: " << t.pairs.size() << " rows for " << t.gpus << " GPUs");
  for (int i = 0; i < t.gpus; ++i) {
    DPE_CHECK(static_cast<int>(t.pairs[i].size()) == t.gpus,
              "topology: row GPU" << i << " has " << t.pairs[i].size() << " entries for " << t.gpus
                                  << " GPUs");
  }
  for (int i = 0; i < t.gpus; ++i) {
    for (int j = 0; j < t.gpus; ++j) {
      const PairLink& l = t.pairs[i][j];
      DPE_CHECK(
          (i == j) == (l.kind == LinkKind::kSelf),
          "topology: GPU" << i << "-GPU" << j << " is " << link_kind_name(l)
                          << (i == j ? ", expected X on the diagonal" : ", X off the diagonal"));
      DPE_CHECK(l.kind != LinkKind::kNvLink || l.nvlinks >= 1,
                "topology: GPU" << i << "-GPU" << j << " has NV" << l.nvlinks);
      DPE_CHECK(l == t.pairs[j][i],
                "topology: GPU" << i << "-GPU" << j << " is " << link_kind_name(l) << " but GPU"
                                << j << "-GPU" << i << " is " << link_kind_name(t.pairs[j][i]));
    }
  }
  DPE_CHECK(t.socket.empty() || static_cast<int>(t.socket.size()) == t.gpus,
            "topology: " << t.socket.size() << " sockets for " << t.gpus << " GPUs");
  for (int s : t.socket) DPE_CHECK(s >= 0, "topology: negative socket " << s);
  if (!t.socket.empty()) {
    for (int i = 0; i < t.gpus; ++i) {
      for (int j = 0; j < t.gpus; ++j) {
        const LinkKind k = t.pairs[i][j].kind;
        DPE_CHECK(!(k == LinkKind::kSys && t.socket[i] == t.socket[j]),
                  "topology: GPU" << i << "-GPU" << j << " is SYS but both are on socket "
                                  << t.socket[i]);
        DPE_CHECK(!(same_socket_kind(k) && t.socket[i] != t.socket[j]),
                  "topology: GPU" << i << "-GPU" << j << " is " << link_kind_name(t.pairs[i][j])
                                  << " but they are on sockets " << t.socket[i] << " and "
                                  << t.socket[j]);
      }
    }
  }
  DPE_CHECK(t.switches.empty() || static_cast<int>(t.switches.size()) == t.gpus,
            "topology: switch lists for " << t.switches.size() << " of " << t.gpus << " GPUs");
  for (const auto& chain : t.switches) {
    for (int s : chain) DPE_CHECK(s >= 0, "topology: negative switch id " << s);
  }
}

NodeTopology parse_topology(const std::string& text) {
  std::vector<std::string> lines;
  {
    std::istringstream in(without_escapes(text));
    std::string line;
    while (std::getline(in, line)) lines.push_back(line);
  }
  // "line 3 'GPU1 NV2 Y'": the line number (1-based) and its words, single-spaced.
  auto quoted = [&](size_t i) {
    std::string words;
    for (const std::string& w : words_of(lines[i])) words += (words.empty() ? "" : " ") + w;
    return "line " + std::to_string(i + 1) + " '" + words + "'";
  };

  size_t header = lines.size();
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::vector<std::string> w = words_of(lines[i]);
    if (!w.empty() && w[0] == "GPU0" && (w.size() == 1 || w[1] != "X")) {
      header = i;
      break;
    }
  }
  DPE_CHECK(header < lines.size(),
            "parse_topology: no header line starting with GPU0 (expected the output of "
            "`nvidia-smi topo -m`)");
  const std::vector<std::string> head = words_of(lines[header]);
  int n = 0;
  while (n < static_cast<int>(head.size()) && gpu_index(head[n]) == n) ++n;
  // The header text after the last GPU column, for the "NUMA Affinity" cell.
  size_t pos = 0;
  for (int k = 0; k < n; ++k) pos = lines[header].find(head[k], pos) + head[k].size();
  const int numa_col = numa_column(lines[header].substr(pos));

  NodeTopology t;
  t.gpus = n;
  t.pairs.assign(n, std::vector<PairLink>(n));
  std::vector<size_t> row_line(n, 0);
  std::vector<int> numa(n, -1);
  int rows = 0;
  for (size_t i = header + 1; i < lines.size(); ++i) {
    const std::string line = trimmed(lines[i]);
    if (line.rfind("Legend", 0) == 0 || line.rfind("NIC Legend", 0) == 0) break;
    const std::vector<std::string> w = words_of(line);
    if (w.empty()) continue;
    const int r = gpu_index(w[0]);
    if (r < 0) continue;  // a NIC or CPU row
    DPE_CHECK(r == rows, "parse_topology: " << quoted(i) << ": expected the row of GPU" << rows
                                            << ", found GPU" << r);
    DPE_CHECK(rows < n, "parse_topology: " << quoted(i) << ": a row for GPU" << r
                                           << " but the header (line " << header + 1 << ") has "
                                           << n << " GPU columns");
    DPE_CHECK(static_cast<int>(w.size()) >= n + 1,
              "parse_topology: " << quoted(i) << ": " << w.size() - 1 << " entries, expected " << n
                                 << " (one per GPU column)");
    for (int c = 0; c < n; ++c) {
      PairLink& cell = t.pairs[r][c];
      DPE_CHECK(parse_pair_link(w[1 + c], &cell),
                "parse_topology: " << quoted(i) << ": unknown link '" << w[1 + c]
                                   << "' in column GPU" << c
                                   << " (expected X, NV#, PIX, PXB, PHB, NODE or SYS)");
      DPE_CHECK((c == r) == (cell.kind == LinkKind::kSelf),
                "parse_topology: " << quoted(i) << ": column GPU" << c << " is " << w[1 + c]
                                   << (c == r ? ", expected X on the diagonal"
                                              : ", X belongs on the diagonal only"));
    }
    if (numa_col >= 0 && static_cast<int>(w.size()) > 1 + n + numa_col) {
      const std::string& v = w[1 + n + numa_col];
      if (!v.empty() && std::all_of(v.begin(), v.end(), [](char ch) {
            return std::isdigit(static_cast<unsigned char>(ch));
          })) {
        numa[r] = std::atoi(v.c_str());
      }
    }
    row_line[r] = i;
    ++rows;
  }
  DPE_CHECK(rows == n, "parse_topology: the header (line " << header + 1 << ") has " << n
                                                           << " GPU columns but " << rows
                                                           << " GPU rows follow");
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < r; ++c) {
      DPE_CHECK(t.pairs[r][c] == t.pairs[c][r],
                "parse_topology: " << quoted(row_line[r]) << ": GPU" << r << "-GPU" << c << " is "
                                   << link_kind_name(t.pairs[r][c]) << " but line "
                                   << row_line[c] + 1 << " has GPU" << c << "-GPU" << r << " "
                                   << link_kind_name(t.pairs[c][r]));
    }
  }
  const bool numa_known = std::all_of(numa.begin(), numa.end(), [](int v) { return v >= 0; });
  t.socket = numa_known && sockets_agree(t, numa) ? renumbered(numa) : infer_sockets(t);
  t.switches = infer_switches(t);
  validate_topology(t);
  return t;
}

std::string format_topology(const NodeTopology& t) {
  validate_topology(t);
  std::ostringstream out;
  for (int c = 0; c < t.gpus; ++c) out << "\tGPU" << c;
  if (!t.socket.empty()) out << "\tNUMA Affinity";
  out << "\n";
  for (int r = 0; r < t.gpus; ++r) {
    out << "GPU" << r;
    for (int c = 0; c < t.gpus; ++c) {
      const std::string cell = link_kind_name(t.pairs[r][c]);
      out << "\t" << (cell == "X" ? " X " : cell);
    }
    if (!t.socket.empty()) out << "\t" << t.socket[r];
    out << "\n";
  }
  out << kLegend;
  return out.str();
}

}  // namespace dpe::sim
