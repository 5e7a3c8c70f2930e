// metrics.jsonl (tools/train_lib/metrics_log.h): an epoch's line holds its task's metrics; on
// resume the lines after the checkpoint's epoch and torn lines are dropped, and the log says how
// many; a log with nothing to drop is left as it is.
#include "tools/train_lib/metrics_log.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "tests/tools/train_lib/train_test_util.h"

namespace dpe::tools {
namespace {

using train_test::tmpdir;
using train_test::read_file;
using train_test::write_file;
using train_test::exists;

// What trim_metrics says on its `out` for `path` and `last_epoch`.
std::string trimmed(const std::string& path, int last_epoch) {
  char* text = nullptr;
  size_t size = 0;
  FILE* out = ::open_memstream(&text, &size);
  trim_metrics(path, last_epoch, out);
  std::fclose(out);
  const std::string said(text, size);
  std::free(text);
  return said;
}

TEST(MetricsLogTest, AnEpochsLineHoldsItsTasksMetrics) {
  const std::string path = tmpdir("metrics_lines.jsonl");
  TrainConfig c;
  c.mode = "dp";
  c.model = "mlp";
  c.batch_size = 64;
  c.optimizer = "sgd";
  EpochMetrics m;
  m.epoch = 3;
  m.train_loss = 0.5;
  m.test_loss = 0.25;
  m.test_accuracy = 0.875;
  m.samples_per_second = 100;
  m.steps = 8;
  m.global_step = 32;
  append_metrics(path, c, m, 2);
  c.model = "gpt-small";
  c.context = 16;
  m.test_accuracy = -1;
  m.perplexity = 1.5;
  m.unigram_perplexity = 300;
  m.tokens_per_second = 1600;
  m.global_step = -1;  // unknown: left out
  append_metrics(path, c, m, 2);
  EXPECT_EQ(read_file(path),
            "{\"batch_size\":64,\"epoch\":3,\"global_step\":32,\"mode\":\"dp\",\"model\":\"mlp\","
            "\"optimizer\":\"sgd\",\"samples_per_second\":100.0,\"steps\":8,\"test_accuracy\":0.875,"
            "\"test_loss\":0.25,\"train_loss\":0.5,\"world_size\":2}\n"
            "{\"batch_size\":64,\"context\":16,\"epoch\":3,\"mode\":\"dp\",\"model\":\"gpt-small\","
            "\"optimizer\":\"sgd\",\"perplexity\":1.5,\"samples_per_second\":100.0,\"steps\":8,"
            "\"test_loss\":0.25,\"tokens_per_second\":1600.0,\"train_loss\":0.5,"
            "\"unigram_perplexity\":300.0,\"world_size\":2}\n");
  try {
    append_metrics(tmpdir("no_such_dir/metrics.jsonl"), c, m, 2);
    ADD_FAILURE() << "appended into a missing folder";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot append metrics to '" +
                                         tmpdir("no_such_dir/metrics.jsonl") + "'"),
              std::string::npos)
        << e.what();
  }
}

TEST(MetricsLogTest, TrimKeepsTheCheckpointsEpochsAndDropsTheRest) {
  const std::string path = tmpdir("metrics_trim.jsonl");
  const std::string log =
      "{\"epoch\":0}\n{\"epoch\":1}\n{\"epoch\":2,\"train_loss\":1.0}\n{\"epoch\":3,\"trai";
  write_file(path, log);
  EXPECT_EQ(trimmed(path, 3), path +
                                  ": dropped 1 line(s) after epoch 3, the checkpoint's (a run "
                                  "stopped between the line and its checkpoint)\n");
  EXPECT_EQ(read_file(path), "{\"epoch\":0}\n{\"epoch\":1}\n{\"epoch\":2,\"train_loss\":1.0}\n");
  EXPECT_EQ(trimmed(path, 1), path +
                                  ": dropped 1 line(s) after epoch 1, the checkpoint's (a run "
                                  "stopped between the line and its checkpoint)\n");
  EXPECT_EQ(read_file(path), "{\"epoch\":0}\n{\"epoch\":1}\n");
  // Nothing to drop: the file stays as it is.
  struct stat before {};
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  EXPECT_EQ(trimmed(path, 5), "");
  struct stat after {};
  ASSERT_EQ(::stat(path.c_str(), &after), 0);
  EXPECT_EQ(before.st_ino, after.st_ino) << "rewritten";
  // No checkpoint at all (--resume auto's fresh start): every line goes, and a line nested too
  // deep to parse safely is dropped as a torn line is.
  write_file(path, "{\"epoch\":0}\n" + std::string(100000, '[') + "\n");
  EXPECT_EQ(trimmed(path, -1), path +
                                   ": dropped 2 line(s): no checkpoint holds their epochs (a run "
                                   "stopped between a line and its checkpoint)\n");
  EXPECT_EQ(read_file(path), "");
  EXPECT_EQ(trimmed(tmpdir("no_such.jsonl"), 0), "");
  EXPECT_FALSE(exists(tmpdir("no_such.jsonl")));
}

}  // namespace
}  // namespace dpe::tools
