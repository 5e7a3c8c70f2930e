// Resume (tools/train_lib/checkpoint_reader.h): it loads what the writer wrote; a checkpoint set
// that is corrupt (truncated, a flipped bit, other bytes, a model of another shape, JSON nested
// too deep) or does not fit the run (another model, optimizer, seed or --context; a bad metadata
// value of any key) is refused with a DataError naming the file and the key; the older
// single-file layout resumes as the set does, and the first set written beside it supersedes it.
#include "tools/train_lib/checkpoint_reader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/core/error.h"
#include "engine/io/safetensors.h"
#include "tests/tools/train_lib/train_test_util.h"
#include "tools/common/exit_codes.h"
#include "tools/common/train_distributed.h"
#include "tools/train_lib/checkpoint_writer.h"
#include "tools/train_lib/model_and_optimizer.h"
#include "tools/train_lib/state_io.h"
#include "tools/train_lib/trainer.h"

namespace dpe::tools {
namespace {

using train_test::tmpdir;
using train_test::small;
using train_test::tiny_gpt;
using train_test::expect_same_state;
using train_test::read_file;
using train_test::write_file;
using train_test::exists;
using train_test::error_of;
using train_test::train_one_epoch;
using train_test::edit_json;
using train_test::to_legacy_layout;
using train_test::resume_error;

// A fresh toy model and its SGD optimizer, seeded by `seed`.
struct ToyRun {
  explicit ToyRun(uint64_t seed) {
    TrainConfig c = resolve_defaults(small("toy", "single"));
    c.seed = seed;
    model = build_model(c, Data(), Distributed::single());
    opt = make_optimizer(c, model->parameters(), c.lr, Distributed::single());
    io = state_io(*model, *model, *opt);
  }
  std::shared_ptr<Module> model;
  std::unique_ptr<optim::Optimizer> opt;
  StateIo io;
};

TEST(CheckpointReaderTest, ResumeLoadsWhatTheWriterWrote) {
  const std::string dir = tmpdir("reader_round_trip");
  ToyRun saved(7);
  const nlohmann::ordered_json state = {{"format", "dpe-train-2"}, {"generation", 1},
                                        {"epoch", 4},              {"model", "toy"},
                                        {"mode", "single"},        {"optimizer", "sgd"},
                                        {"seed", 7},               {"global_step", 40}};
  write_checkpoint(dir, 1, saved.model->state_dict(), saved.opt->state_dict(), state, [] {},
                   stdout);
  EXPECT_TRUE(has_checkpoint(dir));
  ToyRun loaded(8);
  TrainConfig c = resolve_defaults(small("toy", "single"));
  c.seed = 7;
  c.checkpoint_dir = dir;
  std::string from;
  const Position at = resume(c, /*language_model=*/false, loaded.io, &from);
  EXPECT_EQ(at.epoch, 4);
  EXPECT_EQ(at.global_step, 40);
  EXPECT_EQ(from, checkpoint_manifest_path(dir));
  expect_same_state(loaded.model->state_dict(), saved.model->state_dict());
  // The seed decides the data order: another one is refused, naming the file.
  c.seed = 8;
  try {
    resume(c, false, loaded.io, &from);
    ADD_FAILURE() << "resumed with another seed";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(training_state_path(dir) +
                                         "' was trained with --seed 7, not 8"),
              std::string::npos)
        << e.what();
  }
}

TEST(CheckpointReaderTest, HasCheckpointSeesEitherLayout) {
  const std::string dir = tmpdir("has_checkpoint");
  train_one_epoch(dir);
  EXPECT_TRUE(has_checkpoint(dir));
  to_legacy_layout(dir);
  EXPECT_FALSE(exists(checkpoint_manifest_path(dir)));
  EXPECT_TRUE(has_checkpoint(dir));
  ::unlink(legacy_checkpoint_path(dir).c_str());
  EXPECT_FALSE(has_checkpoint(dir));
  EXPECT_FALSE(has_checkpoint(tmpdir("no_such_dir")));
}

// Each file of the set, damaged in turn, is refused with a message naming it (and the key).
TEST(CheckpointReaderTest, CorruptCheckpointIsRefusedWithItsName) {
  TrainConfig c = small("toy", "single");
  c.checkpoint_dir = tmpdir("corrupt");
  train(c, stdout);
  const std::string dir = c.checkpoint_dir;
  const std::vector<std::string> files{checkpoint_manifest_path(dir), model_checkpoint_path(dir),
                                       optimizer_checkpoint_path(dir), training_state_path(dir)};
  std::vector<std::string> good;
  for (const auto& f : files) good.push_back(read_file(f));
  c.resume = true;
  c.epochs = 2;
  auto expect_refused = [&](const std::string& file, const std::string& expected) {
    try {
      train(c, stdout);
      ADD_FAILURE() << "a corrupt " << file << " was accepted";
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
    for (size_t i = 0; i < files.size(); ++i) write_file(files[i], good[i]);
  };
  // Truncated: the manifest's sizes catch it before the file is read.
  for (size_t i = 1; i < files.size(); ++i) {
    write_file(files[i], good[i].substr(0, good[i].size() / 2));
    expect_refused(files[i], files[i] + "' is " + std::to_string(good[i].size() / 2) +
                                 " bytes, but '" + files[0] + "' (metadata 'files') records " +
                                 std::to_string(good[i].size()) + " bytes");
  }
  // One bit flipped in each file's data: the size is right, the CRC-32 is not.
  for (size_t i = 1; i < files.size(); ++i) {
    std::string flipped = good[i];
    flipped[flipped.size() - 3] ^= 0x10;
    write_file(files[i], flipped);
    expect_refused(files[i], "' has CRC-32 ");
  }
  // The same size, other bytes: the readers catch it.
  for (size_t i = 1; i < files.size(); ++i) {
    write_file(files[i], std::string(good[i].size(), '#'));
    expect_refused(files[i], "");
  }
  ::unlink(files[1].c_str());
  expect_refused(files[1], "is missing");
  write_file(files[0], "this is not a manifest");
  expect_refused(files[0], "is not a JSON object");
  // Nested 100 000 deep (nlohmann's parser and serializer recurse once per level): refused
  // before it is parsed, the manifest and training_state.json alike.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  write_file(files[0], deep);
  expect_refused(files[0], "nests deeper than 16 levels");
  {
    auto manifest = nlohmann::json::parse(good[0]);
    manifest["files"]["training_state.json"] = deep.size();
    manifest.erase("crc32");
    write_file(files[0], manifest.dump());
    write_file(files[3], deep);
    expect_refused(files[3], "nests deeper than 16 levels");
  }
  // A model file of another shape, recorded in the manifest as it is.
  {
    StateDict wrong = load_safetensors(files[1]);
    wrong.pop_back();
    save_safetensors(files[1], wrong);
    auto manifest = nlohmann::json::parse(good[0]);
    manifest["files"]["model.safetensors"] = read_file(files[1]).size();
    manifest.erase("crc32");  // as a manifest written before checksums were recorded
    write_file(files[0], manifest.dump());
    expect_refused(files[1], "Missing key(s) in state_dict");
  }
  EXPECT_EQ(train(c, stdout).epochs.size(), 1u);  // restored, it resumes
}

// Every metadata value train reads on resume is checked: "2147483647" does not overflow
// stoi(...) + 1 into epochs near INT_MIN, "-3" does not train epochs -2..1; the message names the file and the key, and the error is a
// DataError (exit code 3).
TEST(CheckpointReaderTest, CheckpointMetadataIsValidated) {
  const std::string dir = tmpdir("bad_metadata");
  const std::string file = legacy_checkpoint_path(dir);
  const std::string long_value(5000, '9');
  for (const std::string& bad :
       {std::string("2147483647"), std::string("-3"), std::string("abc"), std::string(""),
        std::string("1e3"), std::string(" 1"), std::string("99999999999999999999"), long_value}) {
    train_one_epoch(dir);
    to_legacy_layout(dir, [&](SafetensorsMetadata& m) { m["epoch"] = bad; });
    const std::string msg = resume_error(dir);
    EXPECT_NE(msg.find(file), std::string::npos) << bad << ": " << msg;
    EXPECT_NE(msg.find("metadata 'epoch'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("not a whole number from 0 to 999999"), std::string::npos) << msg;
    EXPECT_LT(msg.size(), 400u) << "the value is cut, not printed whole";
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
    train_one_epoch(dir);
    to_legacy_layout(dir, edit);
    const std::string msg = resume_error(dir);
    EXPECT_NE(msg.find(expected), std::string::npos) << msg;
    EXPECT_NE(msg.find(file), std::string::npos) << msg;
  }
}

// The same checks on training_state.json, and the manifest's own keys. A value of the wrong JSON
// type (the epoch as a string "1") is refused like a malformed one.
TEST(CheckpointReaderTest, TrainingStateAndManifestAreValidated) {
  const std::string dir = tmpdir("bad_training_state");
  const std::string state = training_state_path(dir);
  const std::string manifest = checkpoint_manifest_path(dir);
  const std::string long_value(5000, '9');
  for (const nlohmann::json& bad :
       {nlohmann::json(2147483647), nlohmann::json(-3), nlohmann::json(1e3), nlohmann::json(1e20),
        nlohmann::json("1"), nlohmann::json("abc"), nlohmann::json(nullptr),
        nlohmann::json(long_value)}) {
    train_one_epoch(dir);
    edit_json(dir, state, [&](nlohmann::json& j) { j["epoch"] = bad; });
    const std::string msg = resume_error(dir);
    EXPECT_NE(msg.find(state), std::string::npos) << bad << ": " << msg;
    EXPECT_NE(msg.find("metadata 'epoch'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("not a whole number from 0 to 999999"), std::string::npos) << msg;
    EXPECT_LT(msg.size(), 400u) << "the value is cut, not printed whole";
  }
  using Edit = std::function<void(nlohmann::json&)>;
  const std::vector<std::tuple<std::string, Edit, std::string>> cases{
      {state, [](nlohmann::json& j) { j["model"] = "mlp"; }, "holds a mlp model, not toy"},
      {state, [](nlohmann::json& j) { j["optimizer"] = "adamw"; }, "holds adamw state, not sgd"},
      {state, [](nlohmann::json& j) { j.erase("optimizer"); }, "has no 'optimizer' entry"},
      {state, [](nlohmann::json& j) { j["format"] = "dpe-train-1"; }, "metadata 'format'"},
      {state, [](nlohmann::json& j) { j.erase("epoch"); }, "has no 'epoch' entry"},
      {state, [](nlohmann::json& j) { j["seed"] = 7; }, "was trained with --seed 7, not 0"},
      {state, [](nlohmann::json& j) { j["seed"] = -1; }, "metadata 'seed'"},
      {state, [](nlohmann::json& j) { j["generation"] = 99; }, "the files are not one set"},
      {manifest, [](nlohmann::json& j) { j["format"] = "v2"; }, "metadata 'format' is v2"},
      {manifest, [](nlohmann::json& j) { j["generation"] = "abc"; }, "metadata 'generation'"},
      {manifest, [](nlohmann::json& j) { j["files"].erase("optimizer.safetensors"); },
       "metadata 'files' must map"},
      {manifest, [](nlohmann::json& j) { j["files"]["notes.txt"] = 3; },
       "metadata 'files' must map"},
  };
  for (const auto& [file, edit, expected] : cases) {
    train_one_epoch(dir);
    edit_json(dir, file, edit);
    const std::string msg = resume_error(dir);
    EXPECT_NE(msg.find(expected), std::string::npos) << msg;
    EXPECT_NE(msg.find(file), std::string::npos) << msg;
  }
  // A valid epoch still resumes after it.
  train_one_epoch(dir);
  edit_json(dir, state, [](nlohmann::json& j) { j["epoch"] = 1; });
  TrainConfig c = small("toy", "single");
  c.checkpoint_dir = dir;
  c.resume = true;
  c.epochs = 3;
  const TrainResult r = train(c, stdout);
  ASSERT_EQ(r.epochs.size(), 1u);
  EXPECT_EQ(r.epochs[0].epoch, 2);
}

// A checkpoint in the older single-file layout resumes with the same result as an uninterrupted
// run, and the first set written in its directory supersedes it.
TEST(CheckpointReaderTest, OldSingleFileLayoutResumes) {
  for (const char* model : {"toy", "mlp"}) {
    TrainConfig c = small(model, "single");
    c.max_steps_per_epoch = 3;
    c.epochs = 2;
    TrainResult straight = train(c, stdout);
    c.checkpoint_dir = tmpdir(std::string("legacy_") + model);
    c.epochs = 1;
    train(c, stdout);
    to_legacy_layout(c.checkpoint_dir);
    c.epochs = 2;
    c.resume = true;
    TrainResult resumed = train(c, stdout);
    ASSERT_EQ(resumed.epochs.size(), 1u);
    expect_same_state(resumed.final_state, straight.final_state);
    EXPECT_FALSE(exists(legacy_checkpoint_path(c.checkpoint_dir)));
    EXPECT_TRUE(exists(checkpoint_manifest_path(c.checkpoint_dir)));
  }
}

// A gpt checkpoint resumes only with the optimizer and the --context it was trained with.
TEST(CheckpointReaderTest, AGptCheckpointNeedsItsOptimizerAndContext) {
  // A checkpoint of AdamW's state is not resumed with SGD.
  TrainConfig c = tiny_gpt("single");
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

TEST(CheckpointReaderTest, AMissingCheckpointIsADataError) {
  TrainConfig c = small("toy", "single");
  c.checkpoint_dir = tmpdir("no_checkpoint_here");
  c.resume = true;  // the file is missing: data
  EXPECT_THROW(train(c, stdout), DataError);
}

}  // namespace
}  // namespace dpe::tools
