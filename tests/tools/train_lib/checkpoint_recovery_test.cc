// Recovery at start (tools/train_lib/checkpoint_recovery.h): a write killed before or after its
// commit leaves one whole set, which resumes to the result of an uninterrupted run; the staged
// and temporary files killed writes leave are removed, and only those (names of our own patterns).
#include "tools/train_lib/checkpoint_recovery.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tests/tools/train_lib/train_test_util.h"
#include "tools/train_lib/checkpoint_files.h"
#include "tools/train_lib/trainer.h"

namespace dpe::tools {
namespace {

using train_test::tmpdir;
using train_test::small;
using train_test::expect_same_state;
using train_test::read_file;
using train_test::write_file;
using train_test::exists;
using train_test::metric_epochs;

TEST(CheckpointRecoveryTest, LeftByAWriteNamesOnlyWhatKilledWritesLeave) {
  for (const char* name :
       {"checkpoint.safetensors.tmp.Ab3xYz", "checkpoint.json.tmp.q1W2e3",
        "model.safetensors.next.3", "optimizer.safetensors.next.12.tmp.Ab3xYz",
        "training_state.json.next.999999999999999999"}) {
    EXPECT_TRUE(left_by_a_write(name)) << name;
  }
  for (const char* name :
       {"checkpoint.json", "model.safetensors", "metrics.jsonl", "metrics.jsonl.tmp",
        "checkpoint.json.tmp.Ab3xY", "checkpoint.json.tmp.Ab3xYz1", "model.safetensors.next.",
        "model.safetensors.next.-1", "training_state.json.next.1234567890123456789",
        "optimizer.safetensors.next.3.tmp.Ab-xYz", "notes.next.3"}) {
    EXPECT_FALSE(left_by_a_write(name)) << name;
  }
}

// What recover_checkpoint_dir says on `out` for `dir`, and the generation it returns.
std::pair<int64_t, std::string> recovered(const std::string& dir) {
  char* text = nullptr;
  size_t size = 0;
  FILE* out = ::open_memstream(&text, &size);
  const int64_t generation = recover_checkpoint_dir(dir, out);
  std::fclose(out);
  const std::string said(text, size);
  std::free(text);
  return {generation, said};
}

// The next generation is the manifest's plus one, 1 without a readable manifest (or without the
// directory). A staged file the manifest names is moved into place; one it does not name is a
// killed write's, and removed.
TEST(CheckpointRecoveryTest, FinishesTheManifestsCommitAndRemovesTheRest) {
  EXPECT_EQ(recovered(tmpdir("no_such_dir")), std::make_pair(int64_t{1}, std::string()));
  const std::string dir = tmpdir("recovered");
  ::mkdir(dir.c_str(), 0755);
  const std::string staged = dir + "/model.safetensors.next.2";
  write_file(checkpoint_manifest_path(dir), "{\"generation\": \"two\"}");
  write_file(staged, "staged");
  EXPECT_EQ(recovered(dir), std::make_pair(int64_t{1}, "removed " + staged +
                                                          ", left by an interrupted checkpoint "
                                                          "write\n"));
  EXPECT_FALSE(exists(staged));
  write_file(checkpoint_manifest_path(dir), "{\"generation\": 2}");
  write_file(staged, "staged");
  EXPECT_EQ(recovered(dir),
            std::make_pair(int64_t{3}, "moved " + staged + " to " + dir +
                                           "/model.safetensors, finishing checkpoint generation "
                                           "2 (interrupted)\n"));
  EXPECT_FALSE(exists(staged));
  EXPECT_EQ(read_file(dir + "/model.safetensors"), "staged");
}

// A write killed at any point leaves one whole set. Before the manifest's rename (the commit) the
// previous set stays and the staged files go; after it, the next start moves the staged files
// into place. Both resume to the result of an uninterrupted run.
TEST(CheckpointRecoveryTest, AKilledWriteLeavesOneWholeSet) {
  TrainConfig c = small("toy", "single");
  c.epochs = 3;
  const TrainResult straight = train(c, stdout);
  const std::string dir = tmpdir("killed_write");
  c.checkpoint_dir = dir;
  const std::vector<std::string> names{"model.safetensors", "optimizer.safetensors",
                                       "training_state.json"};
  // The set of epoch 0 (generation 1) and that of epoch 1 (generation 2).
  std::vector<std::string> gen1, gen2;
  c.epochs = 1;
  train(c, stdout);
  for (const auto& n : names) gen1.push_back(read_file(dir + "/" + n));
  const std::string manifest1 = read_file(checkpoint_manifest_path(dir));
  c.epochs = 2;
  c.resume = true;
  train(c, stdout);
  for (const auto& n : names) gen2.push_back(read_file(dir + "/" + n));
  const std::string manifest2 = read_file(checkpoint_manifest_path(dir));
  const std::string metrics = read_file(metrics_path(dir));

  for (int committed = 0; committed < 2; ++committed) {
    for (size_t renamed = 0; renamed <= (committed ? names.size() : 0); ++renamed) {
      // Generation 1 in place; generation 2 staged (a torn model file when not committed), the
      // manifest of generation 2 when committed, `renamed` files of it already moved.
      write_file(checkpoint_manifest_path(dir), committed ? manifest2 : manifest1);
      for (size_t i = 0; i < names.size(); ++i) {
        ::unlink((dir + "/" + names[i] + ".next.2").c_str());
        const bool moved = committed && i < renamed;
        write_file(dir + "/" + names[i] + (moved ? "" : ".next.2"),
                   !committed && i == 0 ? gen2[i].substr(0, 100) : gen2[i]);
        if (!moved) write_file(dir + "/" + names[i], gen1[i]);
      }
      write_file(metrics_path(dir), metrics);
      c.epochs = 3;
      const TrainResult resumed = train(c, stdout);
      ASSERT_EQ(resumed.epochs.size(), committed ? 1u : 2u) << committed << " " << renamed;
      expect_same_state(resumed.final_state, straight.final_state);
      for (const auto& n : names) EXPECT_FALSE(exists(dir + "/" + n + ".next.2")) << n;
      EXPECT_EQ(metric_epochs(metrics_path(dir)), (std::vector<int>{0, 1, 2}));
    }
  }
}

// The staged and temporary files of killed checkpoint writes are removed at
// start (only names of our own patterns); metrics.jsonl never lacks the checkpoint's line, and on
// resume the lines after the checkpoint's epoch (a kill between the line and the manifest's
// rename) are dropped.
TEST(CheckpointRecoveryTest, LeftoversOfAKilledRunAreCleanedUp) {
  const std::string dir = tmpdir("leftovers");
  TrainConfig c = small("toy", "single");
  c.checkpoint_dir = dir;
  c.epochs = 2;
  train(c, stdout);
  EXPECT_EQ(metric_epochs(metrics_path(dir)), (std::vector<int>{0, 1}));
  // What a run killed in epoch 2 leaves: its metrics line, written before the manifest's
  // rename, a torn line, staged files of generation 3 and temporary files (also of the older
  // single-file layout).
  {
    std::ofstream log(metrics_path(dir), std::ios::app);
    log << "{\"epoch\":2,\"train_loss\":1.0}\n{\"epoch\":3,\"trai";
  }
  const std::vector<std::string> stale{"checkpoint.safetensors.tmp.Ab3xYz",
                                       "checkpoint.safetensors.tmp.000000",
                                       "checkpoint.json.tmp.q1W2e3",
                                       "model.safetensors.next.3",
                                       "optimizer.safetensors.next.3.tmp.Ab3xYz",
                                       "training_state.json.next.3"};
  const std::vector<std::string> foreign{"checkpoint.safetensors.tmp.toolong", "notes.tmp.Ab3xYz",
                                         "checkpoint.safetensors.tmp.Ab-xYz",
                                         "model.safetensors.next.x1",
                                         "model.safetensors.next.",
                                         "optimizer.safetensors.next.3.tmp.Ab",
                                         "training_state.json.old"};
  for (const auto& name : stale) std::ofstream(dir + "/" + name) << "partial";
  for (const auto& name : foreign) std::ofstream(dir + "/" + name) << "someone else's";
  c.resume = true;
  c.epochs = 4;
  train(c, stdout);
  for (const auto& name : stale) {
    EXPECT_NE(::access((dir + "/" + name).c_str(), F_OK), 0) << name << " was left";
  }
  for (const auto& name : foreign) {
    EXPECT_EQ(::access((dir + "/" + name).c_str(), F_OK), 0) << name << " was removed";
  }
  EXPECT_EQ(metric_epochs(metrics_path(dir)), (std::vector<int>{0, 1, 2, 3}));
  // The checkpoint's epoch has its line.
  EXPECT_EQ(nlohmann::json::parse(read_file(training_state_path(dir))).at("epoch"), 3);
}

}  // namespace
}  // namespace dpe::tools
