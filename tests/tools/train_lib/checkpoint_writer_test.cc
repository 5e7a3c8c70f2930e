// The checkpoint writer (tools/train_lib/checkpoint_writer.h): one call leaves the set the design
// note describes: the model's and the optimizer's state dicts with their metadata, the training
// state, and the manifest recording each file's size and CRC-32, written after `before_commit`
// (which sees the staged files and no manifest yet); no staged file stays, and an older single
// file in the directory is superseded and removed.
#include "tools/train_lib/checkpoint_writer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/io/safetensors.h"
#include "tests/tools/train_lib/train_test_util.h"
#include "tools/train_lib/checkpoint_files.h"
#include "tools/train_lib/checkpoint_json.h"

namespace dpe::tools {
namespace {

using train_test::tmpdir;
using train_test::expect_same_state;
using train_test::read_file;
using train_test::exists;
using train_test::keys_of;

TEST(CheckpointWriterTest, WritesTheSetAndCommitsItByTheManifest) {
  const std::string dir = tmpdir("writer");
  const StateDict model = {{"weight", Tensor::ones({2, 3})}, {"bias", Tensor::zeros({2})}};
  const StateDict optimizer = {{"state.0.momentum_buffer", Tensor::ones({2, 3})}};
  const nlohmann::ordered_json state = {{"format", "dpe-train-2"}, {"generation", 5},
                                        {"epoch", 4},              {"optimizer", "sgd"}};
  write_checkpoint(dir, 4, model, optimizer, state, [] {}, stdout);  // an earlier set
  save_safetensors(legacy_checkpoint_path(dir), model);             // and the older layout
  bool committed_before = true;
  std::vector<bool> staged_before;
  char* said = nullptr;
  size_t said_size = 0;
  FILE* out = ::open_memstream(&said, &said_size);
  write_checkpoint(
      dir, 5, model, optimizer, state,
      [&] {
        committed_before = nlohmann::json::parse(read_file(checkpoint_manifest_path(dir)))
                               .at("generation") == 5;
        for (const char* file : kSetFiles) {
          staged_before.push_back(exists(dir + "/" + staged_name(file, 5)));
        }
      },
      out);
  std::fclose(out);
  const std::string message(said, said_size);
  std::free(said);
  EXPECT_FALSE(committed_before) << "the manifest named generation 5 before the commit";
  EXPECT_EQ(staged_before, (std::vector<bool>{true, true, true}));
  EXPECT_EQ(message, "removed " + legacy_checkpoint_path(dir) + ", superseded by " +
                         checkpoint_manifest_path(dir) + "\n");
  EXPECT_FALSE(exists(legacy_checkpoint_path(dir)));

  const nlohmann::json manifest = nlohmann::json::parse(read_file(checkpoint_manifest_path(dir)));
  EXPECT_EQ(manifest.at("format"), kManifestFormat);
  EXPECT_EQ(manifest.at("generation"), 5);
  for (const char* file : kSetFiles) {
    const std::string path = dir + "/" + file;
    EXPECT_EQ(manifest.at("files").at(file), file_size(path)) << file;
    EXPECT_EQ(manifest.at("crc32").at(file), file_crc32(path)) << file;
    EXPECT_FALSE(exists(dir + "/" + staged_name(file, 5))) << file;
  }
  const SafetensorsContents saved_model = read_safetensors(model_checkpoint_path(dir));
  EXPECT_EQ(keys_of(saved_model.tensors), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(saved_model.metadata, (SafetensorsMetadata{{"format", "pt"}}));
  const SafetensorsContents saved_optimizer = read_safetensors(optimizer_checkpoint_path(dir));
  expect_same_state(saved_optimizer.tensors, optimizer);
  EXPECT_EQ(saved_optimizer.metadata, (SafetensorsMetadata{{"optimizer", "sgd"}}));
  EXPECT_EQ(read_file(training_state_path(dir)), state.dump(2) + "\n");
}

// A failure before the commit leaves the previous set as it was: the manifest names it still.
TEST(CheckpointWriterTest, AFailureBeforeTheCommitKeepsThePreviousSet) {
  const std::string dir = tmpdir("writer_failure");
  const StateDict model = {{"weight", Tensor::ones({2})}};
  const nlohmann::ordered_json state = {{"generation", 1}, {"optimizer", "sgd"}};
  write_checkpoint(dir, 1, model, {}, state, [] {}, stdout);
  const std::string manifest = read_file(checkpoint_manifest_path(dir));
  EXPECT_THROW(write_checkpoint(
                   dir, 2, model, {}, state, [] { throw Error("the metrics line failed"); },
                   stdout),
               Error);
  EXPECT_EQ(read_file(checkpoint_manifest_path(dir)), manifest);
  EXPECT_TRUE(exists(model_checkpoint_path(dir)));
}

}  // namespace
}  // namespace dpe::tools
