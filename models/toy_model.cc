#include "models/toy_model.h"

#include "engine/nn/activation.h"
#include "engine/nn/linear.h"
#include "models/registry.h"

namespace dpe::models {

ToyModel::ToyModel(Generator& gen) {
  register_module("net1", std::make_shared<nn::Linear>(10, 10, gen));
  register_module("relu", std::make_shared<nn::ReLU>());
  register_module("net2", std::make_shared<nn::Linear>(10, 5, gen));
}

Tensor ToyModel::forward(const Tensor& x) {
  return child("net2").forward(child("relu").forward(child("net1").forward(x)));
}

namespace {
std::shared_ptr<Module> make_toy(Generator& gen, const ModelOptions&) {
  return std::make_shared<ToyModel>(gen);
}
}  // namespace

DPE_REGISTER_MODEL("toy", make_toy, regression("synthetic regression, Linear-ReLU-Linear"));

}  // namespace dpe::models
