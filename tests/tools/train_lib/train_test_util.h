// What the tests of //tools/train_lib share: small runs of the toy, mlp and tiny gpt models, file
// helpers, and the edits that turn a checkpoint set into a damaged, edited or older one.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/io/safetensors.h"
#include "tools/train_lib/trainer.h"

namespace dpe::tools::train_test {

// $TEST_TMPDIR/name (/tmp/name outside Bazel).
std::string tmpdir(const std::string& name);

// A short run of `model` in `mode`: 256 training and 128 test samples, batches of 32, lr 0.05, on
// Fashion-MNIST for the image models; no progress line.
TrainConfig small(const std::string& model, const std::string& mode);

// gpt-small on the corpus's first 600 documents, a 400-piece tokenizer, windows of 16 tokens.
TrainConfig tiny_gpt(const std::string& mode);

// Equal names in order, and equal float values.
void expect_same_state(const StateDict& a, const StateDict& b);

// The root-mean-square difference of `a` and `b` relative to `a`'s values.
double relative_difference(const StateDict& a, const StateDict& b);

std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& bytes);
bool exists(const std::string& path);
std::vector<std::string> keys_of(const StateDict& state);

// Runs train() and returns its error message ("" when it did not throw).
std::string error_of(const TrainConfig& c);

// The epochs of metrics.jsonl's lines, in order (-1 for a line without one).
std::vector<int> metric_epochs(const std::string& path);

// The checkpoint set of a one-epoch toy run in `dir`, a fresh run: what an earlier one left there
// is removed first (train refuses a fresh run into a directory that holds a run).
void train_one_epoch(const std::string& dir);

// Rewrites the JSON file `path` of the set in `dir` through `edit` and records its new size in
// the manifest, as a consistent (but edited) set.
void edit_json(const std::string& dir, const std::string& path,
               const std::function<void(nlohmann::json&)>& edit);

// Turns the set in `dir` into the single-file layout dpe wrote before (the model's tensors, the
// optimizer's prefixed "optimizer.", metadata format dpe-train-1), its metadata then changed by
// `edit`.
void to_legacy_layout(const std::string& dir,
                      const std::function<void(SafetensorsMetadata&)>& edit = {});

// Resumes the toy run in `dir` to 3 epochs and returns its DataError's message ("" if none).
std::string resume_error(const std::string& dir);

}  // namespace dpe::tools::train_test
