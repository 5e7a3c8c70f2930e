// A stalled rank ends the job instead of hanging it (design note "collective watchdog",
// engine/distributed/watchdog.h): a DDP job of //tools:train under //tools:launch (Gloo) or
// mpirun (MPI) with --timeout 5, one rank SIGSTOPped mid-training. Every process ends well within
// the timeout plus a margin, the output names the stopped rank, the exit code is 1, no worker
// outlives the job, and no one listens on the store's port afterwards.
//
// Each job checkpoints every epoch into its own directory: the first checkpoint says training
// runs. The figures printed (time from SIGSTOP to the job's end) are for the report, not asserted
// beyond a generous bound: the machine is shared and noisy.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "tests/tools/job_processes.h"
#include "tests/util/free_port.h"

namespace dpe::test {
namespace {

std::string launcher() { return ::testing::internal::GetArgvs().at(1); }
std::string train() { return ::testing::internal::GetArgvs().at(2); }
std::string worker() { return ::testing::internal::GetArgvs().at(3); }

constexpr int kTimeoutS = 5;
// Bound on SIGSTOP-to-end: the timeout, the store's reply timeout (10 s: when rank 0, which
// serves the store, is the one stopped, the others learn it through that), and room for a busy
// machine. Without the watchdog the job waits 30 minutes.
constexpr std::chrono::seconds kEndWithin{kTimeoutS + 40};

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// train's flags: a toy model that trains until stopped, a checkpoint every epoch.
std::vector<std::string> train_args(const std::string& checkpoint_dir) {
  return {train(),
          "--mode",
          "ddp",
          "--model",
          "toy",
          "--epochs",
          "100000",
          "--no-progress",
          "--timeout",
          std::to_string(kTimeoutS),
          "--checkpoint-dir",
          checkpoint_dir};
}

struct Outcome {
  int code = 0;
  double seconds = 0;  // from SIGSTOP to the job's end
  std::string output;
  std::map<int, int> workers;  // rank -> pid
};

// Starts `argv`, waits for its first checkpoint, SIGSTOPs rank `stop` (found by `rank_variable`
// among the job's processes) and waits for the job to end.
Outcome stop_a_rank(const std::vector<std::string>& argv, const std::string& name,
                    const std::string& rank_variable, int ranks, int stop,
                    const std::map<std::string, std::string>& env = {}) {
  const std::string dir = test_tmpdir() + "/" + name;
  const std::string out_path = dir + ".txt";
  std::vector<std::string> all = argv;
  const std::vector<std::string> targs = train_args(dir);
  all.insert(all.end(), targs.begin(), targs.end());
  Outcome o;
  const pid_t job = start_job(all, out_path, env);
  const bool training = wait_until(
      [&] {
        struct stat st {};
        return ::stat((dir + "/checkpoint.json").c_str(), &st) == 0;
      },
      std::chrono::seconds(120));
  o.workers = workers_by(job, rank_variable);
  if (!training || static_cast<int>(o.workers.size()) != ranks) {
    wait_exit(job, std::chrono::seconds(0));
    ADD_FAILURE() << "the job did not start training with " << ranks << " workers:\n"
                  << slurp(out_path);
    return o;
  }
  const auto stopped_at = std::chrono::steady_clock::now();
  ::kill(o.workers.at(stop), SIGSTOP);
  o.code = wait_exit(job, kEndWithin);
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped_at).count();
  o.output = slurp(out_path);
  std::cout << name << ": rank " << stop << " of " << ranks << " stopped; the job ended after "
            << o.seconds << " s (--timeout " << kTimeoutS << ") with code " << o.code << "\n"
            << o.output << std::endl;
  ::testing::Test::RecordProperty("seconds_from_sigstop_to_end", std::to_string(o.seconds));
  // Every worker has ended; a stopped one would be left over if nobody had killed it.
  const bool gone = wait_until(
      [&] {
        for (const auto& [rank, pid] : o.workers)
          if (alive(pid)) return false;
        return true;
      },
      std::chrono::seconds(10));
  for (const auto& [rank, pid] : o.workers) {
    EXPECT_TRUE(gone && !alive(pid)) << "rank " << rank << " (pid " << pid << ") outlived the job";
    if (alive(pid)) ::kill(pid, SIGKILL);
  }
  return o;
}

std::vector<std::string> launch(int nproc, int port) {
  return {launcher(), "--nproc-per-node=" + std::to_string(nproc),
          "--master-port=" + std::to_string(port), "--rdzv-timeout=120", "--grace=5"};
}

// --timeout takes a positive number of seconds.
TEST(StalledRankTest, ATimeoutThatIsNotPositiveIsAUsageError) {
  for (const char* bad : {"0", "-1", "nan", "inf", "soon"}) {
    const std::string path = test_tmpdir() + "/bad_timeout.txt";
    const int code =
        wait_exit(start_job({train(), "--mode", "ddp", "--model", "toy", "--timeout", bad}, path),
                  std::chrono::seconds(60));
    EXPECT_EQ(code, 2) << bad << ": " << slurp(path);
  }
}

// The launcher alone: when a worker fails, a stopped one is continued so that SIGTERM ends it,
// rather than left until SIGKILL after the grace (here 600 s: the test would time out).
TEST(StalledRankTest, TheLauncherContinuesAStoppedWorkerSoThatSigtermEndsIt) {
  const std::string path = test_tmpdir() + "/stopped_worker.txt";
  const pid_t job =
      start_job({launcher(), "--nproc-per-node=2", "--grace=600", worker(), "wait"}, path);
  std::map<int, int> workers;
  ASSERT_TRUE(wait_until(
      [&] {
        workers = workers_by(job, "RANK");
        return workers.size() == 2 && has(slurp(path), "[rank0]: ready") &&
               has(slurp(path), "[rank1]: ready");
      },
      std::chrono::seconds(60)))
      << slurp(path);
  ::kill(workers.at(0), SIGSTOP);
  ::kill(workers.at(1), SIGKILL);
  const int code = wait_exit(job, std::chrono::seconds(60));
  const std::string out = slurp(path);
  EXPECT_EQ(code, 128 + SIGKILL) << out;
  EXPECT_TRUE(has(out, "dpe-launch: worker rank 0 (pid " + std::to_string(workers.at(0)) +
                           ") is stopped (SIGSTOP or a debugger); sending SIGCONT"))
      << out;
  EXPECT_FALSE(has(out, "did not stop after SIGTERM")) << out;
  EXPECT_TRUE(wait_until([&] { return !alive(workers.at(0)); }, std::chrono::seconds(10)));
}

// Rank 1 of 3 stops: the ranks waiting for it name it, the launcher names it stopped, continues
// it so that SIGTERM ends it.
TEST(StalledRankTest, GlooUnderTheLauncherNamesTheStoppedRank) {
  const int port = free_port();
  const Outcome o = stop_a_rank(launch(3, port), "gloo_rank1", "RANK", 3, 1);
  EXPECT_EQ(o.code, 1) << o.output;
  EXPECT_TRUE(has(o.output, "timed out after 5 s (the group's timeout): rank 1 stopped answering"))
      << o.output;
  EXPECT_TRUE(has(o.output, "dpe-launch: worker rank 1 (pid " + std::to_string(o.workers.at(1)) +
                                ") is stopped (SIGSTOP or a debugger)"))
      << o.output;
  EXPECT_FALSE(port_listened(port)) << "the store's port " << port << " is still listened on";
}

// Rank 0 stops: it serves the store, so the others learn it from the store's silence.
TEST(StalledRankTest, GlooNamesAStoppedRankZeroByItsSilentStore) {
  const int port = free_port();
  const Outcome o = stop_a_rank(launch(2, port), "gloo_rank0", "RANK", 2, 0);
  EXPECT_EQ(o.code, 1) << o.output;
  EXPECT_TRUE(has(o.output, "rank 0 stopped answering: the store at 127.0.0.1:" +
                                std::to_string(port) + ", which it serves, does not reply"))
      << o.output;
  EXPECT_TRUE(has(o.output, "dpe-launch: worker rank 0 (pid " + std::to_string(o.workers.at(0)) +
                                ") is stopped"))
      << o.output;
  EXPECT_FALSE(port_listened(port)) << "the store's port " << port << " is still listened on";
}

// MPI has no timeout: the watchdog ends the job with MPI_Abort, naming the stopped rank, and
// mpirun takes the stopped rank down with the others.
TEST(StalledRankTest, MpiUnderMpirunNamesTheStoppedRank) {
  if (::system("command -v mpirun > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "mpirun is not installed (Debian: openmpi-bin)";
  }
  std::map<std::string, std::string> env = {{"OMPI_ALLOW_RUN_AS_ROOT", "1"},
                                            {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"},
                                            {"OMPI_MCA_btl", "self,vader"}};
#if defined(__SANITIZE_ADDRESS__)
  env["ASAN_OPTIONS"] = "detect_leaks=0";  // as run_tool.h's mpirun_env(): Open MPI's threads
#endif
  const Outcome o = stop_a_rank({"mpirun", "--oversubscribe", "--bind-to", "none", "-np", "3"},
                                "mpi_rank1", "OMPI_COMM_WORLD_RANK", 3, 1, env);
  EXPECT_EQ(o.code, 1) << o.output;
  EXPECT_TRUE(has(o.output, "(timeout 5.0 s): rank 1 stopped answering")) << o.output;
  EXPECT_TRUE(has(o.output, "the watchdog ends this process")) << o.output;
}

}  // namespace
}  // namespace dpe::test
