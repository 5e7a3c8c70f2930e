// One epoch (tools/train_lib/train_epoch.h): a pass takes at most its steps and is drained, so
// the next starts afresh; evaluation covers the whole test set; a non-finite loss stops the run
// naming the epoch and the step and leaves the last checkpoint intact; the epoch's line.
#include "tools/train_lib/train_epoch.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "engine/core/error.h"
#include "tests/tools/train_lib/train_test_util.h"
#include "tools/common/train_distributed.h"
#include "tools/train_lib/model_and_optimizer.h"
#include "tools/train_lib/state_io.h"
#include "tools/train_lib/train_data.h"
#include "tools/train_lib/trainer.h"

namespace dpe::tools {
namespace {

using train_test::tmpdir;
using train_test::small;
using train_test::relative_difference;
using train_test::read_file;

// What print_epoch writes for `m`.
std::string printed(const EpochMetrics& m, bool language_model) {
  char* text = nullptr;
  size_t size = 0;
  FILE* out = ::open_memstream(&text, &size);
  print_epoch(m, language_model, out);
  std::fclose(out);
  const std::string said(text, size);
  std::free(text);
  return said;
}

// The toy regression's epochs as train() runs them on one process: 256 samples, batches of 32.
TEST(TrainEpochTest, APassTakesAtMostItsStepsAndTheTestSetIsEvaluatedWhole) {
  const TrainConfig c = resolve_defaults(small("toy", "single"));
  const Distributed dist = Distributed::single();
  const Data data = load_checked_data(c, stdout, true);
  std::shared_ptr<Module> model = build_model(c, data, dist);
  std::shared_ptr<Module> net = wrap_for_mode(c, model, dist);
  std::unique_ptr<optim::Optimizer> opt = make_optimizer(c, model->parameters(), c.lr, dist);
  const StateIo io = state_io(*model, *net, *opt);
  std::shared_ptr<Sampler> sampler = make_train_sampler(c, data, dist);
  DataLoaderOptions lo;
  lo.batch_size = c.batch_size;
  lo.sampler = sampler;
  DataLoader loader(data.train, lo);
  DataLoader test_loader(data.test, test_loader_options(c, data, dist));
  const tools::Run run{c, compute_device(c), dist, data, *model, *net, *opt, io, true, stdout};
  StateDict before;
  for (const auto& [name, value] : model->state_dict()) before.emplace_back(name, value.clone());
  EpochMetrics cut = train_epoch(run, 0, *sampler, loader, 3);
  EXPECT_EQ(cut.epoch, 0);
  EXPECT_EQ(cut.steps, 3);
  EXPECT_TRUE(std::isfinite(cut.train_loss) && cut.train_loss > 0) << cut.train_loss;
  EXPECT_EQ(cut.tokens_per_second, 0);
  EXPECT_GT(relative_difference(before, model->state_dict()), 0) << "nothing was stepped";
  // The cut pass was drained: the next epoch takes a whole one.
  EpochMetrics whole = train_epoch(run, 1, *sampler, loader, 100);
  EXPECT_EQ(whole.steps, 8);
  evaluate(run, test_loader, whole);
  EXPECT_TRUE(std::isfinite(whole.test_loss) && whole.test_loss > 0) << whole.test_loss;
  EXPECT_EQ(whole.test_accuracy, -1);  // a regression
  EXPECT_EQ(whole.perplexity, -1);
}

TEST(TrainEpochTest, TheEpochsLineSaysItsTasksMetrics) {
  EpochMetrics m;
  m.epoch = 2;
  m.train_loss = 0.5;
  m.test_loss = 0.25;
  m.samples_per_second = 100;
  EXPECT_EQ(printed(m, false), "epoch 2: train loss 0.5000, test loss 0.2500, 100 samples/s\n");
  m.test_accuracy = 0.875;
  EXPECT_EQ(printed(m, false),
            "epoch 2: train loss 0.5000, test loss 0.2500, test accuracy 87.50%, 100 samples/s\n");
  m.perplexity = 1.3;
  m.unigram_perplexity = 300;
  m.tokens_per_second = 1600;
  EXPECT_EQ(printed(m, true),
            "epoch 2: train loss 0.5000, val loss 0.2500, val perplexity 1.3 (unigram baseline "
            "300.0), 1600 tokens/s\n");
}

TEST(TrainEpochTest, NonFiniteLossStopsAndKeepsTheLastGoodCheckpoint) {
  TrainConfig c = small("toy", "single");
  c.checkpoint_dir = tmpdir("nonfinite");
  train(c, stdout);
  const std::string before = read_file(model_checkpoint_path(c.checkpoint_dir)) +
                             read_file(checkpoint_manifest_path(c.checkpoint_dir));
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
  const std::string after = read_file(model_checkpoint_path(c.checkpoint_dir)) +
                            read_file(checkpoint_manifest_path(c.checkpoint_dir));
  EXPECT_EQ(before, after);
}

}  // namespace
}  // namespace dpe::tools
