// make_model: the seeds' models by the names the tools take on their command lines.
#pragma once

#include <memory>
#include <string>

#include "engine/nn/module.h"
#include "engine/tensor/random.h"

namespace dpe::models {

// "toy" (ToyModel), "mlp" (Mlp) or "convnet" (ConvNet); throws dpe::Error naming an unknown one.
std::shared_ptr<Module> make_model(const std::string& name, Generator& gen);

}  // namespace dpe::models
