// //tools:train's command line: bad input gets a clear message and exit code 2.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
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

// The gpt models' tiny configuration: a slice of the corpus and a small tokenizer cached in the
// test's directory, windows of 16 tokens, so a run takes seconds and needs no network.
std::string tiny_gpt(const std::string& model) {
  const char* t = std::getenv("TEST_TMPDIR");
  return "--model " + model + " --context 16 --batch-size 2 --max-steps 1 --test-samples 2 " +
         "--train-samples 8 --corpus-documents 600 --vocab-size 400 --no-progress --cache-dir " +
         std::string(t ? t : "/tmp") + "/lm_cache";
}

TEST(TrainCliTest, AcceptsTheGptModels) {
  std::string out;
  EXPECT_EQ(run("--help", &out), 0);
  EXPECT_NE(out.find("gpt-small"), std::string::npos) << out;
  EXPECT_NE(out.find("--context"), std::string::npos) << out;
  // gpt-small, and the real-size gpt2 (12 layers, d 768) for one step.
  for (const char* model : {"gpt-small", "gpt2"}) {
    EXPECT_EQ(run(tiny_gpt(model), &out), 0) << out;
    EXPECT_NE(out.find("training " + std::string(model) + ", mode single"), std::string::npos)
        << out;
    EXPECT_NE(out.find("adamw lr"), std::string::npos) << out;
    EXPECT_NE(out.find("val perplexity"), std::string::npos) << out;
    EXPECT_NE(out.find("(unigram baseline"), std::string::npos) << out;
  }
}

TEST(TrainCliTest, BadGptFlagsAreNamed) {
  std::string out;
  EXPECT_EQ(run("--model gpt-small --context 200", &out), 2);
  EXPECT_NE(out.find("--context 200 must be between 1 and gpt-small's block size 128"),
            std::string::npos)
      << out;
  EXPECT_EQ(run("--model convnet --context 16", &out), 2);
  EXPECT_NE(out.find("--context applies to the gpt models only"), std::string::npos) << out;
  EXPECT_EQ(run(tiny_gpt("gpt-small") + " --momentum 0.5", &out), 2);
  EXPECT_NE(out.find("--momentum is SGD's"), std::string::npos) << out;
  EXPECT_EQ(run(tiny_gpt("gpt-small") + " --optimizer rmsprop", &out), 2);
  EXPECT_NE(out.find("rmsprop"), std::string::npos) << out;
  EXPECT_EQ(run("--model gpt3", &out), 2);
  EXPECT_NE(out.find("gpt3"), std::string::npos) << out;
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
