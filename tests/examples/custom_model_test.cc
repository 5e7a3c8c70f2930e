// examples/custom_model: exits 0 and its loss goes down, under DataParallel (run alone) and under
// DDP (two ranks started by the launcher, rendezvous on a free port).
#include <gtest/gtest.h>
#include <unistd.h>

#include <regex>
#include <string>
#include <vector>

#include "tests/tools/run_tool.h"
#include "tests/util/free_port.h"

namespace {

std::string example() { return ::testing::internal::GetArgvs().at(1); }
std::string launcher() { return ::testing::internal::GetArgvs().at(2); }

using dpe::test::free_port;

// The losses of the "epoch N loss X" lines, in order.
std::vector<double> losses(const std::string& out) {
  std::vector<double> found;
  const std::regex line("epoch ([0-9]+) loss ([0-9.]+)\n");
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it) {
    EXPECT_EQ(std::stoi((*it)[1]), static_cast<int>(found.size())) << out;
    found.push_back(std::stod((*it)[2]));
  }
  return found;
}

// Five epochs, each loss below the one before, the last under half the first.
void expect_learns(const std::string& out) {
  const std::vector<double> l = losses(out);
  ASSERT_EQ(l.size(), 5u) << out;
  for (size_t i = 1; i < l.size(); ++i) EXPECT_LT(l[i], l[i - 1]) << out;
  EXPECT_LT(l.back(), 0.5 * l.front()) << out;
}

TEST(CustomModelTest, LearnsUnderDataParallel) {
  std::string out;
  ASSERT_EQ(dpe::test::run_tool(example(), "", &out), 0) << out;
  expect_learns(out);
}

TEST(CustomModelTest, LearnsUnderDdpStartedByTheLauncher) {
  std::string out;
  const std::string args =
      "--nproc_per_node=2 --master_port=" + std::to_string(free_port()) + " " + example();
  ASSERT_EQ(dpe::test::run_tool(launcher(), args, &out), 0) << out;
  // Rank 0 alone prints, through the launcher's rank prefix.
  EXPECT_TRUE(dpe::test::has(out, "[rank0]: epoch 0 loss ")) << out;
  EXPECT_FALSE(dpe::test::has(out, "[rank1]: epoch")) << out;
  expect_learns(out);
}

}  // namespace
