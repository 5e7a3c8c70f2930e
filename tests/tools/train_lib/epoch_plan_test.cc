// The plan of epochs (tools/train_lib/epoch_plan.h): --epochs decides, or --max-steps, a total
// over the run (Hugging Face's max_steps) that takes as many epochs as it needs, the last one cut
// short, resumed runs included; --max-steps-per-epoch cuts each epoch.
#include "tools/train_lib/epoch_plan.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/error.h"
#include "tests/tools/train_lib/train_test_util.h"
#include "tools/common/exit_codes.h"
#include "tools/train_lib/trainer.h"

namespace dpe::tools {
namespace {

using train_test::tmpdir;
using train_test::small;
using train_test::expect_same_state;
using train_test::read_file;
using train_test::error_of;
using train_test::edit_json;

TEST(EpochPlanTest, WithoutMaxStepsTheEpochsDecide) {
  TrainConfig c;
  c.epochs = 3;
  Plan p = plan_epochs(c, 8, 0, 0);
  EXPECT_EQ(p.end_epoch, 3);
  EXPECT_EQ(p.steps_per_epoch, 8);
  EXPECT_EQ(plan_epochs(c, 8, 5, 40).end_epoch, 5);  // resumed past --epochs: nothing to train
  EXPECT_EQ(plan_epochs(c, 0, 0, 0).steps_per_epoch, 1);
  c.max_steps_per_epoch = 3;
  EXPECT_EQ(plan_epochs(c, 8, 0, 0).steps_per_epoch, 3);
  c.max_steps_per_epoch = 30;
  EXPECT_EQ(plan_epochs(c, 8, 0, 0).steps_per_epoch, 8);
}

TEST(EpochPlanTest, MaxStepsTakesTheEpochsTheStepsLeftNeed) {
  TrainConfig c;
  c.epochs = 1;
  c.max_steps = 19;
  EXPECT_EQ(plan_epochs(c, 8, 0, 0).end_epoch, 3);   // 8 + 8 + 3
  EXPECT_EQ(plan_epochs(c, 8, 1, 8).end_epoch, 3);   // resumed after 8: 8 + 3 more
  EXPECT_EQ(plan_epochs(c, 8, 2, 19).end_epoch, 2);  // all taken: nothing to train
  EXPECT_EQ(plan_epochs(c, 8, 2, 25).end_epoch, 2);
  c.max_steps = 5;
  EXPECT_EQ(plan_epochs(c, 8, 0, 0).end_epoch, 1);
  c.max_steps = kMaxEpochs + 1;
  try {
    plan_epochs(c, 1, 0, 0);
    ADD_FAILURE() << "planned more than kMaxEpochs epochs";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(),
                 "--max-steps 1000001 needs 1000001 more epochs of 1 steps after epoch 0, over "
                 "the limit of 1000000 epochs");
  }
}

// --max-steps counts optimizer steps over the whole run (Hugging Face's max_steps): fewer than
// an epoch's stop inside the first epoch whatever --epochs says, more than --epochs' worth take
// more epochs, and the last epoch ends where the count is reached. --max-steps-per-epoch cuts
// each epoch, and the total still holds.
TEST(EpochPlanTest, MaxStepsCountsTheWholeRun) {
  TrainConfig c = small("toy", "single");  // 256 samples, batch 32: 8 steps an epoch
  const auto steps = [](const TrainResult& r) {
    std::vector<std::pair<int64_t, int64_t>> s;
    for (const EpochMetrics& m : r.epochs) s.emplace_back(m.steps, m.global_step);
    return s;
  };
  using Steps = std::vector<std::pair<int64_t, int64_t>>;
  c.epochs = 2;
  c.max_steps = 5;
  EXPECT_EQ(steps(train(c, stdout)), (Steps{{5, 5}}));
  c.epochs = 1;
  c.max_steps = 19;
  EXPECT_EQ(steps(train(c, stdout)), (Steps{{8, 8}, {8, 16}, {3, 19}}));
  c.max_steps_per_epoch = 3;
  c.max_steps = 7;
  EXPECT_EQ(steps(train(c, stdout)), (Steps{{3, 3}, {3, 6}, {1, 7}}));
  c.max_steps = 0;
  c.epochs = 2;
  EXPECT_EQ(steps(train(c, stdout)), (Steps{{3, 3}, {3, 6}}));
  c.max_steps = -1;
  EXPECT_THROW(train(c, stdout), UsageError);
}

// A resumed run counts the steps before its checkpoint: stopped after epoch 0 (8 steps) and
// resumed with --max-steps 12, it takes 4 more and ends as the uninterrupted run does; resumed
// again, nothing is left to do. A checkpoint without the count (written before dpe counted the
// steps) resumes without --max-steps, and is refused with it, naming the file and the key.
TEST(EpochPlanTest, AResumedRunKeepsTheTotalOfMaxSteps) {
  TrainConfig c = small("toy", "single");
  c.max_steps = 12;
  const TrainResult straight = train(c, stdout);
  ASSERT_EQ(straight.epochs.size(), 2u);
  const std::string dir = tmpdir("max_steps_resume");
  c.checkpoint_dir = dir;
  c.max_steps = 0;
  c.epochs = 1;
  train(c, stdout);
  const std::string state = training_state_path(dir);
  EXPECT_EQ(nlohmann::json::parse(read_file(state)).at("global_step"), 8);
  c.max_steps = 12;
  c.resume = true;
  const TrainResult resumed = train(c, stdout);
  ASSERT_EQ(resumed.epochs.size(), 1u);
  EXPECT_EQ(resumed.epochs[0].epoch, 1);
  EXPECT_EQ(resumed.epochs[0].steps, 4);
  EXPECT_EQ(resumed.epochs[0].global_step, 12);
  expect_same_state(resumed.final_state, straight.final_state);
  EXPECT_EQ(nlohmann::json::parse(read_file(state)).at("global_step"), 12);
  const TrainResult again = train(c, stdout);
  EXPECT_TRUE(again.epochs.empty());
  expect_same_state(again.final_state, straight.final_state);

  edit_json(dir, state, [](nlohmann::json& j) { j.erase("global_step"); });
  c.max_steps = 20;
  const std::string msg = error_of(c);
  EXPECT_NE(msg.find(state + "' has no 'global_step' entry"), std::string::npos) << msg;
  EXPECT_THROW(train(c, stdout), DataError);
  c.max_steps = 0;
  c.epochs = 3;
  const TrainResult unknown = train(c, stdout);
  ASSERT_EQ(unknown.epochs.size(), 1u);
  EXPECT_EQ(unknown.epochs[0].global_step, -1);  // the count stays unknown
  EXPECT_FALSE(nlohmann::json::parse(read_file(state)).contains("global_step"));
}

}  // namespace
}  // namespace dpe::tools
