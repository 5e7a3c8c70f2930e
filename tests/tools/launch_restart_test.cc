// dpe-launch --max-restarts N (torchrun's): a failed worker stops the others and every worker
// starts again, with TORCHELASTIC_RESTART_COUNT counting the rounds; N restarts that do not help
// end with the last round's failure code. A DDP job of //tools:train --resume auto whose rank 1 is
// killed mid-training finishes (exit 0) with the very weights of an uninterrupted run.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "tests/tools/job_processes.h"

namespace dpe::test {
namespace {

std::string launcher() { return ::testing::internal::GetArgvs().at(1); }
std::string worker() { return ::testing::internal::GetArgvs().at(2); }
std::string train() { return ::testing::internal::GetArgvs().at(3); }

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// Runs the launcher with `args` to its end (at most 5 minutes); its exit code and output.
int run(const std::vector<std::string>& args, const std::string& name, std::string* output) {
  std::vector<std::string> all = {launcher()};
  all.insert(all.end(), args.begin(), args.end());
  const std::string path = test_tmpdir() + "/" + name + ".txt";
  const int code = wait_exit(start_job(all, path), std::chrono::minutes(5));
  *output = slurp(path);
  return code;
}

// Rank 1 fails in the first two rounds: two restarts finish the job, every round is told its
// number.
TEST(LaunchRestartTest, RestartsUntilTheJobSucceeds) {
  std::string out;
  const int code = run({"--standalone", "--nproc-per-node=2", "--max-restarts=2", worker(),
                        "restarts", "1", "3", "2"},
                       "succeeds", &out);
  EXPECT_EQ(code, 0) << out;
  // Rank 1 prints before it fails; rank 0 may be stopped before it prints, except in the last
  // round, which both finish.
  for (int round = 0; round < 3; ++round) {
    EXPECT_TRUE(has(out, "[rank1]: round " + std::to_string(round) + "\n")) << out;
  }
  EXPECT_TRUE(has(out, "[rank0]: round 2\n")) << out;
  EXPECT_TRUE(has(out, "dpe-launch: restart 1 of 2: starting the 2 worker(s) again")) << out;
  EXPECT_TRUE(has(out, "dpe-launch: restart 2 of 2:")) << out;
  EXPECT_FALSE(has(out, "survived")) << out;
}

// Restarts that do not help: after N, the last round's failure is final, with its code.
TEST(LaunchRestartTest, AfterTheLastRestartTheFailureIsFinal) {
  std::string out;
  const int code = run({"--standalone", "--nproc-per-node=2", "--max_restarts=1", worker(),
                        "restarts", "1", "3", "100"},
                       "final", &out);
  EXPECT_EQ(code, 3) << out;
  EXPECT_EQ(count(out, "[rank1]: round "), 2u) << out;
  EXPECT_TRUE(has(out, "dpe-launch: restart 1 of 1")) << out;
  EXPECT_FALSE(has(out, "restart 2")) << out;
  EXPECT_TRUE(has(out, "dpe-launch: worker rank 1 (pid ")) << out;
}

// Without the flag a failure is final at once (the default, as torchrun's), and the workers are
// told round 0 of 0.
TEST(LaunchRestartTest, NoRestartsByDefault) {
  std::string out;
  EXPECT_EQ(run({"--standalone", "--nproc-per-node=2", worker(), "restarts", "1", "3", "1"},
                "default", &out),
            3)
      << out;
  EXPECT_EQ(count(out, "[rank1]: round "), 1u) << out;
  EXPECT_EQ(
      run({"--standalone", "--nproc-per-node=1", "--max-restarts=4", worker(), "env"}, "env", &out),
      0)
      << out;
  EXPECT_TRUE(has(out, "[rank0]: TORCHELASTIC_RESTART_COUNT=0\n")) << out;
  EXPECT_TRUE(has(out, "[rank0]: TORCHELASTIC_MAX_RESTARTS=4\n")) << out;
}

// Several nodes cannot restart together under the static rendezvous: refused as a usage error.
TEST(LaunchRestartTest, RestartsNeedOneNode) {
  std::string out;
  EXPECT_EQ(
      run({"--nnodes=2", "--node-rank=0", "--max-restarts=1", worker(), "env"}, "nodes", &out), 2)
      << out;
  EXPECT_TRUE(has(out, "--max-restarts needs one node")) << out;
}

// --resume auto needs --checkpoint-dir, as --resume does.
TEST(LaunchRestartTest, ResumeAutoNeedsACheckpointDir) {
  const std::string path = test_tmpdir() + "/resume_auto.txt";
  EXPECT_EQ(wait_exit(start_job({train(), "--model", "toy", "--resume", "auto"}, path),
                      std::chrono::seconds(60)),
            2)
      << slurp(path);
  EXPECT_TRUE(has(slurp(path), "--resume needs --checkpoint-dir")) << slurp(path);
}

// train's flags for the restart test: 2 ranks, a checkpoint every epoch, --resume auto.
std::vector<std::string> train_job(const std::string& dir, int max_restarts) {
  return {"--standalone",
          "--nproc-per-node=2",
          "--max-restarts=" + std::to_string(max_restarts),
          train(),
          "--mode",
          "ddp",
          "--model",
          "toy",
          "--epochs",
          "4",
          "--batch-size",
          "8",
          "--train-samples",
          "4096",
          "--no-progress",
          "--checkpoint-dir",
          dir,
          "--resume",
          "auto"};
}

// Rank 1 is killed (SIGKILL) once the first checkpoint is written, mid-training: the launcher
// restarts both ranks, they resume from the checkpoint and finish; the weights are those of the
// run nobody interrupted, bit for bit.
TEST(LaunchRestartTest, AKilledRankResumesAndFinishesWithTheSameWeights) {
  const std::string tmp = test_tmpdir();
  std::string whole;
  auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(run(train_job(tmp + "/whole", 0), "whole", &whole), 0) << whole;
  EXPECT_TRUE(has(whole, "[rank0]: no checkpoint in " + tmp +
                             "/whole yet: starting from scratch (--resume auto)"))
      << whole;
  const double whole_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const std::string dir = tmp + "/interrupted";
  const std::string path = tmp + "/interrupted.txt";
  std::vector<std::string> args = {launcher()};
  const std::vector<std::string> job_args = train_job(dir, 1);
  args.insert(args.end(), job_args.begin(), job_args.end());
  start = std::chrono::steady_clock::now();
  const pid_t job = start_job(args, path);
  ASSERT_TRUE(wait_until(
      [&] {
        struct stat st {};
        return ::stat((dir + "/checkpoint.json").c_str(), &st) == 0;
      },
      std::chrono::seconds(120)))
      << slurp(path);
  const auto workers = workers_by(job, "RANK");
  ASSERT_EQ(workers.count(1), 1u) << slurp(path);
  ASSERT_EQ(env_of(workers.at(1), "TORCHELASTIC_RESTART_COUNT"), "0");
  ASSERT_EQ(::kill(workers.at(1), SIGKILL), 0);
  const int code = wait_exit(job, std::chrono::minutes(5));
  const double interrupted_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string out = slurp(path);
  std::cout << "uninterrupted: " << whole_s
            << " s; with rank 1 killed and restarted: " << interrupted_s << " s\n"
            << out << std::endl;
  EXPECT_EQ(code, 0) << out;
  EXPECT_TRUE(has(out, "dpe-launch: worker rank 1 (pid " + std::to_string(workers.at(1)) +
                           ") was killed by signal 9"))
      << out;
  EXPECT_TRUE(has(out, "dpe-launch: restart 1 of 1")) << out;
  EXPECT_TRUE(has(out, "[rank0]: resumed from " + dir + "/checkpoint.json after epoch ")) << out;
  // Round 0's lines reached the launcher before it stopped the worker.
  EXPECT_TRUE(has(out, "[rank0]: epoch 0: ")) << out;
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    const std::string a = slurp(tmp + "/whole/" + file), b = slurp(dir + "/" + file);
    EXPECT_FALSE(a.empty()) << file;
    EXPECT_TRUE(a == b) << file << " differs from the uninterrupted run's";
  }
  EXPECT_EQ(count(slurp(dir + "/metrics.jsonl"), "\n"), 4u) << "one line per epoch";
}

}  // namespace
}  // namespace dpe::test
