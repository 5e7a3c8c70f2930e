// topology_file: sim's --topology, a file of `nvidia-smi topo -m` output, read with a size cap and
// parsed (topology.h's parse_topology), every error naming the file.
//
// Threading contract: a free function without shared state; call it from any thread.
#pragma once

#include <cstdint>
#include <string>

#include "tools/cost_model/topology.h"

namespace dpe::sim {

// The most bytes of a topology file: nvidia-smi topo -m prints about 2 KB for 8 GPUs and NICs.
inline constexpr uint64_t kMaxTopologyFileBytes = uint64_t{4} << 20;

// Reads `path` (a file, or a pipe such as /dev/stdin), counting the bytes as they come: past
// `max_bytes` it stops. Throws tools::UsageError naming `path` and errno's text when it cannot be
// opened; tools::DataError naming it when it holds more than `max_bytes` (and the limit), cannot
// be read through, or is not nvidia-smi's matrix (parse_topology's message).
NodeTopology read_topology_file(const std::string& path,
                                uint64_t max_bytes = kMaxTopologyFileBytes);

}  // namespace dpe::sim
