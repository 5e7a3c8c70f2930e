// libFuzzer target: sim --topology's reader (tools/cost_model/topology_file.h: the bounded read,
// then parse_topology) on arbitrary bytes. A dpe::Error is the expected answer to a bad file; a
// topology it accepts must survive format_topology and parse back equal (topology.h promises it),
// or the harness aborts: that is a finding too.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "engine/core/error.h"
#include "tests/fuzz/fuzz_util.h"
#include "tools/cost_model/topology.h"
#include "tools/cost_model/topology_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = dpe_fuzz::write_input(data, size);
  dpe::sim::NodeTopology t;
  try {
    t = dpe::sim::read_topology_file(path);
    dpe::sim::validate_topology(t);
  } catch (const dpe::Error&) {
    return 0;
  }
  if (!(dpe::sim::parse_topology(dpe::sim::format_topology(t)) == t)) std::abort();
  return 0;
}
