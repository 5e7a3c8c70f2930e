// The run's data (tools/train_lib/train_data.h): each task's sets, cut to --train-samples and
// --test-samples; a language model's windows of the corpus and its tokenizer's vocabulary; too
// little --text a DataError, a missing --data-dir a UsageError; the order the run visits them in.
#include "tools/train_lib/train_data.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>

#include "tests/tools/train_lib/train_test_util.h"
#include "tools/common/exit_codes.h"
#include "tools/common/train_distributed.h"
#include "tools/train_lib/trainer.h"

namespace dpe::tools {
namespace {

using train_test::tmpdir;
using train_test::small;
using train_test::tiny_gpt;
using train_test::write_file;

TEST(TrainDataTest, AMissingDataDirIsAUsageErrorOfTrain) {
  TrainConfig c = small("mlp", "single");
  c.data_dir = "/nonexistent/fmnist";  // a flag naming nothing: usage
  EXPECT_THROW(train(c, stdout), UsageError);
  EXPECT_THROW(load_checked_data(resolve_defaults(c), stdout, true), UsageError);
}

TEST(TrainDataTest, EachTasksSetsCutToTheirSamples) {
  TrainConfig c = resolve_defaults(small("toy", "single"));
  Data data = load_checked_data(c, stdout, true);
  EXPECT_EQ(data.train->size(), 256);
  EXPECT_EQ(data.test->size(), 128);
  EXPECT_FALSE(data.classification);
  EXPECT_FALSE(data.language_model);
  c.train_samples = 0;
  c.test_samples = 0;
  data = load_checked_data(c, stdout, true);
  EXPECT_EQ(data.train->size(), 4096);  // the toy regression's whole sets
  EXPECT_EQ(data.test->size(), 1024);
  data = load_checked_data(resolve_defaults(small("mlp", "single")), stdout, true);
  EXPECT_EQ(data.train->size(), 256);
  EXPECT_EQ(data.test->size(), 128);
  EXPECT_TRUE(data.classification);
  EXPECT_EQ(data.train->get(0).input.size(0), 1);  // one channel of 28x28
}

TEST(TrainDataTest, ALanguageModelTrainsOnWindowsOfTheCorpus) {
  const TrainConfig c = resolve_defaults(tiny_gpt("single"));
  const Data data = load_checked_data(c, stdout, true);
  EXPECT_TRUE(data.language_model);
  EXPECT_FALSE(data.classification);
  EXPECT_EQ(data.text_source, "language-model corpus");
  EXPECT_GT(data.vocab_size, 256);
  EXPECT_LE(data.vocab_size, 400);
  EXPECT_GT(data.unigram_perplexity, 1);
  EXPECT_EQ(data.train->size(), 64);
  EXPECT_EQ(data.test->size(), 8);
  EXPECT_EQ(data.train->get(0).input.numel(), 16);  // --context tokens a window
}

TEST(TrainDataTest, TooLittleTextForAValidationSplitIsADataError) {
  TrainConfig c = tiny_gpt("single");
  c.corpus_documents = 0;
  c.text = tmpdir("short.txt");
  write_file(c.text, "Only one short document, far from the twenty a validation split needs.\n");
  try {
    load_checked_data(resolve_defaults(c), stdout, true);
    ADD_FAILURE() << "trained on one document";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("--text " + c.text), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("too few for a validation split"), std::string::npos)
        << e.what();
  }
}

TEST(TrainDataTest, TheOrderOfEachSet) {
  const TrainConfig c = resolve_defaults(small("toy", "single"));
  const Data data = load_checked_data(c, stdout, true);
  const Distributed single = Distributed::single();
  const std::shared_ptr<Sampler> sampler = make_train_sampler(c, data, single);
  EXPECT_EQ(sampler->size(), 256);
  sampler->set_epoch(0);
  const auto first = sampler->indices();
  EXPECT_EQ(make_train_sampler(c, data, single)->indices(), first);  // a function of the seed
  sampler->set_epoch(1);
  EXPECT_NE(sampler->indices(), first);  // and of the epoch
  DataLoaderOptions test = test_loader_options(c, data, single);
  EXPECT_EQ(test.batch_size, 1000);
  EXPECT_EQ(test.sampler, nullptr);  // in order
  TrainConfig ddp = c;
  ddp.mode = "ddp";
  Distributed rank1;
  rank1.rank = 1;
  rank1.world = 2;
  EXPECT_EQ(make_train_sampler(ddp, data, rank1)->size(), 128);  // its shard
  test = test_loader_options(ddp, data, rank1);
  ASSERT_NE(test.sampler, nullptr);
  EXPECT_EQ(test.sampler->size(), 64);
}

}  // namespace
}  // namespace dpe::tools
