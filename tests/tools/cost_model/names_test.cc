// names: one name however it is typed, and the known names listed.
#include "tools/cost_model/names.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dpe::sim {
namespace {

TEST(NamesTest, NormalizedNameKeepsLowercaseLettersAndDigits) {
  EXPECT_EQ(normalized_name("A100-SXM4-80GB"), "a100sxm480gb");
  EXPECT_EQ(normalized_name("a100 sxm4_80gb"), normalized_name("A100-SXM4-80GB"));
  EXPECT_EQ(normalized_name("NUMA Affinity"), "numaaffinity");
  EXPECT_EQ(normalized_name(" -_\t"), "");
}

TEST(NamesTest, JoinedNamesSeparatesWithCommas) {
  EXPECT_EQ(joined_names({"pytorch", "dpe"}), "pytorch, dpe");
  EXPECT_EQ(joined_names({"one"}), "one");
  EXPECT_EQ(joined_names({}), "");
}

}  // namespace
}  // namespace dpe::sim
