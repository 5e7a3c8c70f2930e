// //tools:train's loop end to end (tools/train_lib/trainer.h): resume equals an uninterrupted run
// and leaves the checkpoint set the design note describes, DataParallel's step equals one
// device's, and the gpt models train on a tiny slice of the language-model corpus (a 400-piece
// tokenizer trained in the test's own cache in about a second; no network) in single and dp
// modes. The pieces' own behaviour is tested beside each of them (checkpoint_reader_test,
// checkpoint_recovery_test, epoch_plan_test, ...).
#include "tools/train_lib/trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/io/safetensors.h"
#include "tests/tools/train_lib/train_test_util.h"

namespace dpe::tools {
namespace {

using train_test::tmpdir;
using train_test::small;
using train_test::tiny_gpt;
using train_test::expect_same_state;
using train_test::relative_difference;
using train_test::read_file;
using train_test::exists;
using train_test::keys_of;

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
    // The set: model.safetensors holds exactly the model's state_dict, the optimizer's state is
    // apart, the manifest names the three.
    const SafetensorsContents model = read_safetensors(model_checkpoint_path(c.checkpoint_dir));
    EXPECT_EQ(keys_of(model.tensors), keys_of(resumed.final_state));
    EXPECT_EQ(model.metadata.at("format"), "pt");
    EXPECT_FALSE(load_safetensors(optimizer_checkpoint_path(c.checkpoint_dir)).empty());
    const auto state = nlohmann::json::parse(read_file(training_state_path(c.checkpoint_dir)));
    EXPECT_EQ(state.at("epoch"), 2);
    EXPECT_EQ(state.at("format"), "dpe-train-2");
    EXPECT_EQ(state.at("generation"), 3);  // a third write into this directory
    const auto manifest =
        nlohmann::json::parse(read_file(checkpoint_manifest_path(c.checkpoint_dir)));
    EXPECT_EQ(manifest.at("generation"), 3);
    EXPECT_EQ(manifest.at("files").size(), 3u);
    EXPECT_FALSE(exists(legacy_checkpoint_path(c.checkpoint_dir)));
  }
}

TEST(TrainerTest, DataParallelMatchesSingleDeviceOnTheMlp) {
  TrainConfig c = small("mlp", "single");
  c.max_steps_per_epoch = 3;
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

}  // namespace
}  // namespace dpe::tools
