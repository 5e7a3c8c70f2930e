// //tools:train's loop: resume equals an uninterrupted run, a corrupt checkpoint is refused (and
// every metadata value checked), errors sorted into usage and data, the leftovers of a killed run
// cleaned up (temporary files, metrics lines without a checkpoint), a non-finite loss stops with
// the epoch and step named and leaves the last checkpoint intact; the gpt models train on a tiny
// slice of the language-model corpus (a 400-piece tokenizer trained in the test's own cache in
// about a second; no network) in single and dp modes.
#include "tools/trainer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/error.h"
#include "engine/io/safetensors.h"
#include "tools/exit_codes.h"

namespace dpe::tools {
namespace {

std::string tmpdir(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  return std::string(t ? t : "/tmp") + "/" + name;
}

TrainConfig small(const std::string& model, const std::string& mode) {
  TrainConfig c;
  c.mode = mode;
  c.devices = 2;
  c.model = model;
  c.batch_size = 32;
  c.lr = 0.05f;
  c.train_samples = 256;
  c.test_samples = 128;
  c.progress = false;
  c.data_dir = "/usr/share/datasets/fashion-mnist";
  return c;
}

void expect_same_state(const StateDict& a, const StateDict& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    if (a[i].second.dtype() == DType::kFloat32) {
      EXPECT_EQ(a[i].second.to_vector<float>(), b[i].second.to_vector<float>()) << a[i].first;
    }
  }
}

TEST(TrainerTest, ResumeEqualsAnUninterruptedRun) {
  for (const char* mode : {"single", "dp"}) {
    TrainConfig c = small("toy", mode);
    c.epochs = 3;
    TrainResult straight = train(c, stdout);

    c.checkpoint_dir = tmpdir(std::string("resume_") + mode);
    c.epochs = 1;
    train(c, stdout);
    c.epochs = 3;
    c.resume = true;
    TrainResult resumed = train(c, stdout);
    ASSERT_EQ(resumed.epochs.size(), 2u);  // epochs 1 and 2
    EXPECT_EQ(resumed.epochs[0].epoch, 1);
    expect_same_state(resumed.final_state, straight.final_state);
    // A metrics line per epoch.
    std::ifstream log(metrics_path(c.checkpoint_dir));
    int lines = 0;
    for (std::string l; std::getline(log, l);) ++lines;
    EXPECT_EQ(lines, 3);
  }
}

TEST(TrainerTest, CorruptCheckpointIsRefusedWithItsName) {
  TrainConfig c = small("toy", "single");
  c.checkpoint_dir = tmpdir("corrupt");
  train(c, stdout);
  {
    std::ofstream f(checkpoint_path(c.checkpoint_dir), std::ios::binary | std::ios::trunc);
    f << "this is not a safetensors file";
  }
  c.resume = true;
  c.epochs = 2;
  try {
    train(c, stdout);
    FAIL() << "a corrupt checkpoint was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint.safetensors"), std::string::npos) << e.what();
  }
}

TEST(TrainerTest, NonFiniteLossStopsAndKeepsTheLastGoodCheckpoint) {
  TrainConfig c = small("toy", "single");
  c.checkpoint_dir = tmpdir("nonfinite");
  train(c, stdout);
  std::ifstream before_f(checkpoint_path(c.checkpoint_dir), std::ios::binary);
  const std::string before((std::istreambuf_iterator<char>(before_f)), {});
  c.resume = true;
  c.epochs = 2;
  c.lr = 1e30f;  // diverges at once
  try {
    train(c, stdout);
    FAIL() << "training went on with a non-finite loss";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("non-finite loss"), std::string::npos) << msg;
    EXPECT_NE(msg.find("epoch 1, step"), std::string::npos) << msg;
    EXPECT_NE(msg.find("is intact"), std::string::npos) << msg;
  }
  std::ifstream after_f(checkpoint_path(c.checkpoint_dir), std::ios::binary);
  const std::string after((std::istreambuf_iterator<char>(after_f)), {});
  EXPECT_EQ(before, after);
}

TEST(TrainerTest, DataParallelMatchesSingleDeviceOnTheMlp) {
  TrainConfig c = small("mlp", "single");
  c.max_steps = 3;
  TrainResult one = train(c, stdout);
  c.mode = "dp";
  TrainResult two = train(c, stdout);
  ASSERT_EQ(one.final_state.size(), two.final_state.size());
  for (size_t i = 0; i < one.final_state.size(); ++i) {
    const auto a = one.final_state[i].second.to_vector<float>();
    const auto b = two.final_state[i].second.to_vector<float>();
    double diff = 0, ref = 0;
    for (size_t k = 0; k < a.size(); ++k) {
      diff += (a[k] - b[k]) * (a[k] - b[k]);
      ref += a[k] * a[k];
    }
    EXPECT_LT(std::sqrt(diff / ref), 1e-5) << one.final_state[i].first;
  }
}

// gpt-small on the corpus's first 600 documents, a 400-piece tokenizer, windows of 16 tokens.
TrainConfig tiny_gpt(const std::string& mode) {
  TrainConfig c;
  c.mode = mode;
  c.devices = 2;
  c.model = "gpt-small";
  c.batch_size = 4;
  c.context = 16;
  c.vocab_size = 400;
  c.corpus_documents = 600;
  c.cache_dir = tmpdir("lm_cache");
  c.train_samples = 64;
  c.test_samples = 8;
  c.max_steps = 2;
  c.progress = false;
  return c;
}

double relative_difference(const StateDict& a, const StateDict& b) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto x = a[i].second.to_vector<float>();
    const auto y = b[i].second.to_vector<float>();
    for (size_t k = 0; k < x.size(); ++k) {
      diff += (x[k] - y[k]) * (x[k] - y[k]);
      ref += x[k] * x[k];
    }
  }
  return std::sqrt(diff / ref);
}

TEST(TrainerTest, TinyGptTrainsInSingleAndDataParallelModes) {
  TrainResult single = train(tiny_gpt("single"), stdout);
  TrainResult dp = train(tiny_gpt("dp"), stdout);
  for (const TrainResult* r : {&single, &dp}) {
    ASSERT_EQ(r->epochs.size(), 1u);
    const EpochMetrics& m = r->epochs[0];
    EXPECT_EQ(m.steps, 2);
    EXPECT_TRUE(std::isfinite(m.test_loss));
    EXPECT_NEAR(m.perplexity, std::exp(m.test_loss), 1e-6 * m.perplexity);
    EXPECT_GT(m.unigram_perplexity, 1);
    EXPECT_LT(m.unigram_perplexity, 400);  // at most the vocabulary, with add-one smoothing
    EXPECT_NEAR(m.tokens_per_second, 16 * m.samples_per_second, 1e-6 * m.tokens_per_second);
    EXPECT_EQ(m.test_accuracy, -1);
  }
  // The vocabulary comes from the tokenizer: wte is [400, 256].
  EXPECT_EQ(single.final_state[0].first, "wte.weight");
  EXPECT_EQ(single.final_state[0].second.size(0), 400);
  // DataParallel's step (gradients reduced onto device 0, clipped there) equals one device's.
  ASSERT_EQ(single.final_state.size(), dp.final_state.size());
  EXPECT_LT(relative_difference(single.final_state, dp.final_state), 1e-5);
}

TEST(TrainerTest, GptResumeEqualsAnUninterruptedRun) {
  TrainConfig c = tiny_gpt("single");
  c.epochs = 2;
  TrainResult straight = train(c, stdout);
  c.checkpoint_dir = tmpdir("resume_gpt");
  c.epochs = 1;
  train(c, stdout);
  c.epochs = 2;
  c.resume = true;
  TrainResult resumed = train(c, stdout);
  ASSERT_EQ(resumed.epochs.size(), 1u);
  EXPECT_EQ(resumed.epochs[0].epoch, 1);
  EXPECT_EQ(resumed.epochs[0].test_loss, straight.epochs[1].test_loss);
  expect_same_state(resumed.final_state, straight.final_state);  // AdamW's moments restored
  std::ifstream log(metrics_path(c.checkpoint_dir));
  std::string first;
  std::getline(log, first);
  for (const char* key : {"\"perplexity\"", "\"unigram_perplexity\"", "\"tokens_per_second\"",
                          "\"optimizer\":\"adamw\""}) {
    EXPECT_NE(first.find(key), std::string::npos) << key << " missing from " << first;
  }
}

// Runs train() and returns its error message ("" when it did not throw).
std::string error_of(const TrainConfig& c) {
  try {
    train(c, stdout);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TrainerTest, BadGptSettingsAreNamed) {
  TrainConfig c = tiny_gpt("single");
  c.context = 129;
  EXPECT_NE(error_of(c).find("--context 129 must be between 1 and gpt-small's block size 128"),
            std::string::npos)
      << error_of(c);
  c = tiny_gpt("single");
  c.optimizer = "rmsprop";
  EXPECT_NE(error_of(c).find("unknown optimizer 'rmsprop'"), std::string::npos);
  c = small("mlp", "single");
  c.context = 16;
  EXPECT_NE(error_of(c).find("--context applies to the gpt models only"), std::string::npos);
  // A checkpoint of AdamW's state is not resumed with SGD.
  c = tiny_gpt("single");
  c.checkpoint_dir = tmpdir("gpt_optimizer");
  train(c, stdout);
  c.resume = true;
  c.epochs = 2;
  c.optimizer = "sgd";
  EXPECT_NE(error_of(c).find("holds adamw state, not sgd"), std::string::npos) << error_of(c);
  c.optimizer = "adamw";
  c.context = 8;
  EXPECT_NE(error_of(c).find("was trained with --context 16, not 8"), std::string::npos)
      << error_of(c);
}

}  // namespace
}  // namespace dpe::tools

namespace dpe::tools {
namespace {

// The checkpoint of a one-epoch toy run in `dir`, its metadata then changed by `edit`.
void write_checkpoint(const std::string& dir,
                      const std::function<void(SafetensorsMetadata&)>& edit) {
  TrainConfig c = small("toy", "single");
  c.checkpoint_dir = dir;
  train(c, stdout);
  SafetensorsContents ck = read_safetensors(checkpoint_path(dir));
  SafetensorsSaveOptions o;
  o.metadata = ck.metadata;
  edit(o.metadata);
  save_safetensors(checkpoint_path(dir), ck.tensors, o);
}

// Issue 12, item 3: every metadata value train reads on resume is checked; "2147483647" no longer
// overflows stoi(...) + 1 into epochs near INT_MIN, "-3" no longer trains epochs -2..1; the
// message names the file and the key, and the error is a DataError (exit code 3).
TEST(TrainerTest, CheckpointMetadataIsValidated) {
  const std::string dir = tmpdir("bad_metadata");
  const std::string file = checkpoint_path(dir);
  const std::string long_value(5000, '9');
  for (const std::string& bad :
       {std::string("2147483647"), std::string("-3"), std::string("abc"), std::string(""),
        std::string("1e3"), std::string(" 1"), std::string("99999999999999999999"), long_value}) {
    write_checkpoint(dir, [&](SafetensorsMetadata& m) { m["epoch"] = bad; });
    TrainConfig c = small("toy", "single");
    c.checkpoint_dir = dir;
    c.resume = true;
    c.epochs = 3;
    try {
      train(c, stdout);
      FAIL() << "epoch '" << bad << "' was accepted";
    } catch (const DataError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(file), std::string::npos) << msg;
      EXPECT_NE(msg.find("metadata 'epoch'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("not a whole number from 0 to 999999"), std::string::npos) << msg;
      EXPECT_LT(msg.size(), 400u) << "the value is cut, not printed whole";
    }
  }
  // The other keys: a foreign model or optimizer, an unknown format, a missing key.
  const std::vector<std::pair<std::function<void(SafetensorsMetadata&)>, std::string>> cases{
      {[](SafetensorsMetadata& m) { m["model"] = "mlp"; }, "holds a mlp model, not toy"},
      {[](SafetensorsMetadata& m) { m["model"] = std::string(300, 'x'); }, "(300 bytes)"},
      {[](SafetensorsMetadata& m) { m["optimizer"] = "adamw"; }, "holds adamw state, not sgd"},
      {[](SafetensorsMetadata& m) { m["format"] = "dpe-train-9"; }, "metadata 'format'"},
      {[](SafetensorsMetadata& m) { m.erase("epoch"); }, "has no 'epoch' entry"},
  };
  for (const auto& [edit, expected] : cases) {
    write_checkpoint(dir, edit);
    TrainConfig c = small("toy", "single");
    c.checkpoint_dir = dir;
    c.resume = true;
    c.epochs = 3;
    try {
      train(c, stdout);
      FAIL() << "accepted; expected " << expected;
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
    }
  }
  // A valid epoch still resumes after it.
  write_checkpoint(dir, [](SafetensorsMetadata& m) { m["epoch"] = "1"; });
  TrainConfig c = small("toy", "single");
  c.checkpoint_dir = dir;
  c.resume = true;
  c.epochs = 3;
  const TrainResult r = train(c, stdout);
  ASSERT_EQ(r.epochs.size(), 1u);
  EXPECT_EQ(r.epochs[0].epoch, 2);
}

TEST(TrainerTest, ErrorsAreSortedIntoUsageAndData) {
  TrainConfig c = small("toy", "single");
  c.lr = std::nanf("");
  EXPECT_THROW(train(c, stdout), UsageError);
  c = small("toy", "single");
  c.batch_size = -1;
  EXPECT_THROW(train(c, stdout), UsageError);
  c = small("mlp", "single");
  c.data_dir = "/nonexistent/fmnist";  // a flag naming nothing: usage
  EXPECT_THROW(train(c, stdout), UsageError);
  c = small("toy", "single");
  c.checkpoint_dir = tmpdir("no_checkpoint_here");
  c.resume = true;  // the file is missing: data
  EXPECT_THROW(train(c, stdout), DataError);
}

std::vector<int> metric_epochs(const std::string& path) {
  std::vector<int> epochs;
  std::ifstream log(path);
  for (std::string l; std::getline(log, l);) {
    const size_t at = l.find("\"epoch\":");
    epochs.push_back(at == std::string::npos ? -1 : std::atoi(l.c_str() + at + 8));
  }
  return epochs;
}

// Issue 12, item 9: the temporary files of killed checkpoint writes are removed at start (only
// names of our own pattern); metrics.jsonl never lacks the checkpoint's line, and on resume the
// lines after the checkpoint's epoch (a kill between the line and the rename) are dropped.
TEST(TrainerTest, LeftoversOfAKilledRunAreCleanedUp) {
  const std::string dir = tmpdir("leftovers");
  TrainConfig c = small("toy", "single");
  c.checkpoint_dir = dir;
  c.epochs = 2;
  train(c, stdout);
  EXPECT_EQ(metric_epochs(metrics_path(dir)), (std::vector<int>{0, 1}));
  // What a run killed in epoch 2 leaves: its metrics line, written before the checkpoint's
  // rename, a torn line, and a temporary checkpoint file.
  {
    std::ofstream log(metrics_path(dir), std::ios::app);
    log << "{\"epoch\":2,\"train_loss\":1.0}\n{\"epoch\":3,\"trai";
  }
  const std::vector<std::string> stale{"checkpoint.safetensors.tmp.Ab3xYz",
                                       "checkpoint.safetensors.tmp.000000"};
  const std::vector<std::string> foreign{"checkpoint.safetensors.tmp.toolong", "notes.tmp.Ab3xYz",
                                         "checkpoint.safetensors.tmp.Ab-xYz"};
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
  EXPECT_EQ(read_safetensors(checkpoint_path(dir)).metadata.at("epoch"), "3");
}

}  // namespace
}  // namespace dpe::tools
