#include "tests/tools/train_lib/train_test_util.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "engine/core/error.h"
#include "tools/common/exit_codes.h"

namespace dpe::tools::train_test {

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

void expect_same_state(const StateDict& a, const StateDict& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    if (a[i].second.dtype() == DType::kFloat32) {
      EXPECT_EQ(a[i].second.to_vector<float>(), b[i].second.to_vector<float>()) << a[i].first;
    } else {
      EXPECT_EQ(a[i].second.to_vector<int64_t>(), b[i].second.to_vector<int64_t>()) << a[i].first;
    }
  }
}

double relative_difference(const StateDict& a, const StateDict& b) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].second.dtype() != DType::kFloat32) continue;  // BatchNorm's num_batches_tracked
    const auto x = a[i].second.to_vector<float>();
    const auto y = b[i].second.to_vector<float>();
    for (size_t k = 0; k < x.size(); ++k) {
      diff += (x[k] - y[k]) * (x[k] - y[k]);
      ref += x[k] * x[k];
    }
  }
  return std::sqrt(diff / ref);
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

std::string error_of(const TrainConfig& c) {
  try {
    train(c, stdout);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<int> metric_epochs(const std::string& path) {
  std::vector<int> epochs;
  std::ifstream log(path);
  for (std::string l; std::getline(log, l);) {
    const size_t at = l.find("\"epoch\":");
    epochs.push_back(at == std::string::npos ? -1 : std::atoi(l.c_str() + at + 8));
  }
  return epochs;
}

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

void to_legacy_layout(const std::string& dir,
                      const std::function<void(SafetensorsMetadata&)>& edit) {
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

}  // namespace dpe::tools::train_test
