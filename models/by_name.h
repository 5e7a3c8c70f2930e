// make_model: the models by the names the tools take on their command lines.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/nn/module.h"
#include "engine/tensor/random.h"

namespace dpe::models {

struct ModelOptions {
  // Language models: the tokenizer's vocabulary size (the LM corpus's is 32 000); 0 keeps the
  // configuration's (gpt2: 50 257, gpt-small: 32 000). Ignored by the other models.
  int64_t vocab_size = 0;
  // The resnets: input image channels; 0 keeps the configuration's (3, torchvision's). The tools
  // pass 1 for Fashion-MNIST's grayscale images. Ignored by the other models (toy, mlp and
  // convnet take their fixed inputs; the gpt models tokens).
  int64_t in_channels = 0;
};

// "toy" (ToyModel), "mlp" (Mlp), "convnet" (ConvNet), "resnet50" or "resnet-tiny" (ResNet with
// resnet_config(name): images [N, 3, H, W], or [N, options.in_channels, H, W]), "gpt-small" or
// "gpt2" (Gpt with gpt_config(name)); throws dpe::Error naming an unknown one.
std::shared_ptr<Module> make_model(const std::string& name, Generator& gen,
                                   const ModelOptions& options = {});

// Whether `name` is a language model (int64 tokens [B, T] in, logits [B, T, V] out).
bool is_language_model(const std::string& name);

}  // namespace dpe::models
