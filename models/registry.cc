#include "models/registry.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "engine/core/error.h"

namespace dpe::models {

namespace {

struct Entry {
  ModelFactory factory;
  ModelInfo info;
};

struct Registry {
  std::mutex mu;
  std::map<std::string, Entry> entries;
};

Registry& registry() {
  static Registry* r = new Registry();  // leaked: models may be made during static destruction
  return *r;
}

std::string known_names() {
  std::string joined;
  for (const std::string& name : model_names()) joined += (joined.empty() ? "" : ", ") + name;
  return joined.empty() ? "none is registered" : "registered: " + joined;
}

Entry find(const std::string& name) {
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.entries.find(name);
    if (it != r.entries.end()) return it->second;
  }
  DPE_THROW("unknown model '" << name << "' (" << known_names() << ")");
}

}  // namespace

ModelInfo regression(std::string summary) {
  ModelInfo info;
  info.task = ModelTask::kRegression;
  info.summary = std::move(summary);
  return info;
}

ModelInfo image_classifier(std::string summary, int64_t image_size) {
  ModelInfo info;
  info.task = ModelTask::kImageClassification;
  info.summary = std::move(summary);
  info.image_size = image_size;
  return info;
}

ModelInfo language_model(std::string summary, int64_t block_size) {
  ModelInfo info;
  info.task = ModelTask::kLanguageModel;
  info.summary = std::move(summary);
  info.block_size = block_size;
  return info;
}

bool register_model(const std::string& name, ModelFactory factory, ModelInfo info) {
  DPE_CHECK(!name.empty(), "register_model: empty model name");
  DPE_CHECK(factory != nullptr, "register_model: model '" << name << "' has no factory");
  DPE_CHECK(info.task != ModelTask::kImageClassification || info.image_size > 0,
            "register_model: image classifier '" << name << "' needs an image size");
  DPE_CHECK(info.task != ModelTask::kLanguageModel || info.block_size > 0,
            "register_model: language model '" << name << "' needs a block size");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  const bool added = r.entries.emplace(name, Entry{std::move(factory), std::move(info)}).second;
  DPE_CHECK(added, "register_model: model '" << name << "' is already registered");
  return true;
}

std::shared_ptr<Module> make_model(const std::string& name, Generator& gen,
                                   const ModelOptions& options) {
  DPE_CHECK(options.vocab_size >= 0,
            "model " << name << ": vocabulary size " << options.vocab_size << " is negative");
  DPE_CHECK(options.in_channels >= 0,
            "model " << name << ": in_channels " << options.in_channels << " is negative");
  const Entry entry = find(name);  // a copy: the factory runs without the lock
  std::shared_ptr<Module> model = entry.factory(gen, options);
  DPE_CHECK(model != nullptr, "model " << name << ": its factory returned no model");
  return model;
}

bool has_model(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.entries.count(name) != 0;
}

ModelInfo model_info(const std::string& name) { return find(name).info; }

std::vector<std::string> model_names() {
  std::vector<std::pair<ModelTask, std::string>> keyed;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    for (const auto& [name, entry] : r.entries) keyed.emplace_back(entry.info.task, name);
  }
  std::sort(keyed.begin(), keyed.end());
  std::vector<std::string> names;
  for (auto& [task, name] : keyed) names.push_back(std::move(name));
  return names;
}

bool is_language_model(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.entries.find(name);
  return it != r.entries.end() && it->second.info.task == ModelTask::kLanguageModel;
}

}  // namespace dpe::models
