// //tools:train's command line: bad input gets a clear message and exit code 2.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace {

std::string g_train;

// Runs the train binary with `args`; returns the exit code and fills `output` (stdout+stderr).
int run(const std::string& args, std::string* output) {
  const std::string cmd = g_train + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 512> buf{};
  output->clear();
  while (fgets(buf.data(), buf.size(), p) != nullptr) *output += buf.data();
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(TrainCliTest, UnknownFlag) {
  std::string out;
  EXPECT_EQ(run("--bogus 3", &out), 2);
  EXPECT_NE(out.find("--bogus"), std::string::npos) << out;
}

TEST(TrainCliTest, BadValues) {
  std::string out;
  EXPECT_EQ(run("--mode sideways", &out), 2);
  EXPECT_NE(out.find("sideways"), std::string::npos) << out;
  EXPECT_EQ(run("--epochs 0", &out), 2);
  EXPECT_NE(out.find("--epochs"), std::string::npos) << out;
  EXPECT_EQ(run("--batch-size many", &out), 2);
  EXPECT_NE(out.find("many"), std::string::npos) << out;
}

TEST(TrainCliTest, MissingDataDir) {
  std::string out;
  EXPECT_EQ(run("--data-dir /nonexistent/fmnist", &out), 2);
  EXPECT_NE(out.find("/nonexistent/fmnist"), std::string::npos) << out;
  EXPECT_NE(out.find("does not exist"), std::string::npos) << out;
}

TEST(TrainCliTest, HelpSaysWhichBatchSizeIsGlobal) {
  std::string out;
  EXPECT_EQ(run("--help", &out), 0);
  EXPECT_NE(out.find("GLOBAL for single and dp"), std::string::npos) << out;
  EXPECT_NE(out.find("PER PROCESS for"), std::string::npos) << out;
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: train_cli_test <path to tools/train>\n");
    return 2;
  }
  g_train = argv[1];
  return RUN_ALL_TESTS();
}
