// spawn: every rank runs in its own process; the first failure (exception or exit code) comes
// back as an error naming the rank, and the other ranks are stopped; a caller that runs other
// threads is refused before anything is forked.
#include "engine/distributed/spawn.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "engine/core/error.h"

namespace dpe {
namespace distributed {
namespace {

std::string temp_dir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir =
      std::string(base ? base : "/tmp") + "/" + name + "_" + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

void touch(const std::string& path) { std::ofstream(path) << "x"; }

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SpawnTest, RunsEveryRankInItsOwnProcess) {
  const std::string dir = temp_dir("spawn_ok");
  const pid_t parent = ::getpid();
  spawn(
      [&](int rank) {
        DPE_CHECK(::getpid() != parent, "rank " << rank << " runs in the parent");
        touch(dir + "/rank" + std::to_string(rank));
      },
      3);
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(exists(dir + "/rank" + std::to_string(r))) << r;
}

TEST(SpawnTest, AnExceptionNamesTheRankAndStopsTheOthers) {
  const std::string dir = temp_dir("spawn_throw");
  const std::string error = error_of([&] {
    spawn(
        [&](int rank) {
          if (rank == 1) throw std::runtime_error("boom in rank one");
          // The others would run far longer than the test; spawn must stop them.
          std::this_thread::sleep_for(std::chrono::seconds(60));
          touch(dir + "/survived" + std::to_string(rank));
        },
        3, SpawnOptions{std::chrono::milliseconds(500)});
  });
  EXPECT_NE(error.find("rank 1"), std::string::npos) << error;
  EXPECT_NE(error.find("boom in rank one"), std::string::npos) << error;
  EXPECT_NE(error.find("exited with code 1"), std::string::npos) << error;
  EXPECT_FALSE(exists(dir + "/survived0"));
  EXPECT_FALSE(exists(dir + "/survived2"));
}

TEST(SpawnTest, AnExitCodeIsReported) {
  const std::string error = error_of([&] {
    spawn(
        [&](int rank) {
          if (rank == 2) ::_exit(3);
        },
        3);
  });
  EXPECT_NE(error.find("rank 2"), std::string::npos) << error;
  EXPECT_NE(error.find("exited with code 3"), std::string::npos) << error;
}

TEST(SpawnTest, ASignalIsReported) {
  const std::string error = error_of([&] { spawn([&](int) { std::abort(); }, 1); });
  EXPECT_NE(error.find("rank 0"), std::string::npos) << error;
  EXPECT_NE(error.find("killed by signal 6"), std::string::npos) << error;
}

TEST(SpawnTest, RefusesACallerThatRunsOtherThreads) {
  const std::string dir = temp_dir("spawn_threads");
  std::atomic<bool> stop{false};
  std::thread other([&] {
    while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  const std::string error =
      error_of([&] { spawn([&](int) { std::ofstream(dir + "/ran") << "x"; }, 1); });
  stop = true;
  other.join();
  EXPECT_NE(error.find("spawn: the calling process runs 2 threads"), std::string::npos) << error;
  EXPECT_FALSE(exists(dir + "/ran"));                          // nothing was forked
  spawn([&](int) { std::ofstream(dir + "/ran") << "x"; }, 1);  // single-threaded again: runs
  EXPECT_TRUE(exists(dir + "/ran"));
}

}  // namespace
}  // namespace distributed
}  // namespace dpe
