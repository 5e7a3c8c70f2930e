// The model registry: every model the tools know by name joins it from its own .cc file, as a
// device type joins the device registry (engine/device/device_registry.h), so nothing lists the
// models in one place:
//
//   std::shared_ptr<Module> make_mlp(Generator& gen, const ModelOptions&) { ... }
//   DPE_REGISTER_MODEL("mlp", make_mlp, image_classifier("784-512-512-10 MLP", 28));
//
// A model's library is built with alwayslink = True (nothing references the registration, so the
// linker would drop it otherwise) and is a dep of //models:by_name, which the tools link.
//
// Threading contract: register_model at static initialisation (or from any thread later);
// every lookup from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/nn/module.h"
#include "engine/tensor/random.h"

namespace dpe::models {

struct ModelOptions {
  // Language models: the tokenizer's vocabulary size (the LM corpus's is 32 000); 0 keeps the
  // configuration's (gpt2: 50 257, gpt-small: 32 000). Ignored by the other models.
  int64_t vocab_size = 0;
  // Image classifiers: input image channels; 0 keeps the model's own (3 for the resnets,
  // torchvision's). The tools pass 1 for Fashion-MNIST's grayscale images; models made for
  // those only (mlp, convnet) ignore it.
  int64_t in_channels = 0;
};

// What a model computes, hence which data and loss the tools give it.
enum class ModelTask {
  kRegression,           // float32 [N, 10] -> [N, 5], MSE: the toy's synthetic regression
  kImageClassification,  // float32 images [N, C, H, W] -> logits [N, 10], cross entropy
  kLanguageModel,        // int64 tokens [B, T] -> logits [B, T, V], the LM loss (models/gpt.h)
};

struct ModelInfo {
  ModelTask task = ModelTask::kImageClassification;
  std::string summary;     // one line for the tools' --help
  int64_t image_size = 0;  // image classifiers: the side of the square images it is made for
                           // (28: Fashion-MNIST's, which //tools:train reads)
  int64_t block_size = 0;  // language models: the longest context it takes
};

// The entries of the three tasks.
ModelInfo regression(std::string summary);
ModelInfo image_classifier(std::string summary, int64_t image_size);
ModelInfo language_model(std::string summary, int64_t block_size);

using ModelFactory = std::function<std::shared_ptr<Module>(Generator&, const ModelOptions&)>;

// Adds `name`; throws dpe::Error when the name is empty or taken. Returns true (for the macro).
bool register_model(const std::string& name, ModelFactory factory, ModelInfo info);

// A new `name` model, its weights drawn from `gen`; throws dpe::Error naming an unknown one and
// the registered names.
std::shared_ptr<Module> make_model(const std::string& name, Generator& gen,
                                   const ModelOptions& options = {});

// Whether `name` is registered.
bool has_model(const std::string& name);
// `name`'s entry; throws dpe::Error naming an unknown one and the registered names.
ModelInfo model_info(const std::string& name);
// Every registered name: regression first, then image classifiers, then language models, each by
// name.
std::vector<std::string> model_names();
// Whether `name` is a registered language model (int64 tokens [B, T] in, logits [B, T, V] out).
bool is_language_model(const std::string& name);

}  // namespace dpe::models

#define DPE_MODEL_CONCAT_INNER(a, b) a##b
#define DPE_MODEL_CONCAT(a, b) DPE_MODEL_CONCAT_INNER(a, b)

// Registers model `name`, made by `factory` (a ModelFactory) and described by `info` (a
// ModelInfo), when the program starts. At namespace scope, in the model's .cc.
#define DPE_REGISTER_MODEL(name, factory, info)                                             \
  [[maybe_unused]] static const bool DPE_MODEL_CONCAT(dpe_model_registered_, __COUNTER__) = \
      ::dpe::models::register_model(name, factory, info)
