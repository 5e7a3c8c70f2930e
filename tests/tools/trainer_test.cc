// //tools:train's loop: resume equals an uninterrupted run, a corrupt checkpoint is refused, a
// non-finite loss stops with the epoch and step named and leaves the last checkpoint intact.
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

}  // namespace
}  // namespace dpe::tools
