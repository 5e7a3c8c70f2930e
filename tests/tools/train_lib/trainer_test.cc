// //tools:train's loop: resume equals an uninterrupted run (from the checkpoint set and from the
// older single-file layout), a corrupt checkpoint is refused naming the file and the key, a write
// killed before or after its commit leaves one whole set, errors sorted into usage and data, the
// leftovers of a killed run cleaned up (staged and temporary files, metrics lines without a
// checkpoint), a non-finite loss stops with
// the epoch and step named and leaves the last checkpoint intact; the gpt models train on a tiny
// slice of the language-model corpus (a 400-piece tokenizer trained in the test's own cache in
// about a second; no network) in single and dp modes.
#include "tools/train_lib/trainer.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <iterator>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/core/error.h"
#include "engine/io/safetensors.h"
#include "tools/common/exit_codes.h"

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

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), {});
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

std::vector<std::string> keys_of(const StateDict& state) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : state) keys.push_back(k);
  return keys;
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

// Each file of the set, damaged in turn, is refused with a message naming it (and the key).
TEST(TrainerTest, CorruptCheckpointIsRefusedWithItsName) {
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

TEST(TrainerTest, NonFiniteLossStopsAndKeepsTheLastGoodCheckpoint) {
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
  c.max_steps_per_epoch = 2;
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

std::vector<int> metric_epochs(const std::string& path) {
  std::vector<int> epochs;
  std::ifstream log(path);
  for (std::string l; std::getline(log, l);) {
    const size_t at = l.find("\"epoch\":");
    epochs.push_back(at == std::string::npos ? -1 : std::atoi(l.c_str() + at + 8));
  }
  return epochs;
}

// The checkpoint set of a one-epoch toy run in `dir`, a fresh run: what an earlier one left there
// is removed first (train refuses a fresh run into a directory that holds a run).
void train_one_epoch(const std::string& dir) {
  for (const std::string& f : {checkpoint_manifest_path(dir), legacy_checkpoint_path(dir),
                               model_checkpoint_path(dir), optimizer_checkpoint_path(dir),
                               training_state_path(dir), metrics_path(dir)}) {
    ::unlink(f.c_str());
  }
  TrainConfig c = small("toy", "single");
  c.checkpoint_dir = dir;
  train(c, stdout);
}

// Rewrites the JSON file `path` of the set in `dir` through `edit` and records its new size in
// the manifest, as a consistent (but edited) set.
void edit_json(const std::string& dir, const std::string& path,
               const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(read_file(path));
  edit(j);
  write_file(path, j.dump());
  if (path == checkpoint_manifest_path(dir)) return;
  nlohmann::json manifest = nlohmann::json::parse(read_file(checkpoint_manifest_path(dir)));
  const std::string text = read_file(path);
  manifest["files"]["training_state.json"] = text.size();
  char crc[9];
  std::snprintf(crc, sizeof crc, "%08lx",
                crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(text.data()),
                      static_cast<uInt>(text.size())));
  manifest["crc32"]["training_state.json"] = crc;
  write_file(checkpoint_manifest_path(dir), manifest.dump());
}

// Turns the set in `dir` into the single-file layout dpe wrote before (the model's tensors, the
// optimizer's prefixed "optimizer.", metadata format dpe-train-1), its metadata then changed by
// `edit`.
void to_legacy_layout(const std::string& dir,
                      const std::function<void(SafetensorsMetadata&)>& edit = {}) {
  StateDict all = load_safetensors(model_checkpoint_path(dir));
  for (auto& [k, v] : load_safetensors(optimizer_checkpoint_path(dir))) {
    all.emplace_back("optimizer." + k, v);
  }
  const nlohmann::json state = nlohmann::json::parse(read_file(training_state_path(dir)));
  SafetensorsSaveOptions o;
  o.metadata = {{"epoch", std::to_string(state.at("epoch").get<int>())},
                {"model", state.at("model")},
                {"mode", state.at("mode")},
                {"optimizer", state.at("optimizer")},
                {"format", "dpe-train-1"}};
  if (state.contains("context"))
    o.metadata["context"] = std::to_string(state.at("context").get<int>());
  if (edit) edit(o.metadata);
  save_safetensors(legacy_checkpoint_path(dir), all, o);
  for (const std::string& f : {checkpoint_manifest_path(dir), model_checkpoint_path(dir),
                               optimizer_checkpoint_path(dir), training_state_path(dir)}) {
    ::unlink(f.c_str());
  }
}

// Resumes the toy run in `dir` to 3 epochs and returns its DataError's message ("" if none).
std::string resume_error(const std::string& dir) {
  TrainConfig c = small("toy", "single");
  c.checkpoint_dir = dir;
  c.resume = true;
  c.epochs = 3;
  try {
    train(c, stdout);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

// Every metadata value train reads on resume is checked: "2147483647" does not overflow
// stoi(...) + 1 into epochs near INT_MIN, "-3" does not train epochs -2..1; the message names the file and the key, and the error is a
// DataError (exit code 3).
TEST(TrainerTest, CheckpointMetadataIsValidated) {
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
TEST(TrainerTest, TrainingStateAndManifestAreValidated) {
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
TEST(TrainerTest, OldSingleFileLayoutResumes) {
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

// A write killed at any point leaves one whole set. Before the manifest's rename (the commit) the
// previous set stays and the staged files go; after it, the next start moves the staged files
// into place. Both resume to the result of an uninterrupted run.
TEST(TrainerTest, AKilledWriteLeavesOneWholeSet) {
  TrainConfig c = small("toy", "single");
  c.epochs = 3;
  const TrainResult straight = train(c, stdout);
  const std::string dir = tmpdir("killed_write");
  c.checkpoint_dir = dir;
  const std::vector<std::string> names{"model.safetensors", "optimizer.safetensors",
                                       "training_state.json"};
  // The set of epoch 0 (generation 1) and that of epoch 1 (generation 2).
  std::vector<std::string> gen1, gen2;
  c.epochs = 1;
  train(c, stdout);
  for (const auto& n : names) gen1.push_back(read_file(dir + "/" + n));
  const std::string manifest1 = read_file(checkpoint_manifest_path(dir));
  c.epochs = 2;
  c.resume = true;
  train(c, stdout);
  for (const auto& n : names) gen2.push_back(read_file(dir + "/" + n));
  const std::string manifest2 = read_file(checkpoint_manifest_path(dir));
  const std::string metrics = read_file(metrics_path(dir));

  for (int committed = 0; committed < 2; ++committed) {
    for (size_t renamed = 0; renamed <= (committed ? names.size() : 0); ++renamed) {
      // Generation 1 in place; generation 2 staged (a torn model file when not committed), the
      // manifest of generation 2 when committed, `renamed` files of it already moved.
      write_file(checkpoint_manifest_path(dir), committed ? manifest2 : manifest1);
      for (size_t i = 0; i < names.size(); ++i) {
        ::unlink((dir + "/" + names[i] + ".next.2").c_str());
        const bool moved = committed && i < renamed;
        write_file(dir + "/" + names[i] + (moved ? "" : ".next.2"),
                   !committed && i == 0 ? gen2[i].substr(0, 100) : gen2[i]);
        if (!moved) write_file(dir + "/" + names[i], gen1[i]);
      }
      write_file(metrics_path(dir), metrics);
      c.epochs = 3;
      const TrainResult resumed = train(c, stdout);
      ASSERT_EQ(resumed.epochs.size(), committed ? 1u : 2u) << committed << " " << renamed;
      expect_same_state(resumed.final_state, straight.final_state);
      for (const auto& n : names) EXPECT_FALSE(exists(dir + "/" + n + ".next.2")) << n;
      EXPECT_EQ(metric_epochs(metrics_path(dir)), (std::vector<int>{0, 1, 2}));
    }
  }
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


// The staged and temporary files of killed checkpoint writes are removed at
// start (only names of our own patterns); metrics.jsonl never lacks the checkpoint's line, and on
// resume the lines after the checkpoint's epoch (a kill between the line and the manifest's
// rename) are dropped.
TEST(TrainerTest, LeftoversOfAKilledRunAreCleanedUp) {
  const std::string dir = tmpdir("leftovers");
  TrainConfig c = small("toy", "single");
  c.checkpoint_dir = dir;
  c.epochs = 2;
  train(c, stdout);
  EXPECT_EQ(metric_epochs(metrics_path(dir)), (std::vector<int>{0, 1}));
  // What a run killed in epoch 2 leaves: its metrics line, written before the manifest's
  // rename, a torn line, staged files of generation 3 and temporary files (also of the older
  // single-file layout).
  {
    std::ofstream log(metrics_path(dir), std::ios::app);
    log << "{\"epoch\":2,\"train_loss\":1.0}\n{\"epoch\":3,\"trai";
  }
  const std::vector<std::string> stale{"checkpoint.safetensors.tmp.Ab3xYz",
                                       "checkpoint.safetensors.tmp.000000",
                                       "checkpoint.json.tmp.q1W2e3",
                                       "model.safetensors.next.3",
                                       "optimizer.safetensors.next.3.tmp.Ab3xYz",
                                       "training_state.json.next.3"};
  const std::vector<std::string> foreign{"checkpoint.safetensors.tmp.toolong", "notes.tmp.Ab3xYz",
                                         "checkpoint.safetensors.tmp.Ab-xYz",
                                         "model.safetensors.next.x1",
                                         "model.safetensors.next.",
                                         "optimizer.safetensors.next.3.tmp.Ab",
                                         "training_state.json.old"};
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
  EXPECT_EQ(nlohmann::json::parse(read_file(training_state_path(dir))).at("epoch"), 3);
}

// --max-steps counts optimizer steps over the whole run (Hugging Face's max_steps): fewer than
// an epoch's stop inside the first epoch whatever --epochs says, more than --epochs' worth take
// more epochs, and the last epoch ends where the count is reached. --max-steps-per-epoch cuts
// each epoch, and the total still holds.
TEST(TrainerTest, MaxStepsCountsTheWholeRun) {
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
TEST(TrainerTest, AResumedRunKeepsTheTotalOfMaxSteps) {
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
