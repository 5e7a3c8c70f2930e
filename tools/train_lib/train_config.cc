#include "tools/train_lib/train_config.h"

#include <algorithm>
#include <cstdlib>

#include "engine/data/fashion_mnist.h"
#include "models/by_name.h"
#include "tools/common/exit_codes.h"

namespace dpe::tools {

namespace {

// The registered language models, "gpt-small, gpt2".
std::string language_model_list() {
  std::string names;
  for (const std::string& name : trainable_models()) {
    if (models::is_language_model(name)) names += (names.empty() ? "" : ", ") + name;
  }
  return names;
}

}  // namespace

std::vector<std::string> trainable_models() {
  std::vector<std::string> names;
  for (const std::string& name : models::model_names()) {
    const models::ModelInfo info = models::model_info(name);
    if (info.task != models::ModelTask::kImageClassification ||
        info.image_size == FashionMnist::kRows) {
      names.push_back(name);
    }
  }
  return names;
}

TrainConfig resolve_defaults(const TrainConfig& config) {
  TrainConfig c = config;
  const std::vector<std::string> models = trainable_models();
  if (std::find(models.begin(), models.end(), c.model) == models.end()) {
    std::string names;
    for (const std::string& name : models) names += (names.empty() ? "" : ", ") + name;
    DPE_TOOLS_CHECK(UsageError, false, "--model " << c.model << ": train takes one of " << names);
  }
  const bool lm = models::is_language_model(c.model);
  if (c.optimizer.empty()) c.optimizer = lm ? "adamw" : "sgd";
  DPE_TOOLS_CHECK(UsageError, c.optimizer == "sgd" || c.optimizer == "adamw",
                  "unknown optimizer '" << c.optimizer << "' (expected sgd or adamw)");
  // AdamW's learning rate: nanoGPT's choices, 6e-4 for GPT-2 124 M (GPT-3's paper for its 125 M
  // model) and 1e-3 for its small models, which tolerate a larger step and learn faster in a
  // short run. SGD keeps the Fashion-MNIST default.
  if (c.lr < 0) c.lr = c.optimizer == "sgd" ? 0.01f : (c.model == "gpt2" ? 6e-4f : 1e-3f);
  if (c.weight_decay < 0) c.weight_decay = c.optimizer == "adamw" ? 0.01f : 0.0f;
  if (c.clip_grad_norm < 0) c.clip_grad_norm = lm ? 1.0f : 0.0f;
  if (c.batch_size == 0) c.batch_size = lm ? 16 : 100;
  if (lm) {
    const int64_t block_size = models::model_info(c.model).block_size;
    DPE_TOOLS_CHECK(UsageError, c.context >= 0 && c.context <= block_size,
                    "--context " << c.context << " must be between 1 and " << c.model
                                 << "'s block size " << block_size);
    if (c.context == 0) c.context = block_size;
    DPE_TOOLS_CHECK(UsageError, c.vocab_size >= 2,
                    "--vocab-size " << c.vocab_size << " is too small");
    DPE_TOOLS_CHECK(UsageError, !c.sync_bn,
                    "--sync-bn: " << c.model << " has no BatchNorm to synchronise");
  } else {
    DPE_TOOLS_CHECK(UsageError, !c.activation_checkpointing,
                    "--activation-checkpointing: "
                        << c.model
                        << " has no unit to checkpoint (the gpt models' transformer blocks are "
                           "the only ones)");
    DPE_TOOLS_CHECK(UsageError, c.context == 0,
                    "--context applies to the gpt models only, not " << c.model);
    DPE_TOOLS_CHECK(UsageError, c.text.empty(),
                    "--text is the language models' data (" << language_model_list() << "), not "
                                                            << c.model << "'s");
  }
  return c;
}

bool ranked(const TrainConfig& c) { return c.mode == "ddp" || c.mode == "fsdp"; }

std::string ddp_backend(const TrainConfig& c) {
  if (c.backend != "auto") return c.backend;
  if (c.device == "cuda") return "nccl";
  return std::getenv("OMPI_COMM_WORLD_RANK") != nullptr ? "mpi" : "gloo";
}

}  // namespace dpe::tools
