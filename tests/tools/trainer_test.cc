// //tools:train's loop: resume equals an uninterrupted run, a corrupt checkpoint is refused, a
// non-finite loss stops with the epoch and step named and leaves the last checkpoint intact; the
// gpt models train on a tiny slice of the language-model corpus (a 400-piece tokenizer trained in
// the test's own cache in about a second; no network) in single and dp modes.
#include "tools/trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "engine/core/error.h"

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
